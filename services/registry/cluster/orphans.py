"""Persistent sessions whose owner is down: a holder of each replicated queue takes it.

Why: with ``msgstore.replication_factor`` > 1 a queue outlives its node, but publishes
for an offline session still route to the owner. While the owner is down and no client
resumes the session, nothing would ever move it, and the publishes would fail (DESIGN §4:
"a publish arrives for a queue whose primary is down" is a failover too).

Theory of operation. While a member is down, this node asks its msgstore every
``RETRY`` seconds for the copies it holds whose primary is that member
(``MsgStore.Orphans``). For each, the first holder in the queue's replica set, primary
excluded, that this node sees up takes the session over
(:meth:`~services.registry.cluster.claims.Claims.fail_over_offline`): a ``FailOver``
change on the id's register, which applies only while the register still names the
dead member (a client that resumed the session elsewhere, or another holder, got there
first), then the msgstore's failover, and the session is adopted here offline with its
subscriptions re-owned by this node's listeners. Two nodes that disagree about who is
up both try; the register lets one win. A key settled (taken, or found moved) is not
tried again until its member comes back.
"""

from __future__ import annotations

import asyncio
import contextlib

from services.common import log
from services.common.cluster_view import ClusterView
from services.common.session_key import SessionKey
from services.pb import msgstore_pb2
from services.registry.backends import BackendError
from services.registry.cluster.claims import Claims
from services.registry.registrar import ClaimRefused

RETRY = 1.0  # s between two looks while a member is down


class Orphans:
    def __init__(self, claims: Claims) -> None:
        self.claims = claims
        self.settled: set[tuple[str, SessionKey]] = set()

    async def run(self) -> None:
        r = self.claims.registrar
        if r.settings.replication_factor < 2:
            return
        while True:
            await asyncio.sleep(RETRY)
            view = r.cluster()
            down = view.members - view.up
            self.settled = {(d, k) for d, k in self.settled if d in down}
            if not down or not view.serving:
                continue
            for dead in sorted(down):
                with contextlib.suppress(BackendError):  # logged (rpc.failed); tried again
                    await self._adopt_from(dead, view)

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
