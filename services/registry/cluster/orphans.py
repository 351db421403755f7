"""Replicated queues that lost a node: a holder takes over what lost its primary, and a
primary replaces a replica that went down.

Why: with ``msgstore.replication_factor`` > 1 a queue outlives its node, but publishes
for an offline session still route to the owner. While the owner is down and no client
resumes the session, nothing would ever move it, and the publishes would fail (DESIGN §4:
"a publish arrives for a queue whose primary is down" is a failover too).

Theory of operation. While a member is down (seen so for ``GRACE`` seconds here, and
not answering a quick call: a node that has just started sees the others down until
it hears from them), this node asks its msgstore every ``RETRY`` seconds for the
copies it holds whose primary is that member
(``MsgStore.Orphans``). For each, the first holder in the queue's replica set, primary
excluded, that this node sees up takes the session over
(:meth:`~services.registry.cluster.claims.Claims.fail_over_offline`): a ``FailOver``
change on the id's register, which applies only while the register still names the
dead member (a client that resumed the session elsewhere, or another holder, got there
first), then the msgstore's failover, and the session is adopted here offline with its
subscriptions re-owned by this node's listeners. Two nodes that disagree about who is
up both try; the register lets one win. A key settled (taken, or found moved) is not
tried again until its member comes back.

The same look finds the queues this node is the primary of whose replica set names the
member that is down (:meth:`~services.registry.cluster.claims.Claims.heal`): the id's
register records a set of members that are up, at the same epoch (the survivors stay in
it, so whatever was committed is still on a write quorum of the copies a failover would
read), and the msgstore's primary feeds the new member from its base (``install``,
``queue.rereplicated``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc

from services.common import log
from services.common.cluster_view import ClusterView
from services.common.session_key import SessionKey
from services.pb import msgstore_pb2, quorum_pb2
from services.registry.backends import BackendError
from services.registry.cluster.claims import Claims
from services.registry.registrar import ClaimRefused

RETRY = 1.0  # s between two looks while a member is down
GRACE = 3.0  # s a member must have been seen down here before its sessions are taken


class Orphans:
    def __init__(self, claims: Claims) -> None:
        self.claims = claims
        self.settled: set[tuple[str, SessionKey]] = set()
        self.heal_again = True  # a first look after start-up
        self.down_since: dict[str, float] = {}  # member -> when first seen down here
        self.seen_up: frozenset[str] = frozenset()

    async def run(self) -> None:
        r = self.claims.registrar
        if r.settings.replication_factor < 2:
            return
        while True:
            await asyncio.sleep(RETRY)
            view = r.cluster()
            down = view.members - view.up
            self.settled = {(d, k) for d, k in self.settled if d in down}
            if not view.serving:
                continue
            now = time.monotonic()
            for m in down:
                self.down_since.setdefault(m, now)
            self.down_since = {m: t for m, t in self.down_since.items() if m in down}
            for dead in sorted(down):
                if now - self.down_since[dead] < GRACE or await self._answers(dead):
                    continue  # a view that lags (this node just started) is not a death
                with contextlib.suppress(BackendError):  # logged (rpc.failed); tried again
                    await self._adopt_from(dead, view)
            if down or view.up != self.seen_up or self.heal_again:
                self.seen_up, self.heal_again = view.up, False
                with contextlib.suppress(BackendError):
                    await self._heal(view)

    async def _answers(self, node: str) -> bool:
        """Whether ``node``'s registry answers after all (a quick call): a node seen
        down that answers is not taken from, since its sessions are still served there."""
        stub = self.claims.peers.stub(node)
        if stub is None:
            return False
        try:
            await stub.Keys(
                quorum_pb2.KeysRequest(limit=1),
                timeout=self.claims.registrar.settings.quorum_timeout,
                metadata=self.claims.peers.metadata(),
            )
        except grpc.aio.AioRpcError:
            return False
        return True

    async def _heal(self, view: ClusterView) -> None:
        """The queues replicated from here that lost a replica, or have fewer than R
        copies while more members are up, get a set of members that are up."""
        r = self.claims.registrar
        reply: msgstore_pb2.QueuesReply = await r.backends.orphans(r.settings.node)
        want = r.settings.replication_factor
        up = view.up & view.members
        for q in reply.queues:
            recorded = tuple(q.replicas)
            full = len(recorded) >= min(want, len(up))
            if full and all(m in up for m in recorded):
                continue
            key = (q.key.mountpoint, q.key.client_id)
            try:
                await self.claims.heal(key, recorded)
            except (ClaimRefused, BackendError) as exc:
                self.heal_again = True
                log.emit(
                    "session.handover_incomplete", "warning", client_id=key[1], reason=str(exc)
                )

    async def _adopt_from(self, dead: str, view: ClusterView) -> None:
        r = self.claims.registrar
        node = r.settings.node
        reply: msgstore_pb2.QueuesReply = await r.backends.orphans(dead)
        for q in reply.queues:
            key = (q.key.mountpoint, q.key.client_id)
            if (dead, key) in self.settled:
                continue
            live = [h for h in q.replicas[1:] if h in view.up]
            if not live or live[0] != node:
                continue
            try:
                # The msgstore logs queue.failover for a session taken (or refused).
                await self.claims.fail_over_offline(key, dead, tuple(q.replicas), 4)
            except ClaimRefused as exc:
                log.emit(
                    "session.handover_incomplete", "warning", client_id=key[1], reason=str(exc)
                )
                continue
            self.settled.add((dead, key))
