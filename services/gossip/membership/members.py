"""The durable member list: who is in the cluster, kept as replicated metadata.

Theory of operation
-------------------
Membership is explicit (DESIGN §3, §4): a node is a member from its ``join`` until a
``leave``, its own or one made for it by another node; a member that stops answering is
*down*, not gone, and keeps its vote. Any node may change the list (``cluster join``,
``cluster leave node=…`` for a stopped node), so the list is a state-based CRDT: nodes
exchange whole states and ``merge`` them, in any order, and converge.

Per node the list holds one register ``(version, status)``, status ``joined``,
``leaving`` or ``left``. Registers are ordered by version, then by status, with
``joined < leaving < left`` at equal version; ``merge`` keeps the greater register of
each node. That is the pointwise maximum over total orders, so ``merge`` is commutative,
associative and idempotent, and every operation below only moves registers up (an
*inflation*: ``merge(m, op(m)) == op(m)``), so no update is ever undone by an old copy.

* ``join`` of a node never seen writes ``(1, joined)``; of a node that left or is
  leaving, ``(version + 1, joined)``: a new membership incarnation that beats every copy
  of the old ``left``. So a node that left may come back.
* ``leave`` keeps the version and raises the status to ``leaving`` (the node still
  counts: it is migrating its queues), ``finish_leave`` to ``left``. A leave beats the
  join of the same incarnation whichever arrives first.

``left`` registers stay for good (they are tiny): forgetting one would let a stale
``joined`` copy resurrect the node. For the same reason a node that joins must first
merge the cluster's state from a seed, then ``join`` itself: a join computed on a blank
list writes ``(1, joined)``, which a ``(3, left)`` held by the cluster beats.

Worked example::

    a = join(join(empty(), "n1"), "n2")      # n1 (1, joined), n2 (1, joined)
    b = finish_leave(a, "n2")                # n1 makes the stopped n2 leave: (1, left)
    c = join(a, "n3")                        # meanwhile, elsewhere, n3 joins
    m = merge(b, c)                          # n1 joined, n2 left, n3 joined
    members(m) == {"n1", "n3"}
    members(join(m, "n2")) == {"n1", "n2", "n3"}    # n2 is back as (2, joined)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum


class Status(IntEnum):
    """A member's status; the value is the tie-break at equal version (higher wins)."""

    JOINED = 0
    LEAVING = 1
    LEFT = 2


@dataclass(frozen=True, slots=True)
class Record:
    """One node's register: its membership incarnation and where it stands in it."""

    node: str
    version: int
    status: Status

    @property
    def rank(self) -> tuple[int, Status]:
        """The register's place in the total order; ``merge`` keeps the greater."""
        return (self.version, self.status)


@dataclass(frozen=True, slots=True)
class MemberList:
    """Immutable; ``records`` sorted by node, one per node, each ``version >= 1``."""

    records: tuple[Record, ...] = ()


class InvalidMemberList(ValueError):
    """A member list that breaks the representation's invariants (e.g. from the wire)."""


def empty() -> MemberList:
    return MemberList()


def single(node: str) -> MemberList:
    """A one-node cluster, as a fresh node starts: it is its own majority."""
    return join(empty(), node)


def check(m: MemberList) -> MemberList:
    """Return ``m`` if it satisfies the invariants, else raise :class:`InvalidMemberList`."""
    prev = None
    for r in m.records:
        if prev is not None and r.node <= prev:
            raise InvalidMemberList(f"records not sorted or repeated at {r.node!r}")
        if r.version < 1 or not isinstance(r.status, Status):
            raise InvalidMemberList(f"record {r.node!r}: version {r.version}, {r.status!r}")
        prev = r.node
    return m


def get(m: MemberList, node: str) -> Record | None:
    for r in m.records:
        if r.node == node:
            return r
    return None


def members(m: MemberList) -> frozenset[str]:
    """The nodes that count in every majority: joined or still leaving."""
    return frozenset(r.node for r in m.records if r.status is not Status.LEFT)


def leaving(m: MemberList) -> frozenset[str]:
    return frozenset(r.node for r in m.records if r.status is Status.LEAVING)


def _put(m: MemberList, record: Record) -> MemberList:
    """``m`` with ``record`` as its node's register (the caller ensures it is greater)."""
    rest = [r for r in m.records if r.node != record.node]
    return MemberList(tuple(sorted([*rest, record], key=lambda r: r.node)))


def join(m: MemberList, node: str) -> MemberList:
    """``node`` becomes a member; a no-op for a joined node, a new version after a leave.

    Law: ``node in members(join(m, node))`` and ``merge(m, join(m, node)) == join(m, node)``.
    """
    r = get(m, node)
    if r is None:
        return _put(m, Record(node, 1, Status.JOINED))
    if r.status is Status.JOINED:
        return m
    return _put(m, Record(node, r.version + 1, Status.JOINED))


def leave(m: MemberList, node: str) -> MemberList:
    """``node`` starts leaving: it still counts as a member while its queues migrate.

    A no-op unless ``node`` is joined. Law: an inflation, as ``join``.
    """
    r = get(m, node)
    if r is None or r.status is not Status.JOINED:
        return m
    return _put(m, Record(node, r.version, Status.LEAVING))


def finish_leave(m: MemberList, node: str) -> MemberList:
    """``node`` is no longer a member (from joined, for a stopped node, or from leaving).

    Law: ``node not in members(finish_leave(m, node))``; an inflation, as ``join``.
    """
    r = get(m, node)
    if r is None or r.status is Status.LEFT:
        return m
    return _put(m, Record(node, r.version, Status.LEFT))


def merge(a: MemberList, b: MemberList) -> MemberList:
    """The join of two replicas: per node, the greater register.

    Laws: commutative, associative, idempotent; ``merge(a, empty()) == a``.
    """
    best = {r.node: r for r in a.records}
    for r in b.records:
        mine = best.get(r.node)
        if mine is None or r.rank > mine.rank:
            best[r.node] = r
    return MemberList(tuple(best[n] for n in sorted(best)))


def merge_all(states: Iterable[MemberList]) -> MemberList:
    """``merge`` folded over many states (order does not matter, by the laws above)."""
    acc = empty()
    for s in states:
        acc = merge(acc, s)
    return acc


def descends(a: MemberList, b: MemberList) -> bool:
    """``a`` already holds everything ``b`` does: sending ``b`` to ``a`` changes nothing."""
    return merge(a, b) == a
