"""What a node that was away learns when it is back: which of its sessions are no longer
its own.

Two ways back, two mechanisms:

* **The node itself was cut off** (it restarted, or it was on the minority side of a
  partition, where ``allow_register_during_netsplit`` may have let it register sessions
  tentatively). When it sees a majority again, it checks every session it holds against
  the register in batched rounds: a session the register does not know is entered
  (:class:`~services.registry.quorum.register.Adopt`, which never takes one from another
  node); one the register gives to another node, or to a newer epoch, is ended here
  (the connection gets 0x8E, the local queue goes), as if that owner had asked.
* **Others could not reach it** (it was paused, or its link was down, while a client
  took its session elsewhere). The node that won the session owes it that news: the
  debt is kept per node and paid when the view shows the node up again.

Neither touches what the owner holds: subscriptions and directory records in gossip are
the owner's, and the ending node deletes only its own copy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from services.common import log
from services.common.background import Background
from services.common.cluster_view import ClusterView
from services.common.session_key import SessionKey
from services.pb import msgstore_pb2, quorum_pb2
from services.registry.cluster import codec
from services.registry.cluster.handover import Giver
from services.registry.cluster.quorum_client import QuorumClient
from services.registry.quorum.proposer import Committed
from services.registry.quorum.register import Adopt, Entry, holders
from services.registry.registrar import Registrar
from services.registry.sessions import Session

CHUNK = 1000  # sessions checked per batch of rounds
PAY_INTERVAL = 1.0  # s between attempts to pay what up nodes are owed
DOWN_EVERY = 5  # and every this many intervals, what nodes seen down are owed
OWED_MAX = 100_000  # evictions remembered per node (the oldest are dropped past it)

Evict = Callable[[str, SessionKey, int], Awaitable[bool]]
Merge = Callable[[str, SessionKey, list[msgstore_pb2.QueueEntry]], Awaitable[str]]


class Reconciler:
    def __init__(
        self,
        registrar: Registrar,
        quorum: QuorumClient,
        giver: Giver,
        evict: Evict,
        merge: Merge,
    ) -> None:
        self.registrar = registrar
        self.quorum = quorum
        self.giver = giver
        self.evict = evict
        self.merge = merge
        self.owed: dict[str, dict[SessionKey, int]] = {}
        self._active = False
        self._tasks = Background()
        self.checked = 0  # sessions checked by reconcile runs (details, tests)
        self.superseded = 0

    def owe(self, node: str, key: SessionKey, epoch: int) -> None:
        debts = self.owed.setdefault(node, {})
        debts[key] = max(epoch, debts.get(key, 0))
        while len(debts) > OWED_MAX:
            del debts[next(iter(debts))]

    async def run(self, view: Callable[[], ClusterView]) -> None:
        """Pay what is owed to nodes that are up but did not answer in time (a slow or
        briefly paused node whose view never showed it down), and now and then to nodes
        seen down: one this node cannot reach may still serve the old connection,
        reached by a member that passes the eviction on (``Claims.evict``)."""
        ticks = 0
        while True:
            await asyncio.sleep(PAY_INTERVAL)
            ticks += 1
            current = view()
            down_too = ticks % DOWN_EVERY == 0
            for node in list(self.owed):
                if node in current.up or (down_too and node in current.members):
                    await self._pay(node, self.owed.pop(node))

    def on_view(self, view: ClusterView) -> None:
        active = len(view.members) > 1 and view.serving
        if active and not self._active:
            self._tasks.spawn(self.reconcile(), "registry-reconcile")
        self._active = active
        for node in [n for n in self.owed if n in view.up]:
            self._tasks.spawn(self._pay(node, self.owed.pop(node)), "registry-pay")

    async def _pay(self, node: str, debts: dict[SessionKey, int]) -> None:
        """Stops at the first debt that cannot be paid: the rest wait with it (a node
        that is gone would otherwise cost one timeout per session it held)."""
        items = list(debts.items())
        for i, (key, epoch) in enumerate(items):
            if not await self.evict(node, key, epoch):
                for later, later_epoch in items[i:]:
                    self.owe(node, later, later_epoch)  # paid at its next return
                return

    async def reconcile(self) -> None:
        """Check every session held here; those no round could settle (no majority yet,
        as while this node's acceptor catches up) are checked again until all are."""
        r = self.registrar
        sessions = list(r.table)
        while sessions:
            unsettled: list[Session] = []
            for lo in range(0, len(sessions), CHUNK):
                chunk = sessions[lo : lo + CHUNK]
                outcomes = await asyncio.gather(
                    *(
                        self.quorum.change(s.key, Adopt(r.settings.node, s.epoch, s.persistent))
                        for s in chunk
                    )
                )
                for s, outcome in zip(chunk, outcomes, strict=True):
                    if not isinstance(outcome, Committed):
                        unsettled.append(s)
                        continue
                    self.checked += 1
                    if not self._mine(outcome.value, s):
                        await self._end_here(s, outcome.value)
            if unsettled:
                await asyncio.sleep(PAY_INTERVAL)
            sessions = [s for s in unsettled if r.table.get(s.key) == s]

    def _mine(self, v: Entry | None, s: Session) -> bool:
        return (
            v is not None
            and v.live
            and v.owner == self.registrar.settings.node
            and v.epoch == s.epoch
        )

    async def _end_here(self, s: Session, v: Entry | None) -> None:
        if v is not None and v.live and v.owner == self.registrar.settings.node:
            # This node's own newer claim: a registration under way here, which takes the
            # old session over itself (or a lost attempt the next one finds). Handing the
            # session "over" to this very node ended it under that registration, which
            # then failed, and the retry found no session: found by the 1,000-fault run.
            return
        current = self.registrar.table.get(s.key)
        if current is None or current.epoch != s.epoch:
            return  # registered again meanwhile: that registration claimed for itself
        owner = v.owner if v is not None else ""
        epoch = max(v.epoch if v is not None else 0, s.epoch + 1)
        # Two persistent sessions of one id (this one tentative, from the minority side
        # of a partition): the owner's wins, and what this one's queue holds joins it.
        keep = v is not None and v.live and v.persistent and s.persistent and s.queued
        # A replicated queue (DESIGN §4) has nothing to merge: whatever was committed in
        # this copy is on the copies its new primary read. Where this node still holds
        # one of its replicas, the copy stays; elsewhere it goes. Decided by the
        # configuration, not by how many holders the entry names: a merge appends the
        # copy's entries after the owner's newer ones, which an online session sees
        # only at its next resume, out of order.
        replica = False
        if self.registrar.settings.replication_factor > 1:
            keep = False
            replica = v is not None and v.live and self.registrar.settings.node in holders(v)
        req = quorum_pb2.HandoverRequest(
            key=codec.key_pb(s.key),
            epoch=epoch,
            node=owner,
            discard=not keep and not replica,
            keep_queue=replica,
        )
        reply = await self.giver.handle(req)
        if reply.error:
            log.emit(
                "session.handover_incomplete", "warning", client_id=s.key[1], reason=reply.error
            )
            return
        if reply.present:
            self.superseded += 1
        if keep and reply.present and reply.persistent:
            await self._merge_into(owner, s.key, epoch, reply)

    async def _merge_into(
        self, owner: str, key: SessionKey, epoch: int, taken: quorum_pb2.HandoverReply
    ) -> None:
        """Send the lost copy's entries to ``owner``, then delete the copy here (with
        what reached it meanwhile, sent after)."""
        entries = list(taken.entries)
        problem = await self.merge(owner, key, entries) if entries else ""
        release = quorum_pb2.HandoverRequest(
            key=codec.key_pb(key),
            epoch=epoch,
            node=owner,
            phase=quorum_pb2.HANDOVER_RELEASE,
            after_seq=taken.last_seq,
        )
        tail = await self.giver.handle(release)
        if not problem and tail.entries:
            problem = await self.merge(owner, key, list(tail.entries))
            entries += tail.entries
        if problem:
            log.emit(
                "session.handover_incomplete",
                "warning",
                client_id=key[1],
                reason=f"{len(entries)} queued messages of the lost session: {problem}",
            )

    async def close(self) -> None:
        await self._tasks.close()
