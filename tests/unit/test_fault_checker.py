"""The fault test's checker (``tests/fault/checker.py``) on hand-made histories: clean ones
pass, and each kind of broken promise is flagged, so that a green fault run means
something."""

from __future__ import annotations

from tests.fault.checker import (
    Connect,
    Delivery,
    History,
    Publish,
    Subscriber,
    check,
    parse,
)

TOPIC = "ft/p1"


def pubs(acked: dict[int, bool], qos: int = 1, publisher: str = "p1") -> list[Publish]:
    return [
        Publish(publisher, seq, f"ft/{publisher}", qos, ok, node="n1", outcome="ok" if ok else "x")
        for seq, ok in acked.items()
    ]


def got(*items: int | tuple[int, bool], qos: int = 1, sub: str = "s1") -> list[Delivery]:
    """Deliveries to ``sub`` from p1: a seq, or (seq, dup)."""
    out = []
    for item in items:
        seq, dup = item if isinstance(item, tuple) else (item, False)
        out.append(Delivery(sub, TOPIC, f"p1:{seq}", qos, dup, node="n2"))
    return out


def history(
    publishes: list[Publish],
    deliveries: list[Delivery],
    qos: int = 1,
    topics: tuple[str, ...] = (TOPIC,),
) -> History:
    return History(
        subscribers=[Subscriber("s1", frozenset(topics), qos)],
        publishes=publishes,
        deliveries=deliveries,
    )


def kinds(h: History) -> dict[str, int]:
    return {k: n for k, n in check(h).counts().items() if n}


def test_everything_received_once_in_order_passes() -> None:
    report = check(history(pubs({1: True, 2: True, 3: True}), got(1, 2, 3)))
    assert report.ok
    assert (report.acked, report.deliveries) == (3, 3)


def test_a_lost_acknowledged_message_is_flagged() -> None:
    report = check(history(pubs({1: True, 2: True, 3: True}), got(1, 3)))
    assert report.counts()["lost"] == 1
    (v,) = report.violations
    assert (v.kind, v.subscriber, v.publisher, v.seq) == ("lost", "s1", "p1", 2)
    assert report.lost_runs() == {"s1<-p1": [(2, 2)]}


def test_an_unacknowledged_message_need_not_arrive_but_may() -> None:
    assert check(history(pubs({1: True, 2: False, 3: True}), got(1, 3))).ok
    report = check(history(pubs({1: True, 2: False, 3: True}), got(1, 2, 3)))
    assert report.ok and report.indeterminate_delivered == 1


def test_a_reordering_within_one_publisher_is_flagged() -> None:
    h = history(pubs({1: True, 2: True, 3: True}), got(1, 3, 2))
    assert kinds(h) == {"reordered": 1}
    (v,) = check(h).violations
    assert v.seq == 2 and "after seq 3" in v.detail


def test_an_indeterminate_message_arriving_late_is_counted_not_flagged() -> None:
    """p1:2 was given up on (no answer); p1:3 was sent and acknowledged elsewhere; the
    stalled node then finished 2 behind it."""
    report = check(history(pubs({1: True, 2: False, 3: True}), got(1, 3, 2)))
    assert report.ok and report.late_indeterminate == 1


def test_an_acknowledged_message_behind_an_indeterminate_later_one_is_reordered() -> None:
    """The publisher waits for 2's PUBACK before sending 3, so 3 ahead of 2 is a reorder
    even though 3 itself was never acknowledged."""
    assert kinds(history(pubs({1: True, 2: True, 3: False}), got(1, 3, 2))) == {"reordered": 1}


def test_qos1_redelivery_with_dup_is_allowed_in_any_replay_order() -> None:
    report = check(history(pubs({1: True, 2: True, 3: True}), got(1, 2, 3, (2, True), (3, True))))
    assert report.ok and report.duplicates_allowed == 2


def test_a_qos1_duplicate_without_dup_is_flagged() -> None:
    h = history(pubs({1: True, 2: True}), got(1, 2, 2))
    assert kinds(h) == {"duplicate_without_dup": 1}


