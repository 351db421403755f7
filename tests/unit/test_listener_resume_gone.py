"""A resuming session whose client left before its queue was read reads nothing: the
queue stays in the store for the next connection, and the listener holds no copy of it
for a connection nobody will write to (the fuzzer's connect-and-vanish cases)."""

from __future__ import annotations

import asyncio
from typing import Any

from services.listener.lifecycle import Lifecycle


class FakeStore:
    def __init__(self) -> None:
        self.reads = 0

    def flush(self) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def read(self, *args: Any) -> Any:
        self.reads += 1
        raise AssertionError("a closed connection's queue was read")


class GoneConn:
    closed = True

    def resume(self, *args: Any) -> None:
        raise AssertionError("nothing to replay to")


def test_a_connection_gone_before_its_resume_reads_no_queue() -> None:
    store = FakeStore()
    life = Lifecycle("n", "l", 0, None, store, None, None, None, None)  # type: ignore[arg-type]
    asyncio.run(life._resume(GoneConn(), ("", "c1"), 3))  # type: ignore[arg-type]
    assert store.reads == 0
