"""Version vectors: the semilattice laws of merge and the order's laws, by Hypothesis."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.gossip.crdt import version_vector as vv

vvs = st.dictionaries(st.sampled_from("abcde"), st.integers(0, 6)).map(vv.new)


def test_examples() -> None:
    assert vv.merge({"a": 3}, {"a": 1, "b": 2}) == {"a": 3, "b": 2}
    assert vv.descends({"a": 3, "b": 2}, {"a": 1})
    assert not vv.descends({"a": 1}, {"b": 1})
    assert vv.concurrent({"a": 1}, {"b": 1})
    assert not vv.dominates({"a": 1}, {"a": 1})
    assert vv.increment({"a": 3}, "b") == {"a": 3, "b": 1}
    assert vv.new({"a": 0}) == {} == vv.new()
    assert vv.get({}, "z") == 0


def test_negative_counter_is_refused() -> None:
    try:
        vv.new({"a": -1})
    except ValueError:
        return
    raise AssertionError("a negative counter was accepted")


@given(vvs, vvs)
def test_merge_commutative(a: vv.VersionVector, b: vv.VersionVector) -> None:
    assert vv.merge(a, b) == vv.merge(b, a)


@given(vvs, vvs, vvs)
def test_merge_associative(a: vv.VersionVector, b: vv.VersionVector, c: vv.VersionVector) -> None:
    assert vv.merge(vv.merge(a, b), c) == vv.merge(a, vv.merge(b, c))


@given(vvs)
def test_merge_idempotent(a: vv.VersionVector) -> None:
    assert vv.merge(a, a) == a


@given(vvs, vvs)
def test_merge_is_least_upper_bound(a: vv.VersionVector, b: vv.VersionVector) -> None:
    m = vv.merge(a, b)
    assert vv.descends(m, a) and vv.descends(m, b)
    assert vv.descends(a, b) == (m == a)


@given(vvs, vvs, vvs)
def test_descends_is_a_partial_order(
    a: vv.VersionVector, b: vv.VersionVector, c: vv.VersionVector
) -> None:
    assert vv.descends(a, a)
    if vv.descends(a, b) and vv.descends(b, a):
        assert a == b
    if vv.descends(a, b) and vv.descends(b, c):
        assert vv.descends(a, c)


@given(vvs, vvs)
def test_exactly_one_relation_holds(a: vv.VersionVector, b: vv.VersionVector) -> None:
    relations = [a == b, vv.dominates(a, b), vv.dominates(b, a), vv.concurrent(a, b)]
    assert relations.count(True) == 1


@given(vvs, st.sampled_from("abcdez"))
def test_increment_dominates_by_one(a: vv.VersionVector, node: str) -> None:
    b = vv.increment(a, node)
    assert vv.dominates(b, a)
    assert vv.get(b, node) == vv.get(a, node) + 1
    assert {k: n for k, n in b.items() if k != node} == {k: n for k, n in a.items() if k != node}
    assert a == vv.new(a)  # the input was not mutated
