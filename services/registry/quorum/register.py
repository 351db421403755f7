"""The value of one client id's register, and the changes a proposer may apply to it.

A register holds a directory :class:`Entry` or ``None`` (nobody ever wrote it). A change
is a pure function ``Entry | None -> Entry | None``: a proposer reads the highest accepted
value from a majority, applies the change and writes the result back, so the change must
give the same result wherever and however often it runs. Changes are named dataclasses,
not lambdas, so a test can print them and a shell can log them.

**The epoch rule.** The epoch is the entry's version of *ownership*: every
:class:`Claim` raises it by exactly 1 over the epoch it read, and no other change moves
it. Because CASPaxos applies each change to the latest chosen value (never to a stale
copy), epochs strictly increase across ownership changes, whichever node completes them.
For the same reason a register is never emptied: :class:`Release` leaves a tombstone
(state ``"deleted"``) that keeps the epoch, so the next claim cannot restart at 1.

Worked example::

    e1 = Claim("a", ("a", "b")).apply(None)      # Entry("a", 1, ("a", "b"), "online")
    e2 = SetState(1, "offline").apply(e1)        # epoch 1 still current: offline
    e3 = SetState(7, "online").apply(e2)         # stale epoch: e3 == e2 (CAS failed)
    e4 = Claim("b", ("b", "c")).apply(e3)        # Entry("b", 2, ("b", "c"), "online", prior=1)
    e5 = Release(2).apply(e4)                    # Entry("b", 2, ("b", "c"), "deleted", prior=1)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

ONLINE = "online"
OFFLINE = "offline"
TENTATIVE = "tentative"
DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class Entry:
    """A client id's directory entry: who owns the session, since which epoch, where its
    queue is replicated, and its state (``online``, ``offline``, ``tentative``,
    ``deleted``)."""

    owner: str
    epoch: int
    replicas: tuple[str, ...]
    state: str
    persistent: bool = False  # the session outlives its connection (its queue matters)
    # The epoch of the entry the change that set this owner was applied to (0: none).
    # A retry that finds its own lost attempt learns from it which session the attempt
    # superseded (``claims.superseded_here``).
    prior: int = 0

    @property
    def live(self) -> bool:
        """A session exists (online, offline or tentative), not a tombstone."""
        return self.state != DELETED


class Change(Protocol):
    """What a proposer applies to the highest accepted value it read."""

    def apply(self, current: Entry | None) -> Entry | None:
        """The new value; must be deterministic (it may run on any node)."""
        ...


@dataclass(frozen=True, slots=True)
class Read:
    """The identity: a round that writes back what it reads, so the read is linearizable
    (it returns the last committed value or a newer one, never a value a minority
    accepted and the cluster then lost)."""

    def apply(self, current: Entry | None) -> Entry | None:
        return current


@dataclass(frozen=True, slots=True)
class Claim:
    """Take ownership: ``node`` owns the session at the read epoch + 1 (1 for a new id).

    Unconditional, like a takeover, but for one case: a client that resumes (``resume``)
    a persistent session whose queue lives only on nodes the proposer saw ``down`` gets
    nothing (the value is left as it is, and the caller sees from the committed value
    that it did not win): taking it would hand the client an empty queue in place of its
    messages (DESIGN §4, R = 1). Retried after an unknown outcome it may raise the epoch
    twice, which is harmless (same owner).

    ``floor``: the epoch is at least this. The claiming node passes the next epoch of its
    own session table, so one number serves as the cluster's epoch and the node's local
    fencing token (it is above every epoch the node issued, for any client id).
    """

    node: str
    replicas: tuple[str, ...]
    state: str = ONLINE
    persistent: bool = False
    floor: int = 0
    resume: bool = False
    down: frozenset[str] = frozenset()

    def apply(self, current: Entry | None) -> Entry | None:
        if self.resume and stranded(current, self.node, self.down):
            return current
        epoch = max(1 if current is None else current.epoch + 1, self.floor)
        replicas = self.replicas
        if self.resume and current is not None and current.live and current.persistent:
            replicas = holders(current)  # the queue stays where it is until it is moved
        prior = 0 if current is None else current.epoch
        return Entry(self.node, epoch, replicas, self.state, self.persistent, prior)


def holders(entry: Entry) -> tuple[str, ...]:
    """The nodes that hold the entry's queue."""
    return entry.replicas or (entry.owner,)


