"""The streams' Pacer: a batch leaves at once when idle, gathers while one is unanswered."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.common.grpcutil import Pacer


def test_idle_sends_at_once() -> None:
    p = Pacer()
    assert p.may_send()
    p.sent()
    assert not p.may_send()  # busy: the next batch gathers
    p.answered()
    assert p.may_send()  # answered: it leaves at once, no timer


def test_sequential_ops_never_wait() -> None:
    """One op at a time, each answered before the next: every one leaves at once."""
    p = Pacer()
    for _ in range(100):
        assert p.may_send()
        p.sent()
        p.answered()
    assert p.inflight == 0


def test_an_answer_that_finds_nothing_in_flight_is_not_banked() -> None:
    """A late result of an older batch must not let two batches leave on one answer."""
    p = Pacer()
    p.answered()
    p.answered()
    p.sent()
    assert not p.may_send()


def test_max_inflight_bounds_the_batches_in_flight() -> None:
    p = Pacer(max_inflight=2)
    p.sent()
    assert p.may_send()
    p.sent()
    assert not p.may_send()
    p.answered()
    assert p.may_send()
    assert Pacer(max_inflight=0).max_inflight == 1  # never zero: a stream must move


@given(st.lists(st.sampled_from(["op", "answer"]), max_size=200))
def test_a_storm_gathers_while_busy_and_loses_no_op(events: list[str]) -> None:
    """Drive a one-in-flight stream: ops arrive, answers come back. Every op leaves in
    exactly one batch, a batch leaves only when nothing is in flight, and an op that
    arrives while the stream is idle leaves alone, at once."""
    p = Pacer()
    gathered: list[int] = []
    batches: list[list[int]] = []
    inflight = 0
    ops = 0
    for event in events:
        if event == "op":
            ops += 1
            gathered.append(ops)
        elif inflight:
            inflight -= 1
            p.answered()
        if gathered and p.may_send():
            assert inflight == 0
            batches.append(gathered)
            gathered = []
            p.sent()
            inflight += 1
    assert [op for b in batches for op in b] + gathered == list(range(1, ops + 1))
    assert all(len(b) == 1 for b in batches[:1])  # the first op found the stream idle
