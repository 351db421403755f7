"""The registry's queue calls per client id: order, and offline limits that wait for
company, leave together, and give way to the id's next call."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from services.common.session_key import SessionKey
from services.registry import queue_calls
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
        self.fail_open = False

    async def open_queue(self, step: OpenQueue) -> None:
        if self.hold is not None:
            await self.hold.wait()
        if self.fail_open:
            raise BackendError("msgstore", "Open", "UNAVAILABLE", "down")
        self.calls.append(("open", step.key, step.epoch, step.max_len))

    async def delete_queue(self, step: DeleteQueue) -> None:
        self.calls.append(("delete", step.key, step.epoch))

    async def limit_queues(self, limits: Sequence[tuple[SessionKey, int, int]]) -> None:
        self.calls.append(("limit", *limits))


def _calls(store: FakeStore) -> QueueCalls:
    return QueueCalls(store, lambda step, exc: None)  # type: ignore[arg-type]


async def _after_the_window() -> None:
    await asyncio.sleep(queue_calls.LIMIT_BEHIND + 0.02)


def test_limits_of_one_turn_leave_in_one_call() -> None:
    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        calls.limit_behind(A, 3, 1000)
        calls.limit_behind(B, 5, 1000)
        assert store.calls == []  # leaving at the end of this turn, together
        await _after_the_window()
        return store.calls

    assert asyncio.run(run()) == [("limit", (A, 3, 1000), (B, 5, 1000))]


def test_a_waiting_limit_gives_way_to_the_ids_next_call() -> None:
    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        calls.limit_behind(A, 3, 1000)
        calls.limit_behind(B, 5, 1000)
        await calls.open(OpenQueue(A, 4, False, 1020))  # A reconnects within the window
        calls.limit_behind(B, 5, 1000)  # a second end of B's epoch: one limit still
        await _after_the_window()
        return store.calls

    assert asyncio.run(run()) == [("open", A, 4, 1020), ("limit", (B, 5, 1000))]


def test_a_resume_behind_its_answer_drops_the_waiting_limit() -> None:
    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        calls.limit_behind(A, 3, 1000)
        calls.open_behind(OpenQueue(A, 4, False, 1020))
        await _after_the_window()
        await calls.close()
        return store.calls

    assert asyncio.run(run()) == [("open", A, 4, 1020)]


def test_a_limit_leaves_after_the_ids_call_still_running() -> None:
    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        store.hold = asyncio.Event()
        calls.open_behind(OpenQueue(A, 4, False, 1020))  # held by the store
        calls.limit_behind(A, 4, 1000)  # the resumed session ended at once
        calls.limit_behind(B, 5, 1000)
        await _after_the_window()
        assert store.calls == []  # the batch waits for A's Open
        store.hold.set()
        await _after_the_window()
        return store.calls

    assert asyncio.run(run()) == [
        ("open", A, 4, 1020),
        ("limit", (A, 4, 1000), (B, 5, 1000)),
    ]


def test_the_next_call_waits_for_a_limit_already_sent() -> None:
    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        release = asyncio.Event()
        sent: list[tuple[Any, ...]] = []

        async def slow_limits(limits: Sequence[tuple[SessionKey, int, int]]) -> None:
            sent.append(tuple(limits))
            await release.wait()
            store.calls.append(("limit", *limits))

        store.limit_queues = slow_limits  # type: ignore[method-assign]
        calls.limit_behind(A, 3, 1000)
        await _after_the_window()
        assert sent  # out, unanswered
        deleting = asyncio.create_task(calls.delete(DeleteQueue(A, 3, "expired")))
        await asyncio.sleep(0.01)
        assert not deleting.done()
        release.set()
        await deleting
        return store.calls

    assert asyncio.run(run()) == [("limit", (A, 3, 1000)), ("delete", A, 3)]


def test_a_failed_call_leaves_the_limit_waiting() -> None:
    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        calls.limit_behind(A, 3, 1000)
        store.fail_open = True
        with pytest.raises(BackendError):
            await calls.open(OpenQueue(A, 4, True, 1020))
        await _after_the_window()
        return store.calls

    assert asyncio.run(run()) == [("limit", (A, 3, 1000))]


def test_close_sends_the_waiting_limits_at_once() -> None:
    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        calls.limit_behind(A, 3, 1000)
        await calls.close()
        return store.calls

    assert asyncio.run(run()) == [("limit", (A, 3, 1000))]


def test_a_long_wait_leaves_in_calls_of_at_most_max_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_calls, "MAX_LIMITS", 2)

    async def run() -> list[tuple[Any, ...]]:
        store = FakeStore()
        calls = _calls(store)
        for n in range(5):
            calls.limit_behind(("", f"c{n}"), n + 1, 1000)
        await _after_the_window()
        return store.calls

    sizes = [len(call) - 1 for call in asyncio.run(run())]
    assert sizes == [2, 2, 1]
