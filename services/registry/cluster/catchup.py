"""A member whose acceptor has no votes on disk catches up before it votes.

Why: an acceptor that lost its disk has forgotten promises and acceptances it made, and
voting with the blank state can lose a committed change (``quorum.acceptor`` shows how).
A new node looks the same on disk, so it catches up too; for it there is little to learn.

The procedure is the acceptor's (:mod:`services.registry.quorum.acceptor`), run here:

1. Ask the other members for the client ids they hold votes for (``Quorum.Keys``).
   Any value chosen before this node's disk was lost is on a majority, so on at least
   ``majority - 1`` others; the answers of ``members - majority + 1`` others are needed
   to be sure to meet one of them (both others in a cluster of three). A member that is
   catching up itself answers too: within the failures tolerated (F members down or
   without their disk, this node among them), it was not among those voters unless it
   is new, and a new node never voted.
2. For each id, a read round through the others (this acceptor refuses, so the round's
   majority is made of them); its committed value and ballot are stored here.
3. Vote from then on; the flag is cleared on disk.

A cluster of new nodes finishes at once: each hears from the others that they hold
nothing. Until it finishes, the node counts as down in every round; with F failures
tolerated, at most F members may be down or catching up at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from services.common import log
from services.common.cluster_view import ClusterView
from services.common.session_key import SessionKey
from services.pb import quorum_pb2
from services.registry.cluster import codec
from services.registry.cluster.acceptor_store import AcceptorShell
from services.registry.cluster.peers import Peers
from services.registry.cluster.quorum_client import QuorumClient
from services.registry.quorum.messages import Ballot
from services.registry.quorum.proposer import Committed
from services.registry.quorum.register import Entry, Read

PAGE = 5000  # keys per Keys call
CHUNK = 1000  # keys read per batch of rounds
RETRY = 1.0  # s before trying again when too few members answered


class TooFewAnswers(Exception):
    """Not enough members that vote answered to be sure nothing is missed."""


async def run(
    acceptor: AcceptorShell,
    quorum: QuorumClient,
    peers: Peers,
    view: Callable[[], ClusterView],
    timeout: float,
) -> None:
    """Catch up once the node is one of several members; retried until it succeeds."""
    while acceptor.store.acceptor.catching_up:
        v = view()
        if len(v.members) > 1 and v.joined:
            try:
                learned = await _catch_up(acceptor, quorum, peers, v, timeout)
            except TooFewAnswers as exc:
                log.emit("registry.catch_up", "info", state="waiting", keys=0, reason=str(exc))
            else:
                await acceptor.finish()
                log.emit("registry.catch_up", "info", state="done", keys=learned, reason="")
                return
        await asyncio.sleep(RETRY)


async def _catch_up(
    acceptor: AcceptorShell,
    quorum: QuorumClient,
    peers: Peers,
    view: ClusterView,
    timeout: float,
) -> int:
    others = sorted(view.members - {peers.node})
    answers = await asyncio.gather(*(_keys(peers, node, timeout) for node in others))
    answered = [held for held in answers if held is not None]
    majority = len(view.members) // 2 + 1
    needed = len(view.members) - majority + 1
    if len(answered) < needed:
        raise TooFewAnswers(f"{len(answered)} of the {needed} members needed answered")
    keys = sorted({k for held in answered for k in held})
    for lo in range(0, len(keys), CHUNK):
        chunk = keys[lo : lo + CHUNK]
        outcomes = await asyncio.gather(*(quorum.change(k, Read()) for k in chunk))
        seeds: list[tuple[SessionKey, Ballot, Entry | None]] = []
        for k, outcome in zip(chunk, outcomes, strict=True):
            if not isinstance(outcome, Committed):
                raise TooFewAnswers(f"no majority read {k[1]!r}")
            seeds.append((k, outcome.ballot, outcome.value))
        await acceptor.seed(seeds)
    return len(keys)


async def _keys(peers: Peers, node: str, timeout: float) -> set[SessionKey] | None:
    """``node``'s keys; None if it did not answer."""
    stub = peers.stub(node)
    if stub is None:
        return None
    held: set[SessionKey] = set()
    after = 0
    try:
        while True:
            reply: quorum_pb2.KeysReply = await stub.Keys(
                quorum_pb2.KeysRequest(after=after, limit=PAGE),
                timeout=timeout,
                metadata=peers.metadata(),
            )
            held.update(codec.key_of(k) for k in reply.keys)
            if not reply.next:
                return held
            after = reply.next
    except grpc.aio.AioRpcError:
        return None
