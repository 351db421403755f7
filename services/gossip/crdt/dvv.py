"""Dotted version vector sets: one key's concurrent values with their causal history.

Theory of operation
-------------------
(Preguiça, Baquero, Almeida et al., "Dotted Version Vectors"; the compact *DVV set* of
riak_dt's ``dvvset``.) Every write gets a *dot* ``(node, n)``: the ``n``-th write
coordinated by ``node`` for this key. A dot names one value, everywhere, forever.

A DVV set keeps one :class:`Entry` per node, sorted by node name::

    Entry(node="a", counter=4, values=(v4, v3))

says: "dots a:1..a:4 have been seen; a:4 and a:3 are still live, holding v4 and v3;
a:1 and a:2 were overwritten". Live values always sit at the top of a node's range
(``values[i]`` has dot ``counter - i``), because a write's *context* is a version
vector, and a version vector covers a prefix of each node's dots. So
``counter - len(values)`` is the entry's *floor*: every dot at or below it is obsolete.

* ``update(c, ctx, node, v)`` is a write made by ``node`` after reading ``ctx``: values
  whose dots ``ctx`` covers are overwritten, the others stay as *siblings*, and ``v``
  gets the next dot of ``node``.
* ``sync(a, b)`` merges two replicas' states: per node, the seen range is the larger one
  and the floor is the higher one; what lies between is live. It is the join of a
  semilattice (commutative, associative, idempotent), so replicas that exchange states
  in any order converge.

This module knows nothing of timestamps or deletions: a tombstone is just a value, and
choosing one value among siblings is a resolver's job (see ``lww``). Unlike riak's
dvvset there are no anonymous (dot-less) values: every write here is coordinated by a
node with a context, so each value has a dot.

Correctness needs dots to be unique: a node must never hand out the same dot twice
for a key, even across restarts and garbage collection (the store makes sure).

Worked example (a and b write concurrently, then a overwrites both)::

    c1 = update(empty(), {}, "a", "x")        # a:1 = x
    c2 = update(empty(), {}, "b", "y")        # b:1 = y, made without seeing x
    c3 = sync(c1, c2)                         # siblings x and y; join = {a: 1, b: 1}
    c4 = update(c3, join(c3), "a", "z")       # a:2 = z overwrites both
    values(c4) == ["z"]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from services.gossip.crdt import version_vector as vv
from services.gossip.crdt.version_vector import VersionVector

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Entry(Generic[V]):
    """One node's part: dots ``node:1..counter`` seen, the newest ``len(values)`` live."""

    node: str
    counter: int
    values: tuple[V, ...] = ()

    @property
    def floor(self) -> int:
        """Highest obsolete dot of this node (0: none)."""
        return self.counter - len(self.values)


@dataclass(frozen=True, slots=True)
class DVVSet(Generic[V]):
    """Immutable; ``entries`` sorted by node, one per node, each with ``counter >= 1``."""

    entries: tuple[Entry[V], ...] = ()


class InvalidDVV(ValueError):
    """A DVV set that breaks the representation's invariants (e.g. from the wire)."""


def empty() -> DVVSet[V]:
    """The state of a key nobody has written: ``join(empty()) == {}``."""
    return DVVSet(())


def check(c: DVVSet[V]) -> DVVSet[V]:
    """Return ``c`` if it satisfies the invariants, else raise :class:`InvalidDVV`."""
    prev = ""
    for i, e in enumerate(c.entries):
        if i and e.node <= prev:
            raise InvalidDVV(f"entries not sorted or repeated at {e.node!r}")
        if e.counter < 1 or len(e.values) > e.counter:
            raise InvalidDVV(f"entry {e.node!r}: counter {e.counter}, {len(e.values)} values")
        prev = e.node
    return c


def from_context(context: Mapping[str, int]) -> DVVSet[V]:
    """A state that has seen ``context`` and holds no live value.

    Law: ``join(from_context(ctx)) == vv.new(ctx)`` and ``values(...) == []``.
    """
    norm = vv.new(context)
    return DVVSet(tuple(Entry(node, norm[node]) for node in sorted(norm)))


