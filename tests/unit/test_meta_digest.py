"""The anti-entropy digest: order-independent, incremental, and it finds what differs.

The property tests play replicas that receive random writes in different orders, lose
broadcasts, and then run exchange rounds as the replicator does; they must agree after
the rounds, and the digest must never report a difference where the records agree."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from services.gossip import codec
from services.gossip.replication.digest import BUCKETS, Digest, bucket_of, differing
from services.gossip.store import MetaStore, Op, Record


def _digest(store: MetaStore) -> Digest:
    d = Digest()
    for prefix in store.resolvers:
        for rec in store.records(prefix):
            d.put((rec.prefix, rec.key), codec.encode_record(rec.prefix, rec.key, rec.clock))
    return d


def test_equal_records_give_equal_digests_whatever_the_order() -> None:
    a, b = Digest(), Digest()
    items = [(("subs", bytes([i])), bytes([i, i])) for i in range(50)]
    for k, v in items:
        a.put(k, v)
    for k, v in reversed(items):
        b.put(k, b"stale")
        b.put(k, v)
    assert differing(a.buckets, b.buckets) == []
    assert len(a) == len(b) == 50


def test_a_change_shows_in_its_bucket_only_and_a_removal_undoes_a_put() -> None:
    a, b = Digest(), Digest()
    for d in (a, b):
        d.put(("retain", b"t"), b"v1")
        d.put(("subs", b"s"), b"x")
    b.put(("retain", b"t"), b"v2")
    assert differing(a.buckets, b.buckets) == [bucket_of(("retain", b"t"))]
    assert a.keys_in(differing(a.buckets, b.buckets)) == [("retain", b"t")]
    b.remove(("retain", b"t"))
    b.remove(("retain", b"never there"))  # harmless
    a.remove(("retain", b"t"))
    assert differing(a.buckets, b.buckets) == []
    assert a.keys_in(range(BUCKETS)) == [("subs", b"s")]


def test_a_malformed_digest_differs_everywhere() -> None:
    assert differing([0] * BUCKETS, [0] * 3) == list(range(BUCKETS))
    assert Digest().keys_in([-1, BUCKETS]) == []


NODES = ("n1", "n2", "n3")

writes = st.lists(
    st.tuples(
        st.sampled_from(NODES),  # the node that writes
        st.sampled_from(["subs", "retain"]),
        st.sampled_from([b"a", b"b", b"c", b"d"]),
        st.one_of(st.none(), st.binary(min_size=1, max_size=3)),  # None: delete
        st.sets(st.sampled_from(NODES)),  # who receives the broadcast
    ),
    max_size=25,
)


def _commit(store: MetaStore, now: int, ops: list[Op] | None, records: list[Record]) -> None:
    txn = store.begin(now)
    if ops:
        txn.apply(ops)
    if records:
        txn.merge_remote(records)
    store.commit(txn)


def _exchange(a: MetaStore, b: MetaStore, now: int) -> None:
    """One anti-entropy round, a initiating, as ``Replicator._round`` runs it."""
    da, db = _digest(a), _digest(b)
    buckets = differing(db.buckets, da.buckets)  # b answers a's digest
    theirs = [b.record(p, k) for p, k in db.keys_in(buckets)]
    _commit(a, now, None, [r for r in theirs if r is not None])
    da = _digest(a)
    ours = [a.record(p, k) for p, k in da.keys_in(buckets)]
    _commit(b, now, None, [r for r in ours if r is not None])


@settings(max_examples=150, deadline=None)
@given(writes, st.randoms(use_true_random=False))
def test_replicas_that_lost_broadcasts_agree_after_exchange_rounds(
    ops: list[tuple[str, str, bytes, bytes | None, set[str]]], rng: random.Random
) -> None:
    stores = {n: MetaStore(n) for n in NODES}
    now = 1_000
    for node, prefix, key, value, receivers in ops:
        now += 1
        src = stores[node]
        txn = src.begin(now)
        txn.apply([Op(prefix, key, value)])
        local = txn.local_writes()
        src.commit(txn)
        for other in receivers - {node}:  # the broadcast reaches only some
            _commit(stores[other], now, None, local)
    # rounds between random pairs until every pair has exchanged once, in random order
    pairs = [(x, y) for x in NODES for y in NODES if x != y]
    rng.shuffle(pairs)
    for x, y in pairs:
        now += 1
        _exchange(stores[x], stores[y], now)
    digests = {n: _digest(s) for n, s in stores.items()}
    for n in NODES:
        assert differing(digests[n].buckets, digests["n1"].buckets) == []
        for prefix in ("subs", "retain"):
            assert sorted(stores[n].items(prefix)) == sorted(stores["n1"].items(prefix))


@settings(max_examples=100, deadline=None)
@given(writes)
def test_the_incremental_digest_equals_one_built_from_scratch(
    ops: list[tuple[str, str, bytes, bytes | None, set[str]]],
) -> None:
    """What the replicator keeps up to date commit by commit is what a fresh scan gives."""
    store, d = MetaStore("n1"), Digest()
    for now, (_node, prefix, key, value, _r) in enumerate(ops, start=1):
        txn = store.begin(now)
        txn.apply([Op(prefix, key, value)])
        if now % 7 == 0:
            txn.collect_garbage(0)
        store.commit(txn)
        for rec in txn.writes():
            d.put((rec.prefix, rec.key), codec.encode_record(rec.prefix, rec.key, rec.clock))
        for k in txn.removals():
            d.remove(k)
    assert d.buckets == _digest(store).buckets