def stranded(current: Entry | None, node: str, down: frozenset[str]) -> bool:
    """A persistent session that ``node`` cannot take without losing its queue: every
    copy of the queue is on another node, and every one of them is down."""
    if current is None or not current.live or not current.persistent:
        return False
    held = holders(current)
    return node not in held and all(r in down for r in held)


def subscriptions_ours(current: Entry | None, node: str, epoch: int | None) -> bool:
    """Whether ``node`` may delete the id's subscriptions, its table no longer holding the
    session: a connection it no longer knows ended (``epoch``: that connection's), or the
    start-up sweep of sessions lost with a restart (``epoch`` None).

    Only when the register names no live session, or ``node``'s at or before ``epoch``:
    a session another node took over keeps its subscriptions, which its new owner's
    listener re-owns from this very record (a delete that reached it first would leave
    the resumed session subscribed to nothing, everywhere). A newer epoch of ``node``
    itself is a registration here still on its way to the table.
    """
    if current is None or not current.live:
        return True
    if current.owner != node:
        return False
    if epoch is None:  # a persistent session is on disk: one the table lacks is not ended
        return not current.persistent
    return current.epoch <= epoch


def subscriptions_void(previous: Entry | None, node: str, clean_start: bool) -> bool:
    """Whether a claim by ``node`` that read ``previous`` leaves the old session's
    subscriptions to nobody: that session lived on another node and does not come
    along (a clean start, or a session that was not persistent). The claimer drops
    them; the old node must not (:func:`subscriptions_ours`)."""
    if previous is None or not previous.live or previous.owner == node:
        return False
    return clean_start or not previous.persistent


@dataclass(frozen=True, slots=True)
class FailOver:
    """The primary ``dead`` of a persistent session's replicated queue is down and no
    client is resuming the session: ``node``, which holds a copy, takes the session
    over, offline, at the next epoch, with its queue on ``replicas`` (DESIGN §4: "a
    publish arrives for a queue whose primary is down"). Only while the register still
    names ``dead`` as the owner and ``node`` as a holder: a client that resumed the
    session meanwhile, or another failover, leaves nothing to do (the value is kept, and
    the caller sees that it did not win)."""

    dead: str
    node: str
    replicas: tuple[str, ...]
    floor: int = 0

    def apply(self, current: Entry | None) -> Entry | None:
        if (
            current is None
            or not current.live
            or not current.persistent
            or current.owner != self.dead
            or self.node not in holders(current)
        ):
            return current
        epoch = max(current.epoch + 1, self.floor)
        return Entry(self.node, epoch, self.replicas, OFFLINE, True, current.epoch)


@dataclass(frozen=True, slots=True)
class Relocate:
    """The queue now lives on ``replicas`` (it was handed over), if ``expected_epoch``
    still owns the session; otherwise nothing changes."""

    expected_epoch: int
    replicas: tuple[str, ...]

    def apply(self, current: Entry | None) -> Entry | None:
        if current is None or current.epoch != self.expected_epoch:
            return current
        return replace(current, replicas=self.replicas)


@dataclass(frozen=True, slots=True)
class SetState:
    """Compare-and-set on the epoch: set ``state`` only if the owner the caller knew (at
    ``expected_epoch``) still owns the session; otherwise leave the value as it is, and
    the caller sees from the committed ``previous`` that it lost."""

    expected_epoch: int
    state: str

    def apply(self, current: Entry | None) -> Entry | None:
        if current is None or current.epoch != self.expected_epoch:
            return current
        return replace(current, state=self.state)


@dataclass(frozen=True, slots=True)
class Release:
    """End the session if ``expected_epoch`` still owns it: a tombstone that keeps the
    epoch (never ``None``, which would let a later claim reuse epoch 1)."""

    expected_epoch: int

    def apply(self, current: Entry | None) -> Entry | None:
        return SetState(self.expected_epoch, DELETED).apply(current)


@dataclass(frozen=True, slots=True)
class Adopt:
    """Enter a session that ``node`` holds but the register does not know of (made while
    the node was alone, or tentatively on a minority side): it becomes the entry only if
    no live session is recorded and no newer epoch was. Never takes a session from
    anyone, so a node that was away cannot win back what the majority gave elsewhere."""

    node: str
    epoch: int
    persistent: bool

    def apply(self, current: Entry | None) -> Entry | None:
        if current is None or (not current.live and current.epoch < self.epoch):
            prior = 0 if current is None else current.epoch
            return Entry(self.node, self.epoch, (self.node,), ONLINE, self.persistent, prior)
        return current
