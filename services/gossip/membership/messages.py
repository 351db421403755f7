"""What the failure detector sends and says: messages, rumours and its outputs.

Every message carries its sender's name and current incarnation (so any message from a
node that has refuted a suspicion ends it) and a few piggybacked rumours. The shell maps
these one-to-one onto its wire format; the core never sees bytes.

* ``Ping(seq, target)`` asks ``target`` for an ``Ack(seq)``. ``target`` guards against a
  message reaching a different node at a reused address.
* ``PingReq(seq, target)`` asks a helper to ping ``target`` for the sender (an indirect
  probe). The helper answers ``Ack(seq)`` if the target answers it, else ``Nack(seq)``,
  which tells the requester that the helper at least is alive (lifeguard).
* ``Gossip`` only carries rumours.

Rumours, ordered per node by ``(incarnation, rank)`` with ``Alive < Suspect < Dead``: the
greater wins. Only the node itself raises its incarnation, so an ``Alive`` with a higher
incarnation is a refutation that no older ``Suspect`` or ``Dead`` can override.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum


class State(IntEnum):
    """What a node believes of a peer; the value is the rank of the rumour that says it."""

    ALIVE = 0
    SUSPECT = 1  # still counted as up: it has a suspicion timeout to refute
    DEAD = 2  # down (not gone: membership is the member list's business)


@dataclass(frozen=True, slots=True)
class Alive:
    node: str
    incarnation: int

    state = State.ALIVE


@dataclass(frozen=True, slots=True)
class Suspect:
    node: str
    incarnation: int
    by: str  # who suspects: distinct suspecters shorten the suspicion timeout

    state = State.SUSPECT


@dataclass(frozen=True, slots=True)
class Dead:
    node: str
    incarnation: int
    by: str

    state = State.DEAD


Rumour = Alive | Suspect | Dead


@dataclass(frozen=True, slots=True)
class Ping:
    src: str
    incarnation: int
    seq: int
    target: str
    rumours: tuple[Rumour, ...] = ()


@dataclass(frozen=True, slots=True)
class Ack:
    src: str
    incarnation: int
    seq: int
    rumours: tuple[Rumour, ...] = ()


@dataclass(frozen=True, slots=True)
class Nack:
    src: str
    incarnation: int
    seq: int
    rumours: tuple[Rumour, ...] = ()


@dataclass(frozen=True, slots=True)
class PingReq:
    src: str
    incarnation: int
    seq: int
    target: str
    rumours: tuple[Rumour, ...] = ()


@dataclass(frozen=True, slots=True)
class Gossip:
    src: str
    incarnation: int
    rumours: tuple[Rumour, ...] = ()


Message = Ping | Ack | Nack | PingReq | Gossip


@dataclass(frozen=True, slots=True)
class Send:
    """Deliver ``message`` to node ``to``; losing it is allowed (the protocol retries)."""

    to: str
    message: Message


@dataclass(frozen=True, slots=True)
class Change:
    """A peer went up or down in this node's eyes, and why (for the log)."""

    node: str
    up: bool
    incarnation: int
    cause: str


@dataclass(slots=True)
class Output:
    """What one call produced: messages for the shell to send, view changes to apply."""

    sends: list[Send] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
