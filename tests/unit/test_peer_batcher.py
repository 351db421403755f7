"""``msgstore.cluster.batcher.PeerBatcher``: a request leaves at once when nothing is out,
requests that arrive while calls are out share the next call, every caller gets its own
reply (or its call's exception), and a caller that gives up does not disturb the rest."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.msgstore.cluster import batcher as batcher_mod
from services.msgstore.cluster.batcher import PeerBatcher


class Peer:
    """A peer whose calls finish when the test says so."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.gates: list[asyncio.Future[None]] = []
        self.fail: set[int] = set()  # call numbers that raise

    async def send(self, reqs: list[int]) -> list[str]:
        n = len(self.calls)
        self.calls.append(list(reqs))
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.gates.append(gate)
        await gate
        if n in self.fail:
            raise ConnectionError(f"call {n}")
        return [f"r{r}" for r in reqs]


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_alone_a_request_leaves_at_once_and_batches_form_while_busy() -> None:
    async def run() -> None:
        peer = Peer()
        b: PeerBatcher[int, str] = PeerBatcher(peer.send, lambda r: 1, max_inflight=1)
        first = asyncio.ensure_future(b.call(1))
        await _settle()
        assert peer.calls == [[1]]  # sent alone, no waiting for company
        rest = [asyncio.ensure_future(b.call(r)) for r in (2, 3, 4)]
        await _settle()
        assert peer.calls == [[1]]  # held while the one call is out
        peer.gates[0].set_result(None)
        assert await first == "r1"
        await _settle()
        assert peer.calls == [[1], [2, 3, 4]]
        peer.gates[1].set_result(None)
        assert [await f for f in rest] == ["r2", "r3", "r4"]

    asyncio.run(run())


def test_a_failed_call_fails_its_callers_only() -> None:
    async def run() -> None:
        peer = Peer()
        peer.fail = {0}
        b: PeerBatcher[int, str] = PeerBatcher(peer.send, lambda r: 1, max_inflight=2)
        a = asyncio.ensure_future(b.call(1))
        await _settle()
        c = asyncio.ensure_future(b.call(2))
        await _settle()
        assert peer.calls == [[1], [2]]
        peer.gates[0].set_result(None)
        peer.gates[1].set_result(None)
        with pytest.raises(ConnectionError):
            await a
        assert await c == "r2"

    asyncio.run(run())


def test_a_caller_that_gives_up_is_not_sent_and_does_not_disturb_the_rest() -> None:
    async def run() -> None:
        peer = Peer()
        b: PeerBatcher[int, str] = PeerBatcher(peer.send, lambda r: 1, max_inflight=1)
        first = asyncio.ensure_future(b.call(1))
        await _settle()
        gone = asyncio.ensure_future(b.call(2))
        kept = asyncio.ensure_future(b.call(3))
        await _settle()
        gone.cancel()
        peer.gates[0].set_result(None)
        await first
        await _settle()
        assert peer.calls == [[1], [3]]
        peer.gates[1].set_result(None)
        assert await kept == "r3"

    asyncio.run(run())


def test_a_batch_is_cut_at_its_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batcher_mod, "MAX_BATCH_BYTES", 10)

    async def run() -> None:
        peer = Peer()
        b: PeerBatcher[int, str] = PeerBatcher(peer.send, lambda r: r, max_inflight=1)
        first = asyncio.ensure_future(b.call(1))
        await _settle()
        later = [asyncio.ensure_future(b.call(r)) for r in (4, 5, 3, 20)]
        await _settle()
        for i in range(4):
            peer.gates[i].set_result(None)
            await _settle()
        await first
        assert [await f for f in later] == ["r4", "r5", "r3", "r20"]
        # 4 + 5 fit in 10; 3 starts the next; 20 is over the budget alone and goes alone
        assert peer.calls == [[1], [4, 5], [3], [20]]

    asyncio.run(run())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.booleans()),  # (yields before the call, fails)
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 3),
)
def test_every_caller_hears_exactly_its_own_outcome(
    plan: list[tuple[int, bool]], inflight: int
) -> None:
    """Random arrival times and failing calls: each caller gets the reply to its own
    request, or the exception of the call that carried it; calls never exceed
    ``max_inflight`` at once, and every request is sent exactly once, in arrival order."""

    async def run() -> None:
        sent: list[int] = []
        out = 0
        most = 0

        async def send(reqs: list[int]) -> list[str]:
            nonlocal out, most
            out += 1
            most = max(most, out)
            sent.extend(reqs)
            await asyncio.sleep(0)
            out -= 1
            if any(plan[r][1] for r in reqs):
                raise ConnectionError(str(reqs))
            return [f"r{r}" for r in reqs]

        b: PeerBatcher[int, str] = PeerBatcher(send, lambda r: 1, max_inflight=inflight)

        async def caller(i: int, pause: int) -> str:
            for _ in range(pause):
                await asyncio.sleep(0)
            try:
                return await b.call(i)
            except ConnectionError as exc:
                assert str(i) in str(exc).strip("[]").split(", ")
                return "failed"

        results = await asyncio.gather(*(caller(i, p) for i, (p, _) in enumerate(plan)))
        for i, got in enumerate(results):
            if got != "failed":
                assert got == f"r{i}"
        assert sorted(sent) == list(range(len(plan)))
        assert most <= inflight

    asyncio.run(run())
