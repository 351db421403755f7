"""When a gossip tombstone may go (``services/gossip/gc.py``): at once alone, after the
ttl with peers, never with ``ttl = never``; and what the store does when it goes."""

from __future__ import annotations

from services.gossip.gc import min_age_us
from services.gossip.store import MetaStore, Op


def test_alone_a_tombstone_goes_at_the_next_collection() -> None:
    assert min_age_us(3600.0, ()) == 0


def test_with_peers_it_waits_for_the_ttl() -> None:
    assert min_age_us(3600.0, ("b@host",)) == 3_600_000_000


def test_never_keeps_it_alone_or_not() -> None:
    assert min_age_us(None, ()) is None
    assert min_age_us(None, ("b@host",)) is None


def test_a_collected_key_written_again_gets_a_dot_above_the_old_ones() -> None:
    store = MetaStore("a")
    for value in (b"v1", b"v2", None):
        txn = store.begin(100)
        txn.apply([Op("subs", b"k", value)])
        store.commit(txn)
    old = store.record("subs", b"k")
    assert old is not None and store.tombstone_count() == 1
    txn = store.begin(200)
    assert txn.collect_garbage(min_age_us(3600.0, ()) or 0) == 1
    store.commit(txn)
    assert store.record("subs", b"k") is None and store.tombstone_count() == 0
    txn = store.begin(201)
    txn.apply([Op("subs", b"k", b"v3")])
    store.commit(txn)
    new = store.record("subs", b"k")
    assert new is not None
    (entry,) = new.clock.entries
    (old_entry,) = old.clock.entries
    assert entry.counter > old_entry.counter
