"""The streams' Pacer: a batch leaves at once when idle, gathers while the stream is busy."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.grpcutil import Pacer

W = 0.005


def test_an_idle_stream_sends_at_once_and_a_batch_in_flight_holds_the_next() -> None:
    p = Pacer(W)
    assert p.delay(10.0) == 0.0
    p.sent(1, 10.0)
    assert p.delay(10.0) is None  # in flight: the next batch gathers until answered
    p.answered()
    assert p.delay(10.0) == 0.0  # answered, and it carried a lone op: no timer


def test_a_client_connecting_alone_never_waits_for_the_window() -> None:
    """Each cycle: the CONNECT, then the Disconnected of the same connection, each
    answered before the next; sometimes both travel together. Never a timer."""
    p = Pacer(W)
    now = 100.0
    for i in range(200):
        assert p.delay(now) == 0.0
        p.sent(1 + i % Pacer.LONE, now)
        p.answered()
        now += 0.0003


def test_a_busy_stream_sends_a_window_apart_answered_or_not() -> None:
    p = Pacer(W)
    p.sent(30, 1.0)
    assert p.delay(1.001) == pytest.approx(0.004)  # in flight or not: the window
    assert p.delay(1.006) == 0.0  # not answered yet, and it leaves: a storm's cadence
    p.sent(12, 1.006)
    assert p.inflight == 2
    p.answered()
    p.answered()
    p.sent(1, 1.011)  # the storm is over: a lone op
    assert p.delay(1.0111) is None  # idle again: the next gathers until the answer
    p.answered()
    assert p.delay(1.0111) == 0.0


def test_an_answer_that_finds_nothing_in_flight_is_not_banked() -> None:
    """A late result of an older batch must not let two batches leave on one answer."""
    p = Pacer(W)
    p.answered()
    p.answered()
    p.sent(1, 0.0)
    assert p.delay(0.0) is None


def test_max_inflight_bounds_the_batches_in_flight() -> None:
    p = Pacer(W, max_inflight=2)
    p.sent(1, 0.0)
    assert p.delay(0.0) == 0.0
    p.sent(1, 0.0)
    assert p.delay(0.0) is None
    p.answered()
    assert p.delay(0.0) == 0.0
    assert Pacer(W, max_inflight=0).max_inflight == 1  # never zero: a stream must move


@given(st.lists(st.sampled_from(["op", "answer", "tick"]), max_size=300))
def test_a_storm_gathers_while_busy_and_loses_no_op(events: list[str]) -> None:
    """Drive a stream: ops arrive, answers come back, time passes (0.5 ms a tick). Every op
    leaves in exactly one batch, in order; a batch that follows one of more than LONE
    ops leaves no sooner than the window after it; a batch that follows lone ops leaves
    only with nothing in flight, and never waits for the clock."""
    p = Pacer(W)
    now = 0.0
    gathered: list[int] = []
    batches: list[tuple[float, list[int]]] = []
    inflight = ops = 0
    for event in events:
        if event == "op":
            ops += 1
            gathered.append(ops)
        elif event == "answer" and inflight:
            inflight -= 1
            p.answered()
        elif event == "tick":
            now += 0.0005
        wait = p.delay(now)
        busy = bool(batches) and len(batches[-1][1]) > Pacer.LONE
        if gathered and wait == 0.0:
            if busy:
                assert now >= batches[-1][0] + W - 1e-12
            else:
                assert inflight == 0
            batches.append((now, gathered))
            gathered = []
            p.sent(len(batches[-1][1]), now)
            inflight += 1
        elif gathered and inflight == 0 and not busy:
            raise AssertionError("a stream carrying lone ops waited for the clock")
    assert [op for _, b in batches for op in b] + gathered == list(range(1, ops + 1))


def test_one_answer_may_carry_several_receipts_or_none() -> None:
    p = Pacer(W)
    p.sent(30, 1.0)
    p.sent(30, 1.006)
    p.sent(1, 1.012)
    p.answered(0)  # late results only: nothing it answers is in flight
    assert p.inflight == 3
    p.answered(2)  # the registry read two batches while it wrote the previous answer
    assert p.inflight == 1
    assert p.delay(1.013) is None
    p.answered(1)
    assert p.delay(1.013) == 0.0


@settings(max_examples=300)
@given(
    st.lists(
        st.sampled_from(["op", "op", "op", "tick", "read", "write", "late"]),
        min_size=1,
        max_size=400,
    )
)
def test_both_ends_of_a_stream_never_wait_on_each_other(events: list[str]) -> None:
    """The listener's pacer against a registry that merges the receipts of the batches it
    read while writing into one answer, and sends late results with no receipt. Once the
    registry has read and answered every batch sent, the listener has nothing in flight,
    so ops gathered meanwhile leave at once (after the window if the stream was busy):
    the stream cannot stall with ops waiting and nothing to wake it. Counting answers
    rather than receipts stalled it after a storm (issue 15's fuzzer: every CONNECT then
    timed out with 0x88)."""
    p = Pacer(W)
    now = 0.0
    gathered = 0
    on_wire: list[int] = []  # batches sent, not yet read by the registry (sizes)
    unanswered = 0  # batches the registry read and owes a receipt
    for event in events:
        if event == "op":
            gathered += 1
        elif event == "tick":
            now += W / 2
        elif event == "read" and on_wire:
            on_wire.pop(0)
            unanswered += 1
        elif event == "write" and unanswered:
            p.answered(unanswered)
            unanswered = 0
        elif event == "late":
            p.answered(0)
        wait = p.delay(now)
        if gathered and wait == 0.0:
            p.sent(gathered, now)
            on_wire.append(gathered)
            gathered = 0
        assert p.inflight == len(on_wire) + unanswered  # in flight: exactly the unanswered
    # drain: the registry reads and answers everything; time passes one window
    unanswered += len(on_wire)
    p.answered(unanswered)
    assert p.inflight == 0
    assert p.delay(now + W) == 0.0
