"""Who decides for a client id: rendezvous hashing over the cluster's members.

Theory of operation. Every member ``m`` gets a score ``H(m, key)`` for a session key; the
members sorted by descending score are the key's *ring*. The key's **leader** is the first
*live* member on its ring; it alone serialises that client id's CONNECTs, takeovers and
expiry. Rendezvous hashing moves only the keys of a member that joins or leaves (about
1/N of them), and needs no token table that members must agree on.

A leader acts only while its node sees a strict majority of the members, so the two sides
of a partition never both accept a CONNECT for one id (DESIGN I3). The minority side
refuses, unless the operator chose availability (``allow_register_during_netsplit``):
then the first live member on the ring in *its* view acts.

Worked example, members ``a b c``: if the ring of ``("", "c1")`` is ``b a c`` then ``b``
leads it; with ``b`` down, ``a`` (2 of 3 live, a majority) takes over; on a lone ``c``
(1 of 3) nobody acts unless the netsplit option is on, in which case ``c`` does.

The scores come from BLAKE2b, never from ``hash()``, which differs between processes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Iterable
from dataclasses import dataclass

from services.common.session_key import SessionKey


def key_bytes(key: SessionKey) -> bytes:
    """The canonical byte form of a session key: ``mountpoint \\0 client_id``."""
    return f"{key[0]}\0{key[1]}".encode()


def score(member: str, key: SessionKey) -> int:
    """A member's weight for a key; the member's name is length-prefixed so no pair collides."""
    name = member.encode()
    data = len(name).to_bytes(4, "big") + name + key_bytes(key)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def ring(key: SessionKey, members: Iterable[str]) -> list[str]:
    """Members in the key's preference order (ties broken by name, so the order is total)."""
    return sorted(set(members), key=lambda m: (-score(m, key), m))


@dataclass(frozen=True, slots=True)
class View:
    """What this node knows of the cluster: all members, and which of them it can reach."""

    self_node: str
    members: frozenset[str]
    live: frozenset[str]

    @classmethod
    def single(cls, node: str) -> View:
        """A one-node cluster: the node is its own majority and leads every key."""
        return cls(node, frozenset({node}), frozenset({node}))

    @property
    def has_majority(self) -> bool:
        return 2 * len(self.live & self.members) > len(self.members)


@dataclass(frozen=True, slots=True)
class Decision:
    leader: str | None  # the member that should act for the key, None if nobody may
    act: bool  # True when this node is that leader
    reason: str  # why not, when ``act`` is False


def decide(view: View, key: SessionKey, allow_netsplit: bool = False) -> Decision:
    """Whether this node may register, take over or expire ``key`` now."""
    if view.members == view.live == {view.self_node}:
        return Decision(view.self_node, True, "")  # alone: no hashing on the connect path
    live = [m for m in ring(key, view.members) if m in view.live]
    if not live:
        return Decision(None, False, "no live member")
    if not view.has_majority and not allow_netsplit:
        return Decision(None, False, "netsplit: this node does not see a majority")
    leader = live[0]
    if leader != view.self_node:
        return Decision(leader, False, f"the leader of this client id is {leader}")
    return Decision(leader, True, "")


def replicas(key: SessionKey, owner: str, members: Iterable[str], factor: int) -> list[str]:
    """The queue's owner, then the next ``factor - 1`` members on the key's ring."""
    others = [m for m in ring(key, members) if m != owner]
    return [owner, *others[: max(factor - 1, 0)]]


def replica_set(
    key: SessionKey, owner: str, members: Iterable[str], up: Container[str], factor: int
) -> list[str]:
    """A new replica set: the owner, then the next ``factor - 1`` members on the key's ring
    that are up; with none up, the next member that is down.

    A set of the owner alone is a queue that is not replicated (the msgstore drops its
    replication at the Open). Made of the members that are up, the set shrank to that
    when a one-way cut hid the others from the owner for a moment: its appends were
    answered on one copy, delivered, acknowledged, and a failover later lost one (the
    CI fault run of 2026-11-28). With a down member named, the queue stays replicated and
    commits nothing until a write quorum is back (the primary counts to W as configured,
    DESIGN §4: never a success for a message on fewer than W copies); the set heals once
    members are up again, as a set missing a member does."""
    others = [m for m in ring(key, members) if m != owner]
    live = [m for m in others if m in up]
    if factor < 2:
        return [owner]
    return [owner, *(live[: factor - 1] or others[:1])]
