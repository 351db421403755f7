"""The cross-check of the fault test's history against the ETL's delivery audit
(``tests/fault/audit_check.py``) on hand-made histories and audit summaries: views that
agree within the models pass, and each broken relation is named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fault.audit_check import (
    compare,
    expectations,
    load_history,
    subscribed_pairs,
)
from tests.fault.checker import Delivery, History, Publish, Subscriber, check

T1, T2 = "ft/r/p1", "ft/r/p2"


def pub(seq: int, acked: bool = True, publisher: str = "p1", outcome: str = "") -> Publish:
    return Publish(
        publisher,
        seq,
        f"ft/r/{publisher}",
        1,
        acked,
        node="n1",
        outcome=outcome or ("ok" if acked else "timeout"),
    )


def got(*seqs: int, sub: str = "s1", publisher: str = "p1", topic: str = "") -> list[Delivery]:
    return [Delivery(sub, topic or f"ft/r/{publisher}", f"{publisher}:{s}", 1, False) for s in seqs]


def history(
    publishes: list[Publish], deliveries: list[Delivery], subs: list[Subscriber] | None = None
) -> History:
    return History(
        subscribers=subs or [Subscriber("s1", frozenset({T1}), 1)],
        publishes=publishes,
        deliveries=deliveries,
    )


def audit(**counts: Any) -> dict[str, Any]:
    """An audit summary as ``run_etl`` returns it (only the keys compared matter)."""
    base: dict[str, Any] = {
        "expected": 0,
        "lost": 0,
        "unacked": 0,
        "refused": 0,
        "out_of_order": 0,
        "duplicated": 0,
        "expect_mode": "filters",
    }
    return {**base, **counts}


def test_indeterminate_undelivered_counts_subscribed_pairs_never_received() -> None:
    subs = [Subscriber("s1", frozenset({T1, T2}), 1), Subscriber("s2", frozenset({T1}), 2)]
    pubs = [pub(1), pub(2, acked=False), pub(1, acked=False, publisher="p2")]
    # s2 gets p1:2 only on a wrong topic: the checker does not count that as received
    ds = got(1, 2) + got(1, sub="s2") + got(2, sub="s2", topic=T2)
    report = check(history(pubs, ds, subs))
    assert report.indeterminate_undelivered == 2  # s1 <- p2:1, s2 <- p1:2
    assert report.indeterminate_delivered == 1  # s1 <- p1:2
    assert report.summary()["indeterminate_undelivered"] == 2
    e = subscribed_pairs(history(pubs, ds, subs))
    assert (e.all, e.acked) == (5, 2)


def test_expectations_are_each_subscribers_topics_from_the_start() -> None:
    subs = [Subscriber("s1", frozenset({T2, T1}), 1), Subscriber("s2", frozenset({T1}), 2)]
    got_ = [(e.subscriber, e.topic_filter, e.since) for e in expectations(history([], [], subs))]
    assert got_ == [("s1", T1, None), ("s1", T2, None), ("s2", T1, None)]
    assert all(e.regex == f"^{e.topic_filter}$" for e in expectations(history([], [], subs)))


def test_views_that_agree_pass() -> None:
    h = history([pub(1), pub(2), pub(3)], got(1, 2, 3))
    assert compare(h, audit(expected=3)) == []
    assert compare(h, audit(expected=3), check(h)) == []


def test_audit_lost_lies_between_the_checker_lost_and_the_indeterminate() -> None:
    """p1:2 (acknowledged) and p1:3 (no answer) never reached s1: the audit must count
    the first lost, and may count the second (if its node logged it)."""
    h = history([pub(1), pub(2), pub(3, acked=False)], got(1))
    assert compare(h, audit(expected=2, lost=1)) == []
    assert compare(h, audit(expected=3, lost=2)) == []
    (too_many,) = compare(h, audit(expected=3, lost=3))
    assert "audit counts 3 lost, more than the checker's 1 lost plus 1" in too_many


def test_a_loss_the_audit_missed_is_named() -> None:
    h = history([pub(1), pub(2)], got(1))
    (msg,) = compare(h, audit(expected=2, lost=0, unacked=0))
    assert "the checker counts 1 lost" in msg and "the audit misses losses" in msg


def test_a_loss_written_to_a_dead_connection_is_unacked_to_the_audit() -> None:
    """The broker wrote p1:2 to s1's connection, which died, and never sent it again:
    the client lost it, the audit saw a delivery never acknowledged."""
    h = history([pub(1), pub(2)], got(1))
    assert compare(h, audit(expected=2, lost=0, unacked=1)) == []


def test_a_copy_on_the_wrong_topic_is_slack_for_the_lower_bound() -> None:
    h = history([pub(1), pub(2)], got(1) + got(2, topic=T2))
    assert check(h).counts()["unexpected"] == 1
    assert compare(h, audit(expected=2, lost=0)) == []


def test_refused_messages_are_never_lost_and_never_acknowledged() -> None:
    h = history([pub(1), pub(2, acked=False, outcome="refused 0x80"), pub(3)], got(1, 3))
    assert compare(h, audit(expected=3, lost=0, refused=1)) == []
    (msg,) = compare(h, audit(expected=3, lost=0, refused=2))
    assert "2 refused pairs, more than the 1 pairs of publishes not acknowledged" in msg


def test_expected_pairs_are_bounded_by_the_publishes() -> None:
    subs = [Subscriber("s1", frozenset({T1}), 1), Subscriber("s2", frozenset({T1, T2}), 1)]
    pubs = [pub(1), pub(2, acked=False), pub(1, publisher="p2")]
    ds = got(1) + got(1, sub="s2") + got(1, sub="s2", publisher="p2")
    h = history(pubs, ds, subs)
    assert (subscribed_pairs(h).all, subscribed_pairs(h).acked) == (5, 3)
    assert compare(h, audit(expected=3)) == compare(h, audit(expected=5)) == []
    (few,) = compare(h, audit(expected=2))
    assert "fewer than the 3 pairs of acknowledged publishes" in few
    (many,) = compare(h, audit(expected=6))
    assert "more than the 5 pairs of every publish attempted" in many


def test_out_of_order_with_only_acknowledged_publishes_is_named() -> None:
    h = history([pub(1), pub(2), pub(3)], got(1, 2, 3))
    (msg,) = compare(h, audit(expected=3, out_of_order=1))
    assert "1 pairs out of order" in msg and "died before their clients took them" in msg


def test_out_of_order_behind_a_late_indeterminate_publish_is_allowed() -> None:
    """The docstring's example: p1 gave up on 4, published 5 (acknowledged); the stalled
    node routed 4 after 5 was logged, and s1 got 4 then 5. In order for the checker; 5
    is out of order for the audit, whose pub_seq puts 4 after 5."""
    h = history([pub(1), pub(2), pub(3), pub(4, acked=False), pub(5)], got(1, 2, 3, 4, 5))
    assert check(h).ok
    assert compare(h, audit(expected=5, out_of_order=1)) == []


def test_out_of_order_is_not_compared_once_the_checker_saw_a_reordering() -> None:
    h = history([pub(1), pub(2), pub(3)], got(1, 3, 2))
    assert check(h).counts()["reordered"] == 1
    assert compare(h, audit(expected=3, out_of_order=1)) == []
    assert compare(h, audit(expected=3, out_of_order=0)) == []


def test_several_mismatches_are_all_named() -> None:
    h = history([pub(1), pub(2)], got(1))
    found = compare(h, audit(expected=1, lost=0, refused=1))
    assert len(found) == 3
    assert any("fewer than" in m for m in found)
    assert any("misses losses" in m for m in found)
    assert any("refused" in m for m in found)


def test_an_audit_without_the_expect_file_is_refused() -> None:
    h = history([pub(1)], got(1))
    (msg,) = compare(h, audit(expected=1, expect_mode="deliveries"))
    assert "without the expect file" in msg
    (missing,) = compare(h, {"expected": 1, "lost": 0})
    assert "lacks unacked, refused, out_of_order" in missing


def test_load_history_reads_what_the_harness_writes(tmp_path: Path) -> None:
    from tests.fault.harness import Options, Result, _write

    subs = [Subscriber("s1", frozenset({T1, T2}), 2)]
    pubs = [pub(1), pub(2, acked=False, outcome="refused 0x80"), pub(1, publisher="p2")]
    h = history(pubs, [*got(1), *got(1, publisher="p2")], subs)
    result = Result(Options(base_dir=tmp_path), h, check(h), [], [], "", 0.0, 0.0, 0.0)
    _write(result, None)  # type: ignore[arg-type]  # a clean run needs no cluster
    assert load_history(tmp_path / "history.jsonl.gz") == h