def test_a_qos2_duplicate_is_flagged_even_with_dup() -> None:
    h = history(pubs({1: True, 2: True}, qos=2), got(1, 2, (2, True), qos=2), qos=2)
    assert kinds(h) == {"duplicate_qos2": 1}


def test_a_duplicate_of_a_message_first_received_at_qos2_is_flagged_at_qos1() -> None:
    ds = got(1, qos=2) + got((1, True), qos=1)
    assert kinds(history(pubs({1: True}, qos=2), ds, qos=2)) == {"duplicate_qos2": 1}


def test_a_first_delivery_with_dup_set_is_not_a_duplicate() -> None:
    """A message sent, lost with its connection, and sent again with DUP arrives once."""
    assert check(history(pubs({1: True, 2: True}), got(1, (2, True)))).ok


def test_a_session_lost_on_reconnect_is_flagged() -> None:
    h = history(pubs({1: True}), got(1))
    h.connects = [
        Connect("s1", "n1", session_present=False, first=True),
        Connect("s1", "n2", session_present=True, first=False),
        Connect("s1", "n3", session_present=False, first=False),
    ]
    report = check(h)
    assert report.counts()["session_lost"] == 1 and report.session_resumes == 2


def test_unexpected_deliveries_are_flagged() -> None:
    ds = [
        Delivery("s1", TOPIC, "p1:9", 1, False),  # never published
        Delivery("s1", TOPIC, "garbage", 1, False),
        Delivery("s1", "ft/other", "p1:1", 1, False),  # not its topic
    ]
    assert kinds(history(pubs({1: True}), [*ds, *got(1)])) == {"unexpected": 3}


def test_probes_are_ignored_and_unsubscribed_topics_not_expected() -> None:
    ds = [Delivery("s1", TOPIC, "probe:n1:ft/p1", 0, False), *got(1)]
    h = history(pubs({1: True}) + pubs({1: True}, publisher="p2"), ds)
    report = check(h)
    assert report.ok and report.probes == 1


def test_each_subscriber_and_publisher_is_checked_apart() -> None:
    """s2 has everything; s1 misses p2's message; p1's and p2's seqs interleave freely."""
    h = History(
        subscribers=[
            Subscriber("s1", frozenset({"ft/p1", "ft/p2"}), 1),
            Subscriber("s2", frozenset({"ft/p1", "ft/p2"}), 2),
        ],
        publishes=pubs({1: True, 2: True}) + pubs({1: True}, publisher="p2"),
        deliveries=[
            Delivery("s1", "ft/p1", "p1:1", 1, False),
            Delivery("s2", "ft/p2", "p2:1", 2, False),
            Delivery("s2", "ft/p1", "p1:1", 2, False),
            Delivery("s1", "ft/p1", "p1:2", 1, False),
            Delivery("s2", "ft/p1", "p1:2", 2, False),
        ],
    )
    report = check(h)
    assert [(v.kind, v.subscriber, v.publisher, v.seq) for v in report.violations] == [
        ("lost", "s1", "p2", 1)
    ]


def test_lost_runs_are_ranges() -> None:
    h = history(pubs(dict.fromkeys(range(1, 11), True)), got(1, 2, 6, 10))
    assert check(h).lost_runs() == {"s1<-p1": [(3, 5), (7, 9)]}


def test_parse() -> None:
    assert parse("p1:12") == ("p1", 12)
    assert parse("a:b:3") == ("a:b", 3)
    assert parse("p1:") is None and parse("x") is None and parse(":3") is None


def test_summary_is_plain_data() -> None:
    summary = check(history(pubs({1: True, 2: True}), got(2, (2, False)))).summary()
    assert summary["ok"] is False
    assert summary["violations"]["lost"] == 1
    assert summary["violations"]["duplicate_without_dup"] == 1
    assert summary["lost_runs"] == {"s1<-p1": [(1, 1)]}
    assert [v["seq"] for v in summary["examples"]["duplicate_without_dup"]] == [2]
    assert "lost" not in summary["examples"]  # lost_runs says it shorter
