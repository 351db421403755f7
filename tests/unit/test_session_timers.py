"""The shared timer heap (session/timers.py): lazy re-arming, cancel, bounded growth."""

from __future__ import annotations

import random

import pytest

from services.listener.session.timers import SLACK, Timer, TimerHeap


def names(timers: list[Timer[str]]) -> list[str]:
    return [t.name for t in timers]


def test_a_timer_fires_at_its_deadline_not_before() -> None:
    heap: TimerHeap[str] = TimerHeap()
    t = Timer("conn", "keepalive")
    heap.set(t, 100.0)
    assert heap.next_at() == 100.0
    assert heap.pop_due(99.0) == []
    assert heap.pop_due(100.0) == [t]
    assert t.due is None and t.seq == 0 and t.owner == "conn"
    assert heap.pop_due(1000.0) == []
    assert heap.next_at() is None


def test_moving_a_deadline_later_is_lazy_and_fires_at_the_new_time() -> None:
    heap: TimerHeap[str] = TimerHeap()
    t = Timer("conn", "keepalive")
    heap.set(t, 100.0)
    for at in (110.0, 120.0, 130.0):
        heap.set(t, at)
    assert len(heap) == 1  # no entry per re-arm
    assert heap.pop_due(100.0) == []  # came up early: pushed again at 130
    assert heap.next_at() == 130.0
    assert heap.pop_due(129.0) == []
    assert heap.pop_due(130.0) == [t]


def test_moving_a_deadline_earlier_fires_once_at_the_earlier_time() -> None:
    heap: TimerHeap[str] = TimerHeap()
    t = Timer("conn", "retry")
    heap.set(t, 100.0)
    heap.set(t, 50.0)
    assert heap.pop_due(50.0) == [t]
    assert heap.pop_due(100.0) == []  # the old entry is stale


def test_a_cancelled_timer_never_fires_and_releases_its_owner() -> None:
    heap: TimerHeap[str] = TimerHeap()
    t = Timer("conn", "connect")
    heap.set(t, 10.0)
    heap.cancel(t)
    assert t.owner is None
    assert heap.pop_due(20.0) == []
    with pytest.raises(ValueError, match="cancelled"):
        heap.set(t, 30.0)


def test_a_fired_timer_can_be_set_again() -> None:
    heap: TimerHeap[str] = TimerHeap()
    t = Timer("conn", "keepalive")
    heap.set(t, 10.0)
    assert heap.pop_due(10.0) == [t]
    heap.set(t, 20.0)
    assert heap.pop_due(20.0) == [t]


def test_due_within_slack_counts_as_due() -> None:
    heap: TimerHeap[str] = TimerHeap()
    t = Timer("conn", "keepalive")
    heap.set(t, 10.0)
    assert heap.pop_due(10.0 - SLACK / 2) == [t]


def test_due_timers_come_out_earliest_first() -> None:
    heap: TimerHeap[str] = TimerHeap()
    timers = [Timer(f"c{i}", f"t{i}") for i in range(5)]
    for t, at in zip(timers, (5.0, 1.0, 4.0, 2.0, 3.0), strict=True):
        heap.set(t, at)
    assert names(heap.pop_due(10.0)) == ["t1", "t3", "t4", "t2", "t0"]


def test_churn_cannot_grow_the_heap_beyond_twice_the_live_timers() -> None:
    """Connections that come and go cancel their timers; the stale entries they leave
    are dropped once they are the majority, long before their deadlines."""
    heap: TimerHeap[str] = TimerHeap()
    live = [Timer("idle", "keepalive") for _ in range(100)]
    for t in live:
        heap.set(t, 1000.0)
    for _ in range(10_000):
        t = Timer("churn", "keepalive")
        heap.set(t, 1000.0)
        heap.cancel(t)
        assert len(heap) <= 2 * len(live) + 64
    assert len(heap.pop_due(1000.0)) == len(live)


def test_matches_a_naive_model_under_random_operations() -> None:
    """Whatever the mix of set/cancel/pop, exactly the timers whose latest deadline has
    passed fire, once each."""
    rng = random.Random(7)
    heap: TimerHeap[int] = TimerHeap()
    timers = [Timer(i, f"t{i}") for i in range(30)]
    model: dict[int, float] = {}  # owner -> deadline of the set timers
    now = 0.0
    for _ in range(3000):
        i = rng.randrange(len(timers))
        op = rng.random()
        if op < 0.5:
            if timers[i].owner is None:
                timers[i] = Timer(i, f"t{i}")
            at = now + rng.uniform(0, 50)
            heap.set(timers[i], at)
            model[i] = at
        elif op < 0.6:
            heap.cancel(timers[i])
            model.pop(i, None)
        else:
            now += rng.uniform(0, 5)
            fired = sorted(t.owner for t in heap.pop_due(now) if t.owner is not None)
            expected = sorted(k for k, at in model.items() if at <= now + SLACK)
            assert fired == expected
            for k in expected:
                del model[k]
