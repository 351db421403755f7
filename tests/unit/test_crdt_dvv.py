"""DVV sets: worked examples, and Hypothesis over random histories of writes and syncs.

Random DVV sets are not valid states (dots must be unique), so the properties draw a
*history* — replicas writing with current, stale or empty contexts and syncing with each
other in any order — and check every reached state against a reference model: a value is
live at a replica iff the replica has seen its write and no seen write's context covers
its dot. The semilattice laws (commutative, associative, idempotent) are checked on the
reached states, and convergence on a final exchange in a random order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from services.gossip.crdt import dvv
from services.gossip.crdt import version_vector as vv
from services.gossip.crdt.dvv import DVVSet, Entry

S = DVVSet[str]
NODES = ("a", "b", "c")


def test_worked_example_from_the_docstring() -> None:
    c1: S = dvv.update(dvv.empty(), {}, "a", "x")
    c2: S = dvv.update(dvv.empty(), {}, "b", "y")
    c3 = dvv.sync(c1, c2)
    assert sorted(dvv.values(c3)) == ["x", "y"]
    assert dvv.join(c3) == {"a": 1, "b": 1}
    c4 = dvv.update(c3, dvv.join(c3), "a", "z")
    assert dvv.values(c4) == ["z"]
    assert dvv.join(c4) == {"a": 2, "b": 1}
    assert dvv.less(c3, c4) and not dvv.less(c4, c3)


def test_update_keeps_what_the_context_did_not_cover() -> None:
    """riak's sync_update case: v3 written from the context of v1 replaces v1, not v2."""
    a0: S = dvv.update(dvv.empty(), {}, "a", "v1")
    ctx1 = dvv.join(a0)
    a1 = dvv.update(a0, {}, "a", "v2")  # a blind write: v1 and v2 are siblings
    assert a1 == DVVSet((Entry("a", 2, ("v2", "v1")),))
    a2 = dvv.update(a1, ctx1, "a", "v3")
    assert a2 == DVVSet((Entry("a", 3, ("v3", "v2")),))
    assert dvv.dotted(a2) == [("a", 3, "v3"), ("a", 2, "v2")]


def test_sync_takes_the_higher_floor() -> None:
    old: S = DVVSet((Entry("a", 2, ("v2", "v1")),))
    new: S = DVVSet((Entry("a", 1, ()),))  # has seen a:1 overwritten
    assert dvv.sync(old, new) == DVVSet((Entry("a", 2, ("v2",)),))
    assert dvv.sync(new, old) == dvv.sync(old, new)


def test_from_context_and_discard() -> None:
    c: S = dvv.update(dvv.from_context({"a": 5}), {"a": 5}, "a", "x")
    assert dvv.dotted(c) == [("a", 6, "x")]
    assert dvv.values(dvv.discard(c, {"a": 6})) == []
    assert dvv.join(dvv.discard(c, {"b": 2})) == {"a": 6, "b": 2}


def test_check_rejects_broken_states() -> None:
    bad: list[S] = [
        DVVSet((Entry("b", 1), Entry("a", 1))),
        DVVSet((Entry("a", 1), Entry("a", 2))),
        DVVSet((Entry("a", 0),)),
        DVVSet((Entry("a", 1, ("x", "y")),)),
    ]
    for c in bad:
        try:
            dvv.check(c)
        except dvv.InvalidDVV:
            continue
        raise AssertionError(f"accepted {c}")
    assert dvv.check(DVVSet((Entry("a", 2, ("x",)), Entry("b", 1)))) is not None


# -- histories ------------------------------------------------------------------------


@dataclass
class Write:
    node: str
    n: int
    ctx: dict[str, int]
    value: str


@dataclass
class Replica:
    node: str
    state: S = field(default_factory=dvv.empty)
    seen: set[str] = field(default_factory=set)  # values of the writes it has seen
    past: list[dict[str, int]] = field(default_factory=lambda: [{}])  # joins it had


