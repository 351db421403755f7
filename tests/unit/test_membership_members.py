"""The member list CRDT: worked examples, and Hypothesis over random histories.

A history is replicas changing the list (join, leave, finish_leave of any node) and
merging each other's states in any order. Every state reached is checked against a
reference model (per node, the greatest register any replica ever wrote), the semilattice
laws are checked on the reached states, and convergence on a final exchange in a random
order.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.gossip.membership import members as ml
from services.gossip.membership.members import MemberList, Record, Status

NODES = ("n1", "n2", "n3", "n4")
REPLICAS = 3


def test_worked_example_from_the_docstring() -> None:
    a = ml.join(ml.join(ml.empty(), "n1"), "n2")
    b = ml.finish_leave(a, "n2")
    c = ml.join(a, "n3")
    m = ml.merge(b, c)
    assert ml.members(m) == {"n1", "n3"}
    assert ml.get(m, "n2") == Record("n2", 1, Status.LEFT)
    again = ml.join(m, "n2")
    assert ml.members(again) == {"n1", "n2", "n3"}
    assert ml.get(again, "n2") == Record("n2", 2, Status.JOINED)


def test_a_leave_beats_the_join_of_the_same_incarnation_in_either_order() -> None:
    joined = ml.single("n1")
    for status_change in (ml.leave, ml.finish_leave):
        left = status_change(joined, "n1")
        assert ml.merge(joined, left) == ml.merge(left, joined) == left
    assert ml.members(ml.leave(joined, "n1")) == {"n1"}  # leaving still counts
    assert ml.leaving(ml.leave(joined, "n1")) == {"n1"}
    assert ml.members(ml.finish_leave(joined, "n1")) == frozenset()


def test_a_rejoin_beats_every_copy_of_the_old_leave() -> None:
    old = ml.finish_leave(ml.single("n1"), "n1")
    back = ml.join(old, "n1")
    assert ml.get(back, "n1") == Record("n1", 2, Status.JOINED)
    assert ml.merge(old, back) == back
    # cancelling a leave in progress is a rejoin too
    cancelled = ml.join(ml.leave(ml.single("n1"), "n1"), "n1")
    assert ml.get(cancelled, "n1") == Record("n1", 2, Status.JOINED)


def test_a_join_made_on_a_blank_list_loses_to_the_clusters_leave() -> None:
    """Why a joining node merges the seed's state first (members.py docstring)."""
    cluster = ml.join(ml.join(ml.finish_leave(ml.single("n1"), "n1"), "n1"), "n2")
    cluster = ml.finish_leave(cluster, "n1")  # n1 at (2, left)
    blank_join = ml.single("n1")  # (1, joined)
    assert "n1" not in ml.members(ml.merge(cluster, blank_join))
    assert "n1" in ml.members(ml.join(ml.merge(cluster, blank_join), "n1"))


def test_no_ops_and_check() -> None:
    m = ml.single("n1")
    assert ml.join(m, "n1") is m
    assert ml.leave(m, "zz") is m and ml.finish_leave(m, "zz") is m
    assert ml.leave(ml.finish_leave(m, "n1"), "n1") == ml.finish_leave(m, "n1")
    bad = [
        MemberList((Record("b", 1, Status.JOINED), Record("a", 1, Status.JOINED))),
        MemberList((Record("a", 1, Status.JOINED), Record("a", 2, Status.LEFT))),
        MemberList((Record("a", 0, Status.JOINED),)),
    ]
    for state in bad:
        try:
            ml.check(state)
        except ml.InvalidMemberList:
            continue
        raise AssertionError(f"accepted {state}")
    assert ml.check(ml.join(m, "n0")) == ml.join(m, "n0")


# -- histories ------------------------------------------------------------------------

OPS = {"join": ml.join, "leave": ml.leave, "finish": ml.finish_leave}

ops = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(sorted(OPS)),
            st.integers(0, REPLICAS - 1),
            st.sampled_from(NODES),
        ),
        st.tuples(st.just("merge"), st.integers(0, REPLICAS - 1), st.integers(0, REPLICAS - 1)),
    ),
    max_size=40,
)


class History:
    def __init__(self) -> None:
        self.replicas = [ml.empty() for _ in range(REPLICAS)]
        self.states: list[MemberList] = [ml.empty()]
        self.written: dict[str, Record] = {}  # per node the greatest register ever written

    def step(self, kind: str, r: int, arg: object) -> None:
        if kind == "merge":
            assert isinstance(arg, int)
            self.replicas[r] = ml.merge(self.replicas[r], self.replicas[arg])
        else:
            assert isinstance(arg, str)
            before = self.replicas[r]
            after = OPS[kind](before, arg)
            assert ml.merge(before, after) == after, "an update must be an inflation"
            if (rec := ml.get(after, arg)) is not None:
                best = self.written.get(arg)
                self.written[arg] = rec if best is None or rec.rank > best.rank else best
            if kind == "join":
                assert arg in ml.members(after)
            if kind == "finish":
                assert arg not in ml.members(after)
            self.replicas[r] = after
        ml.check(self.replicas[r])
        self.states.append(self.replicas[r])


def run(history_ops: list[tuple[str, int, object]]) -> History:
    h = History()
    for kind, r, arg in history_ops:
        h.step(kind, r, arg)
    return h


@settings(max_examples=200, deadline=None)
@given(ops, st.data())
def test_merge_is_a_semilattice_join(
    history_ops: list[tuple[str, int, object]], data: st.DataObject
) -> None:
    h = run(history_ops)
    pick = st.sampled_from(h.states)
    a, b, c = data.draw(pick), data.draw(pick), data.draw(pick)
    assert ml.merge(a, b) == ml.merge(b, a)
    assert ml.merge(ml.merge(a, b), c) == ml.merge(a, ml.merge(b, c))
    assert ml.merge(a, a) == a
    assert ml.merge(a, ml.empty()) == a
    assert ml.descends(ml.merge(a, b), a) and ml.descends(ml.merge(a, b), b)


@settings(max_examples=200, deadline=None)
@given(ops, st.permutations([(i, j) for i in range(REPLICAS) for j in range(REPLICAS) if i != j]))
def test_replicas_converge_whatever_the_exchange_order(
    history_ops: list[tuple[str, int, object]], order: list[tuple[int, int]]
) -> None:
    h = run(history_ops)
    for dst, src in order + order:  # two rounds of every ordered pair reach everyone
        h.step("merge", dst, src)
    first = h.replicas[0]
    assert all(r == first for r in h.replicas)
    assert first == ml.merge_all(h.states)
    # the model: each node's register is the greatest ever written for it
    assert {r.node: r for r in first.records} == h.written


@settings(max_examples=100, deadline=None)
@given(ops, st.sampled_from(NODES), st.integers(0, REPLICAS - 1))
def test_a_node_that_left_can_always_join_again(
    history_ops: list[tuple[str, int, object]], node: str, r: int
) -> None:
    h = run(history_ops)
    for src in range(REPLICAS):  # r merges the cluster's state first, as a joiner must
        h.step("merge", r, src)
    h.step("finish", r, node)
    h.step("join", r, node)
    for dst, src in [(i, r) for i in range(REPLICAS)]:
        h.step("merge", dst, src)
    assert all(node in ml.members(rep) for rep in h.replicas)
