"""Version vectors: how much of each node's history a replica has seen.

Theory of operation
-------------------
A version vector (VV) maps a node name to a counter: ``{"a": 3, "b": 1}`` means "I
have seen events 1..3 of node a and event 1 of node b". Counters only grow. Two VVs
are ordered component-wise: ``a`` *descends* ``b`` when every counter of ``a`` is at
least that of ``b`` (``a`` has seen everything ``b`` has); when neither descends the
other they are *concurrent*. ``merge`` is the least upper bound, the join of a
semilattice: commutative, associative and idempotent, so replicas that exchange VVs in
any order, any number of times, agree.

Representation: a plain ``dict[str, int]`` with no zero entries, so that two VVs that
mean the same thing compare equal with ``==`` (``{}`` and ``{"a": 0}`` would not). Every
function accepts any ``Mapping`` and returns a new dict; none mutates its input.

Worked example::

    merge({"a": 3}, {"a": 1, "b": 2}) == {"a": 3, "b": 2}
    descends({"a": 3, "b": 2}, {"a": 1}) is True
    dominates({"a": 1}, {"a": 1}) is False     # equal is not strictly newer
    increment({"a": 3}, "b") == {"a": 3, "b": 1}
"""

from __future__ import annotations

from collections.abc import Mapping

VersionVector = dict[str, int]


def new(entries: Mapping[str, int] | None = None) -> VersionVector:
    """A normalised copy: zero counters dropped, negatives refused (they mean nothing)."""
    out: VersionVector = {}
    for node, counter in (entries or {}).items():
        if counter < 0:
            raise ValueError(f"negative counter {counter} for {node!r}")
        if counter:
            out[node] = counter
    return out


def get(vv: Mapping[str, int], node: str) -> int:
    """The counter of ``node``; 0 when ``vv`` has never seen it."""
    return vv.get(node, 0)


def merge(a: Mapping[str, int], b: Mapping[str, int]) -> VersionVector:
    """Least upper bound: ``merge(a, b)[n] == max(a[n], b[n])``.

    Laws: commutative, associative, idempotent; ``descends(merge(a, b), a)``.
    """
    out = dict(a)
    for node, counter in b.items():
        if counter > out.get(node, 0):
            out[node] = counter
    return new(out)


def descends(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """``a >= b``: ``a`` has seen every event ``b`` has.

    Laws: reflexive, antisymmetric (both ways means equal), transitive;
    ``descends(a, b)`` iff ``merge(a, b) == a``.
    """
    return all(a.get(node, 0) >= counter for node, counter in b.items())


def dominates(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """``a > b``: ``a`` descends ``b`` and has seen something more.

    Laws: irreflexive; never both ``dominates(a, b)`` and ``dominates(b, a)``.
    """
    return descends(a, b) and not descends(b, a)


def concurrent(a: Mapping[str, int], b: Mapping[str, int]) -> bool:
    """Neither descends the other: each has seen an event the other has not."""
    return not descends(a, b) and not descends(b, a)


def increment(vv: Mapping[str, int], node: str) -> VersionVector:
    """Record one more event of ``node``.

    Law: ``dominates(increment(v, n), v)`` and only ``n``'s counter changes, by one.
    """
    out = new(vv)
    out[node] = out.get(node, 0) + 1
    return out