class History:
    def __init__(self) -> None:
        self.replicas = [Replica(n) for n in NODES]
        self.writes: dict[str, Write] = {}
        self.states: list[S] = []

    def write(self, r: int, ctx_kind: str, pick: int) -> None:
        rep = self.replicas[r]
        if ctx_kind == "current":
            ctx = dvv.join(rep.state)
        elif ctx_kind == "stale":
            ctx = rep.past[pick % len(rep.past)]
        else:
            ctx = {}
        value = f"{rep.node}{len(self.writes)}"
        n = max(vv.get(dvv.join(rep.state), rep.node), vv.get(ctx, rep.node)) + 1
        rep.state = dvv.update(rep.state, ctx, rep.node, value)
        self.writes[value] = Write(rep.node, n, dict(ctx), value)
        rep.seen.add(value)
        self._after(rep)

    def sync(self, dst: int, src: int) -> None:
        a, b = self.replicas[dst], self.replicas[src]
        a.state = dvv.sync(a.state, b.state)
        a.seen |= b.seen
        self._after(a)

    def _after(self, rep: Replica) -> None:
        rep.past.append(dvv.join(rep.state))
        self.states.append(rep.state)

    def live(self, seen: set[str]) -> set[str]:
        """The reference model: seen writes whose dot no seen write's context covers."""
        ws = [self.writes[v] for v in seen]
        return {w.value for w in ws if all(vv.get(o.ctx, w.node) < w.n for o in ws)}


ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"),
            st.integers(0, 2),
            st.sampled_from(["current", "current", "stale", "blind"]),
            st.integers(0, 50),
        ),
        st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 2), st.just(0)),
    ),
    max_size=30,
)


def run(history_ops: list[tuple[str, int, object, int]]) -> History:
    h = History()
    for kind, x, y, z in history_ops:
        if kind == "write":
            assert isinstance(y, str)
            h.write(x, y, z)
        else:
            assert isinstance(y, int)
            h.sync(x, y)
    return h


def check_dots(c: S, h: History) -> None:
    """Every live value sits at the dot it was written with (dots are never reused)."""
    for node, n, value in dvv.dotted(c):
        w = h.writes[value]
        assert (w.node, w.n) == (node, n)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_every_reached_state_matches_the_model(
    history_ops: list[tuple[str, int, object, int]],
) -> None:
    h = run(history_ops)
    for rep in h.replicas:
        assert sorted(dvv.values(rep.state)) == sorted(h.live(rep.seen))
        check_dots(rep.state, h)
        dvv.check(rep.state)


@settings(max_examples=150, deadline=None)
@given(ops, st.data())
def test_sync_is_a_semilattice_join(
    history_ops: list[tuple[str, int, object, int]], data: st.DataObject
) -> None:
    h = run(history_ops)
    pool = h.states + [r.state for r in h.replicas] + [dvv.empty()]
    pick = st.sampled_from(pool)
    a, b, c = data.draw(pick), data.draw(pick), data.draw(pick)
    assert dvv.sync(a, b) == dvv.sync(b, a)
    assert dvv.sync(dvv.sync(a, b), c) == dvv.sync(a, dvv.sync(b, c))
    assert dvv.sync(a, a) == a
    assert dvv.sync(a, dvv.empty()) == a
    assert dvv.join(dvv.sync(a, b)) == vv.merge(dvv.join(a), dvv.join(b))
    assert dvv.descends(dvv.sync(a, b), a)


@settings(max_examples=150, deadline=None)
@given(ops, st.permutations([(i, j) for i in range(3) for j in range(3) if i != j]))
def test_replicas_converge_whatever_the_exchange_order(
    history_ops: list[tuple[str, int, object, int]], order: list[tuple[int, int]]
) -> None:
    h = run(history_ops)
    # Two rounds of every ordered pair, in a random order, reach everyone.
    for dst, src in order + order:
        h.sync(dst, src)
    states = [r.state for r in h.replicas]
    assert states[0] == states[1] == states[2]
    assert sorted(dvv.values(states[0])) == sorted(h.live(set(h.writes)))
    assert states[0] == dvv.sync_all(h.states)


@settings(max_examples=100, deadline=None)
@given(ops, st.integers(0, 2))
def test_a_write_with_the_current_context_overwrites_every_sibling(
    history_ops: list[tuple[str, int, object, int]], r: int
) -> None:
    h = run(history_ops)
    before = h.replicas[r].state
    h.write(r, "current", 0)
    after = h.replicas[r].state
    assert len(dvv.values(after)) == 1
    assert dvv.join(after) == vv.increment(dvv.join(before), h.replicas[r].node)
