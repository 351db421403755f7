"""Which tombstones of deleted queues are due for collection (``msgstore.tombstones``)."""

from __future__ import annotations

from services.msgstore.tombstones import GRACE_S, Grave, Graveyard


def test_a_grave_is_due_once_its_grace_has_passed() -> None:
    g = Graveyard()
    g.bury(b"c1", 7, 100.0)
    assert g.due(100.0 + GRACE_S - 1, 10) == []
    assert g.due(100.0 + GRACE_S, 10) == [Grave(b"c1", 7, 100.0)]
    assert len(g) == 0 and g.due(10_000.0, 10) == []


def test_due_takes_the_oldest_first_and_at_most_limit() -> None:
    g = Graveyard(grace=10.0)
    for i in range(5):
        g.bury(f"c{i}".encode(), i, float(i))
    assert [x.session for x in g.due(13.5, 2)] == [b"c0", b"c1"]
    assert [x.session for x in g.due(13.5, 10)] == [b"c2", b"c3"]
    assert len(g) == 1


def test_a_failed_collection_is_due_again_one_grace_later() -> None:
    g = Graveyard(grace=10.0)
    g.bury(b"a", 1, 0.0)
    g.bury(b"b", 1, 5.0)
    failed = g.due(12.0, 10)
    assert [x.session for x in failed] == [b"a"]
    g.retry(failed, 12.0)
    assert [x.session for x in g.due(16.0, 10)] == [b"b"]
    assert g.due(21.0, 10) == []
    assert [x.session for x in g.due(22.0, 10)] == [b"a"]
