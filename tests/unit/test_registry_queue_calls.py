"""The registry's queue calls per client id: a call made behind an answer, and the id's
next call after it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.common.session_key import SessionKey
from services.registry.backends import BackendError
from services.registry.queue_calls import QueueCalls
from services.registry.sessions import DeleteQueue, OpenQueue

A: SessionKey = ("", "a")
B: SessionKey = ("", "b")


class FakeStore:
    """The calls the backends made, in order; an Open can be held or failed."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.hold: asyncio.Event | None = None
        self.fail_open = ""  # the error code an Open fails with ("" = none)

    async def open_queue(self, step: OpenQueue) -> None:
        if self.hold is not None:
            await self.hold.wait()
        if self.fail_open:
            raise BackendError("msgstore", "Open", self.fail_open, "down")
        self.calls.append(("open", step.key, step.epoch, step.max_len, step.max_offline))

    async def delete_queue(self, step: DeleteQueue) -> None:
        self.calls.append(("delete", step.key, step.epoch))


def _calls(store: FakeStore) -> QueueCalls:
    return QueueCalls(store, lambda step, exc: None)  # type: ignore[arg-type]


def test_the_ids_next_call_waits_for_an_open_behind_its_answer() -> None:
    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        store.hold = asyncio.Event()
        calls.open_behind(OpenQueue(A, 4, False, 1020, 1000))  # held by the store
        deleting = asyncio.create_task(calls.delete(DeleteQueue(A, 4, "expired")))
        await calls.delete(DeleteQueue(B, 5, "clean start"))  # another id: not held
        await asyncio.sleep(0.01)
        assert not deleting.done() and store.calls == [("delete", B, 5)]
        store.hold.set()
        await deleting
        return store.calls

    assert asyncio.run(run()) == [
        ("delete", B, 5),
        ("open", A, 4, 1020, 1000),
        ("delete", A, 4),
    ]


def test_an_open_behind_leaves_after_a_turn_of_the_loop() -> None:
    """The answer it is behind goes first (see ``QueueCalls._chain``)."""

    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        calls.open_behind(OpenQueue(A, 4, False, 1020, 1000))
        assert store.calls == []
        await calls.close()
        return store.calls

    assert asyncio.run(run()) == [("open", A, 4, 1020, 1000)]


@pytest.mark.parametrize(("code", "reported"), [("REFUSED", True), ("UNAVAILABLE", False)])
def test_an_open_behind_that_the_store_refuses_is_reported(code: str, reported: bool) -> None:
    """A refusal (a newer epoch holds the queue) goes to ``on_refused``; a store that did
    not answer is only logged, by the backends."""
    refused: list[tuple[OpenQueue, str]] = []

    async def run() -> None:
        store = FakeStore()
        store.fail_open = code
        calls = QueueCalls(store, lambda step, exc: refused.append((step, exc.code)))  # type: ignore[arg-type]
        calls.open_behind(OpenQueue(A, 4, False, 1020))
        await calls.close()

    asyncio.run(run())
    assert refused == ([(OpenQueue(A, 4, False, 1020), "REFUSED")] if reported else [])
