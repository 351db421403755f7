"""Ballots, and the four messages of a round: Prepare and Accept out, their replies back.

**Batching.** Every message carries many keys under one ballot: a round for N client ids
costs one Prepare and one Accept per member, not N of each. Each key is still its own
single-decree Paxos instance; the acceptor answers key by key, and a refusal of one key
does not hold up the others.

**Why a ballot holds the incarnation.** Paxos is safe only if no two proposals ever use
the same ballot: an acceptor that saw ``(b, x)`` and one that saw ``(b, y)`` would each
hand the next proposer a different "highest accepted value". A proposer's counter lives
in memory; after a restart (worse, after its data directory was wiped) it would count
``1, 2, 3 ...`` again and mint ballots it used before. The incarnation, a number that
differs for every start of a node, makes ``(counter, incarnation, node)`` unique without
persisting the counter. The counter comes first so any proposer can outbid any other
by counting higher; incarnation and node only break ties.

**Why replies and accepts name the acceptor's incarnation.** A proposer sends its Accept
only to the acceptors whose promises it used, addressed to the incarnation that
promised. An acceptor that lost its disk and came back under a new incarnation never
made those promises, so it refuses; see :mod:`.acceptor` for why that matters.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.session_key import SessionKey
from services.registry.quorum.register import Entry


@dataclass(frozen=True, slots=True, order=True)
class Ballot:
    """A proposal number, totally ordered as the tuple ``(counter, incarnation, node)``."""

    counter: int
    incarnation: int
    node: str


ZERO = Ballot(0, 0, "")
"""Below every real ballot: "nothing promised", "nothing accepted"."""


@dataclass(frozen=True, slots=True)
class Prepare:
    """Phase 1: promise ``ballot`` for each key, and tell me what you accepted."""

    ballot: Ballot
    keys: tuple[SessionKey, ...]


@dataclass(frozen=True, slots=True)
class Proposal:
    """One key's new value in an Accept."""

    key: SessionKey
    value: Entry | None


@dataclass(frozen=True, slots=True)
class Accept:
    """Phase 2: accept these values at ``ballot``; ``incarnation`` is the acceptor
    incarnation whose promise the proposer counted (any other one refuses)."""

    ballot: Ballot
    incarnation: int
    proposals: tuple[Proposal, ...]


@dataclass(frozen=True, slots=True)
class Promise:
    """A key promised: ``value`` was accepted at ``accepted`` (``ZERO``/``None``: never)."""

    key: SessionKey
    accepted: Ballot
    value: Entry | None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A key not promised or not accepted. ``promised`` above the request's ballot means
    a higher ballot got there first (retry above it); otherwise the acceptor does not
    vote at all (catching up after a wipe, or the Accept named another incarnation)."""

    key: SessionKey
    promised: Ballot


@dataclass(frozen=True, slots=True)
class PrepareReply:
    """One acceptor's answer to one Prepare, key by key."""

    ballot: Ballot
    node: str
    incarnation: int
    promises: tuple[Promise, ...]
    refusals: tuple[Refusal, ...]


@dataclass(frozen=True, slots=True)
class AcceptReply:
    """One acceptor's answer to one Accept, key by key."""

    ballot: Ballot
    node: str
    incarnation: int
    accepted: tuple[SessionKey, ...]
    refusals: tuple[Refusal, ...]


Request = Prepare | Accept
Reply = PrepareReply | AcceptReply


@dataclass(frozen=True, slots=True)
class Send:
    """A request for the shell to deliver to the acceptor of member ``to``."""

    to: str
    message: Request
