"""The fault test's incident story: runs of seqs and the stretches of a subscriber's
deliveries, told from a small history."""

from __future__ import annotations

from pathlib import Path

from tests.fault.checker import Connect, Delivery, History, Publish, Violation
from tests.fault.incident import deliveries, runs, tell, when, worst


def test_runs_join_ascending_stretches_in_arrival_order() -> None:
    assert runs([3, 4, 5, 9, 8, 10]) == "3-5 9 8 10"
    assert runs([1]) == "1"
    assert runs([]) == ""


def _history() -> History:
    h = History()
    h.connects.append(Connect("s", "f1", True, False, at=100.0))
    for i, seq in enumerate((1, 2, 3, 7, 8)):
        h.deliveries.append(Delivery("s", "t/p", f"p-x:{seq}", 1, False, "f1", 100.1 + i, i))
    h.connects.append(Connect("s", "f3", True, False, at=110.0))
    for i, seq in enumerate((4, 5, 6)):
        h.deliveries.append(Delivery("s", "t/p", f"p-x:{seq}", 1, False, "f3", 110.1 + i, 10 + i))
    h.deliveries.append(Delivery("other", "t/p", "p-x:4", 1, False, "f2", 105.0, 20))
    h.publishes.append(Publish("p-x", 4, "t/p", 1, True, "f2", "ok", 104.0, 104.5))
    return h


def test_a_story_shows_each_connection_and_what_it_delivered() -> None:
    lines = deliveries(_history(), "s", 0.0, 1e9)
    assert lines == [
        "100.000 connected to f1, session_present=True",
        "100.000 delivered on f1: p 1-3 7-8",
        "110.000 connected to f3, session_present=True",
        "110.000 delivered on f3: p 4-6",
    ]


def test_the_worst_violation_is_told_at_the_time_it_names(tmp_path: Path) -> None:
    dup = Violation("duplicate_qos2", "s", "p-x", 2, "again at 101.5")
    late = Violation("reordered", "s", "p-x", 4, "first delivered on f3 at 110.100, after seq 8")
    assert worst([dup, late]) is late
    assert when(late, _history()) == 110.1
    assert when(Violation("lost", "s", "p-x", 4), _history()) == 104.5
    story = tell(_history(), [dup, late], tmp_path)
    assert story.splitlines()[0].startswith("around reordered s <- p-x seq 4")
    assert "delivered on f3: p 4-6" in story
    assert tell(_history(), [], tmp_path) == ""
