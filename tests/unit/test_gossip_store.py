"""The metadata store core: versioned writes, tombstones, GC without dot reuse, remote
merges with LWW siblings, notifications, and convergence of replicas (Hypothesis)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.gossip.crdt import dvv
from services.gossip.crdt.lww import Stamped
from services.gossip.store import MetaStore, Op, Record, StaleTxn, Txn, UnknownPrefix, Update


def run(store: MetaStore, now_us: int, stage: Callable[[Txn], object]) -> list[Update]:
    txn = store.begin(now_us)
    stage(txn)
    return store.commit(txn)


def put(store: MetaStore, now_us: int, *ops: Op) -> list[Update]:
    return run(store, now_us, lambda txn: txn.apply(list(ops)))


def test_put_get_delete_and_notifications() -> None:
    s = MetaStore("a")
    assert put(s, 1, Op("subs", b"\0c1", b"v1"), Op("retain", b"\0t", b"m")) == [
        Update("subs", b"\0c1", b"v1"),
        Update("retain", b"\0t", b"m"),
    ]
    assert s.get("subs", b"\0c1") == b"v1"
    assert s.count("subs") == 1 and s.count("sessions") == 0
    assert put(s, 2, Op("subs", b"\0c1", None)) == [Update("subs", b"\0c1", None)]
    assert s.get("subs", b"\0c1") is None
    assert s.count("subs") == 0 and s.tombstone_count() == 1
    rec = s.record("subs", b"\0c1")
    assert rec is not None and [x.deleted for x in rec.siblings()] == [True]


def test_ops_apply_in_order_and_a_request_is_atomic() -> None:
    s = MetaStore("a")
    assert put(
        s,
        1,
        Op("subs", b"k", b"1"),
        Op("subs", b"k", b"2"),
        Op("subs", b"j", b"x"),
        Op("subs", b"j", None),
    ) == [Update("subs", b"k", b"2")]
    assert s.get("subs", b"k") == b"2"
    rec = s.record("subs", b"k")
    assert rec is not None and dvv.join(rec.clock) == {"a": 2}
    txn = s.begin(2)
    with pytest.raises(UnknownPrefix):
        txn.apply([Op("subs", b"k", b"3"), Op("nope", b"k", b"x")])
    assert txn.writes() == []


def test_unchanged_values_notify_nobody_but_still_get_a_new_version() -> None:
    s = MetaStore("a")
    put(s, 1, Op("retain", b"t", b"m"))
    assert put(s, 2, Op("retain", b"t", b"m")) == []
    rec = s.record("retain", b"t")
    assert rec is not None and dvv.join(rec.clock) == {"a": 2}
    assert put(s, 3, Op("retain", b"absent", None)) == []  # deleting nothing writes nothing
    assert s.record("retain", b"absent") is None


def test_readers_see_nothing_until_commit_and_commits_are_serial() -> None:
    s = MetaStore("a")
    t1 = s.begin(1)
    t1.apply([Op("subs", b"k", b"1")])
    assert s.get("subs", b"k") is None
    t2 = s.begin(1)
    s.commit(t1)
    assert s.get("subs", b"k") == b"1"
    with pytest.raises(StaleTxn):
        s.commit(t2)


def test_timestamps_never_go_back_for_a_key() -> None:
    s = MetaStore("a")
    put(s, 100, Op("subs", b"k", b"1"))
    put(s, 50, Op("subs", b"k", b"2"))  # the wall clock stepped back
    rec = s.record("subs", b"k")
    assert rec is not None and [x.ts_us for x in rec.siblings()] == [101]


def test_gc_removes_old_tombstones_and_never_reuses_their_dots() -> None:
    s = MetaStore("a")
    put(s, 1, Op("subs", b"k", b"1"))
    put(s, 2, Op("subs", b"k", b"2"))
    put(s, 3, Op("subs", b"k", None))
    put(s, 3, Op("subs", b"live", b"x"))
    assert run(s, 10, lambda txn: txn.collect_garbage(min_age_us=100)) == []
    assert s.tombstone_count() == 1
    txn = s.begin(200)
    assert txn.collect_garbage(min_age_us=100) == 1
    assert txn.removals() == [("subs", b"k")] and txn.dot_floor_changed()
    s.commit(txn)
    assert s.record("subs", b"k") is None and s.tombstone_count() == 0
    assert s.dot_floor == 3
    assert s.get("subs", b"live") == b"x"
    put(s, 300, Op("subs", b"k", b"new"))
    rec = s.record("subs", b"k")
    assert rec is not None and dvv.dotted(rec.clock)[0][:2] == ("a", 4)


def test_gc_waits_for_stability() -> None:
    s = MetaStore("a")
    put(s, 1, Op("subs", b"k", b"1"))
    put(s, 2, Op("subs", b"k", None))
    txn = s.begin(10**9)
    assert txn.collect_garbage(0, stable=lambda rec: False) == 0


def test_concurrent_remote_write_becomes_a_sibling_resolved_by_lww() -> None:
    a, b = MetaStore("a"), MetaStore("b")
    put(a, 10, Op("sessions", b"c", b"on-a"))
    put(b, 20, Op("sessions", b"c", b"on-b"))
    rec_b = b.record("sessions", b"c")
    assert rec_b is not None
    assert run(a, 30, lambda txn: txn.merge_remote([rec_b])) == [Update("sessions", b"c", b"on-b")]
    rec = a.record("sessions", b"c")
    assert rec is not None and len(rec.siblings()) == 2
    # A later local write sees both siblings and overwrites them.
    put(a, 40, Op("sessions", b"c", b"final"))
    rec = a.record("sessions", b"c")
    assert rec is not None and [x.value for x in rec.siblings()] == [b"final"]
    assert run(a, 50, lambda txn: txn.merge_remote([rec_b])) == []  # old news


def test_a_remote_tombstone_deletes() -> None:
    a, b = MetaStore("a"), MetaStore("b")
    put(a, 1, Op("retain", b"t", b"m"))
    rec = a.record("retain", b"t")
    assert rec is not None
    run(b, 2, lambda txn: txn.merge_remote([rec]))
    put(b, 3, Op("retain", b"t", None))
    tomb = b.record("retain", b"t")
    assert tomb is not None
    assert run(a, 4, lambda txn: txn.merge_remote([tomb])) == [Update("retain", b"t", None)]
    assert a.get("retain", b"t") is None


def test_load_restores_state_without_notifications() -> None:
    a = MetaStore("a")
    put(a, 1, Op("subs", b"k", b"1"), Op("retain", b"t", b"m"))
    put(a, 2, Op("retain", b"t", None))
    records = [r for p in a.resolvers for r in a.records(p)]
    b = MetaStore("a")
    b.load(records, dot_floor=7)
    assert b.get("subs", b"k") == b"1" and b.get("retain", b"t") is None
    assert b.tombstone_count() == 1 and b.dot_floor == 7
    with pytest.raises(UnknownPrefix):
        b.load([Record("nope", b"k", dvv.empty())])


def test_merge_of_an_unknown_prefix_stages_nothing() -> None:
    s = MetaStore("a")
    good = Record("subs", b"k", dvv.update(dvv.empty(), {}, "b", Stamped(1, "b", b"x")))
    txn = s.begin(1)
    with pytest.raises(UnknownPrefix):
        txn.merge_remote([good, Record("nope", b"k", good.clock)])
    assert txn.writes() == []


# -- convergence ------------------------------------------------------------------------

NODES = ("n1", "n2", "n3")
KEYS = [b"k1", b"k2"]
actions = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.integers(0, 2),
            st.sampled_from(KEYS),
            st.one_of(st.none(), st.sampled_from([b"x", b"y", b"z"])),
        ),
        st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 2), st.none()),
    ),
    max_size=25,
)


def all_records(s: MetaStore) -> list[Record]:
    return [r for p in s.resolvers for r in s.records(p)]


def merge(s: MetaStore, now_us: int, records: list[Record]) -> None:
    run(s, now_us, lambda txn: txn.merge_remote(records))


def view(s: MetaStore) -> dict[str, list[tuple[bytes, bytes]]]:
    return {p: sorted(s.items(p)) for p in s.resolvers}


@settings(max_examples=150, deadline=None)
@given(
    actions,
    st.permutations([(i, j) for i in range(3) for j in range(3) if i != j]),
    st.integers(0, 30),
)
def test_store_replicas_converge_whatever_the_exchange_order(
    history: list[tuple[str, int, object, object]], order: list[tuple[int, int]], skew: int
) -> None:
    stores = [MetaStore(n) for n in NODES]
    now = 1000
    for kind, x, y, z in history:
        now += 1
        if kind == "put":
            assert isinstance(y, bytes)
            value = z if isinstance(z, bytes) else None
            # Clocks disagree across nodes: LWW must still pick the same value everywhere.
            put(stores[x], now + x * skew, Op("subs", y, value))
        else:
            assert isinstance(y, int)
            merge(stores[x], now, all_records(stores[y]))
    for dst, src in order + order:
        merge(stores[dst], now, all_records(stores[src]))
    views = [view(s) for s in stores]
    assert views[0] == views[1] == views[2]
    recs = [sorted(all_records(s), key=lambda r: (r.prefix, r.key)) for s in stores]
    assert recs[0] == recs[1] == recs[2]
