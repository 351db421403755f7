"""A resuming session whose client left before its queue was read reads nothing: the
queue stays in the store for the next connection, and the listener holds no copy of it
for a connection nobody will write to (the fuzzer's connect-and-vanish cases)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import grpc

from services.listener.lifecycle import Lifecycle
from services.listener.meta_writer import MetaWriter
from services.listener.routing.router import Router
from services.listener.routing.shared import SharedPolicy
from services.listener.wills import Wills
from services.pb import gossip_pb2_grpc, registry_pb2_grpc


class FakeStore:
    def __init__(self) -> None:
        self.reads = 0

    def flush(self) -> asyncio.Future[str]:
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        fut.set_result("")
        return fut

    async def read(self, *args: Any) -> Any:
        self.reads += 1
        raise AssertionError("a closed connection's queue was read")


class GoneConn:
    closed = True

    def resume(self, *args: Any) -> None:
        raise AssertionError("nothing to replay to")


def test_a_connection_gone_before_its_resume_reads_no_queue() -> None:
    """Real collaborators where the compiled build checks their types; the store (a
    Protocol there) is the double. The channel is never used: nothing connects."""
    store = FakeStore()

    async def main() -> None:
        channel = grpc.aio.insecure_channel("unix:///nonexistent/ternmq-test.sock")
        life = Lifecycle(
            "n",
            "n",
            "l",
            0,
            registry_pb2_grpc.RegistryStub(channel),
            store,
            Router("n", SharedPolicy.PREFER_LOCAL, False, random.Random(0)),
            Wills(lambda _msg: None, lambda: "id"),
            MetaWriter(gossip_pb2_grpc.GossipStub(channel), "n"),
            lambda _coro, _name: None,
        )
        await life._resume(GoneConn(), ("", "c1"), 3)  # type: ignore[arg-type]
        await channel.close()

    asyncio.run(main())
    assert store.reads == 0
