"""Last-writer-wins among siblings: the deterministic resolver for a register.

Theory of operation
-------------------
A DVV set may hold several concurrent values of a key (siblings), written on different
nodes while they could not see each other. Readers want one value. Each value travels
in a :class:`Stamped` envelope: the writer's wall clock in µs, the writer's node and
the value (``None`` for a deletion). :func:`winner` picks the greatest envelope under a
*total* order — timestamp, then node, then live-over-tombstone, then the bytes — so
every replica that holds the same siblings picks the same one, whatever order they
arrived in. Clocks may skew; LWW accepts that a concurrent write with a later clock
wins. Causally ordered writes never need it: the DVV drops overwritten values first.

Why LWW fits the metadata here: a retained message is "the last one published"; a
session record and a session's subscription record each have one writer (the node
owning the session), so concurrency only happens across a netsplit, where the later
write is the one to keep.

Worked example::

    winner([Stamped(10, "b", b"x"), Stamped(12, "a", None)]) == Stamped(12, "a", None)
    winner([Stamped(10, "a", b"x"), Stamped(10, "b", b"y")]).node == "b"
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Stamped:
    """A value with the (timestamp, node) that orders it; ``value is None``: deleted."""

    ts_us: int
    node: str
    value: bytes | None

    @property
    def deleted(self) -> bool:
        return self.value is None

    def order_key(self) -> tuple[int, str, bool, bytes]:
        """Total order on envelopes; equal keys only for equal envelopes."""
        return (self.ts_us, self.node, self.value is not None, self.value or b"")


Resolver = Callable[[Iterable[Stamped]], Stamped]


def winner(siblings: Iterable[Stamped]) -> Stamped:
    """The greatest envelope by :meth:`Stamped.order_key`.

    Laws: a maximum under a total order, so independent of the siblings' order and of
    duplicates (commutative, associative, idempotent as a binary ``max``);
    ``winner([s]) == s``. Raises ``ValueError`` on no siblings.
    """
    best: Stamped | None = None
    for s in siblings:
        if best is None or s.order_key() > best.order_key():
            best = s
    if best is None:
        raise ValueError("no siblings to choose from")
    return best