def join(c: DVVSet[V]) -> VersionVector:
    """The causal context of ``c``: every dot it has seen, as a version vector.

    Law: ``join(sync(a, b)) == vv.merge(join(a), join(b))``.
    """
    return {e.node: e.counter for e in c.entries}


def values(c: DVVSet[V]) -> list[V]:
    """The live values (siblings), newest dot first within each node, nodes in order.

    Law: ``len(values(c)) <= sum(join(c).values())``; empty only for deleted-and-forgotten
    or never-written keys.
    """
    return [v for e in c.entries for v in e.values]


def dotted(c: DVVSet[V]) -> list[tuple[str, int, V]]:
    """The live values with their dots ``(node, n, value)``, for inspection and tests."""
    return [(e.node, e.counter - i, v) for e in c.entries for i, v in enumerate(e.values)]


def _merge_entry(x: Entry[V], y: Entry[V]) -> Entry[V]:
    """Two views of one node's dots: the seen range is the larger, the floor the higher."""
    if x.counter < y.counter:
        x, y = y, x
    floor = max(x.floor, y.floor)
    return Entry(x.node, x.counter, x.values[: x.counter - floor])


def sync(a: DVVSet[V], b: DVVSet[V]) -> DVVSet[V]:
    """Merge two replicas' states of one key.

    The result holds exactly the values of ``a`` and of ``b`` that the other side has not
    seen overwritten. Laws: commutative, associative, idempotent (``sync(a, a) == a``);
    ``join(sync(a, b)) == vv.merge(join(a), join(b))``; ``sync(a, empty()) == a``.
    """
    ea, eb = a.entries, b.entries
    out: list[Entry[V]] = []
    i = j = 0
    while i < len(ea) and j < len(eb):
        x, y = ea[i], eb[j]
        if x.node < y.node:
            out.append(x)
            i += 1
        elif y.node < x.node:
            out.append(y)
            j += 1
        else:
            out.append(_merge_entry(x, y))
            i += 1
            j += 1
    out.extend(ea[i:])
    out.extend(eb[j:])
    return DVVSet(tuple(out))


def sync_all(states: Iterable[DVVSet[V]]) -> DVVSet[V]:
    """``sync`` folded over many states (order does not matter, by the laws above)."""
    acc: DVVSet[V] = empty()
    for c in states:
        acc = sync(acc, c)
    return acc


def discard(c: DVVSet[V], context: Mapping[str, int]) -> DVVSet[V]:
    """Forget the values ``context`` covers, and remember having seen ``context``.

    Law: ``discard(c, ctx) == sync(c, from_context(ctx))``.
    """
    return sync(c, from_context(context))


def update(c: DVVSet[V], context: Mapping[str, int], node: str, value: V) -> DVVSet[V]:
    """A write of ``value`` coordinated by ``node`` after reading ``context``.

    Laws: ``values(update(c, ctx, n, v)) == [v] + [the values of c not covered by ctx]``
    (order aside); the new dot is ``(n, max(join(c)[n], ctx[n]) + 1)``, so
    ``join(update(c, ctx, n, v)) == vv.increment(vv.merge(join(c), ctx), n)``; with
    ``ctx = join(c)`` the write overwrites every sibling.
    """
    base = discard(c, context)
    out: list[Entry[V]] = []
    placed = False
    for e in base.entries:
        if not placed and e.node == node:
            out.append(Entry(node, e.counter + 1, (value, *e.values)))
            placed = True
        elif not placed and e.node > node:
            out.append(Entry(node, 1, (value,)))
            out.append(e)
            placed = True
        else:
            out.append(e)
    if not placed:
        out.append(Entry(node, 1, (value,)))
    return DVVSet(tuple(out))


def descends(a: DVVSet[V], b: DVVSet[V]) -> bool:
    """``a`` has seen every dot ``b`` has (then ``sync(a, b)`` adds nothing new of b's).

    Law: ``descends(a, b)`` iff ``vv.descends(join(a), join(b))``.
    """
    return vv.descends(join(a), join(b))


def less(a: DVVSet[V], b: DVVSet[V]) -> bool:
    """``a`` is causally older than ``b``: ``b`` has seen all of ``a`` and more."""
    return vv.dominates(join(b), join(a))
