"""A CONNECT in a cluster: claim the client id's register, then take the session over.

Theory of operation. Before the local registration plans anything, the node proposes
``Claim(self)`` on the id's register (:mod:`services.registry.quorum.register`) through
a majority of the members. The committed value says who owned the session before
(``previous``) and gives the new epoch, which the local registration then uses as its
own, so one number fences the session everywhere. Then, by ``previous``:

* never written, or owned here at the epoch the local table holds: the local table is
  the truth (the single-node path, unchanged);
* owned by another node that is up: that node hands the session over
  (:mod:`.handover`): its connection closes, and for a resumed persistent session its
  queue is copied here in order and the register records that the queue moved
  (:class:`~services.registry.quorum.register.Relocate`) before the old copy goes;
* owned by a node that is down: a clean start goes ahead (the old node learns of the
  newer epoch when it returns); a resume of a persistent session whose queue is only
  there is refused by the claim itself (0x88, DESIGN §4 for R = 1), every time, until
  that node returns;
* a local session that the register does not name is stale (another node owned the id
  since) and is never resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import grpc

from services.common import log
from services.common.background import Background
from services.common.session_key import SessionKey
from services.pb import msgstore_pb2, quorum_pb2
from services.registry.backends import BackendError
from services.registry.cluster import codec
from services.registry.cluster.handover import Giver, Taken, adopted, open_step
from services.registry.cluster.peers import Peers
from services.registry.cluster.quorum_client import QuorumClient
from services.registry.engines.base import StoreError
from services.registry.quorum.proposer import Committed
from services.registry.quorum.register import (
    ONLINE,
    Claim,
    Entry,
    FailOver,
    Read,
    Release,
    Relocate,
    holders,
    subscriptions_ours,
    subscriptions_void,
)
from services.registry.records import moved_command, subs_ops
from services.registry.registrar import ClaimRefused, Registrar
from services.registry.sessions import NEVER, Connect, OpenQueue, PublishSession, Session


def lost_attempt(previous: Entry, node: str, local_epoch: int | None) -> bool:
    """Whether ``previous``, the value a claim by ``node`` was applied to, is that claim's
    own earlier attempt: a round whose outcome this node did not learn (preempted, or
    timed out) and that took effect all the same, so the retry found it. Then the
    register names this node at an epoch its table never held, and the owner before it,
    which still serves the session, was never told. A live entry of this node at the
    epoch its table holds is the node's own session, not a lost attempt."""
    return previous.live and previous.owner == node and previous.epoch != local_epoch


def holders_after(path: str, replica_set: tuple[str, ...], node: str) -> tuple[str, ...]:
    """Where the id's queue is kept once a claim that took ``path`` brought the session
    here, for the register to record; () when the claim's own value says it already.

    With R > 1, the set this node's msgstore replicates to from now on. With R = 1, this
    node after ``handover_absent``: the resumed session's recorded holder had no record
    of it (a claim there took effect, then its CONNECT was refused), so the session
    starts afresh here, while the claim kept naming that holder. Left so, the next
    claim asked that holder again, found nothing, and ended this session: a resume
    after a persistent session got session_present 0 (the S4 race test met it). A
    ``handover`` records the move itself; every other path's claim named this node."""
    if replica_set:
        return replica_set
    return (node,) if path == "handover_absent" else ()


def queue_copies(previous: Entry, first: str = "") -> tuple[str, ...]:
    """The copies a failover of the id's queue reads: ``first`` (a live handover's old
    primary, preferred on a tie), the holders the register records, and its owner. The
    owner may hold the queue's newest lineage without being recorded as a holder: its
    claim moved the queue there, and the record of the move did not land (the claim was
    refused after its failover). Left out, it and a copy it feeds could still commit
    for it while the read quorum, counted over fewer copies, missed them."""
    return tuple(dict.fromkeys(n for n in (first, *holders(previous), previous.owner) if n))


def superseded_here(previous: Entry, local_epoch: int | None) -> bool:
    """Whether ``previous``, a lost attempt of this node, was applied to the entry of
    the session this node's table holds (at ``local_epoch``, an epoch only this node's
    own claim set), so that session is still the id's and the retry resumes it. Any
    other prior entry may be another node's newer session, and the local copy stale."""
    return local_epoch is not None and previous.prior == local_epoch


DOWN_POLL = 0.1  # s between looks at the view while a handover call is out


class Unreachable(ClaimRefused):
    """The other registry did not answer (or its address is not known yet)."""


class Claims:
    def __init__(
        self, registrar: Registrar, quorum: QuorumClient, peers: Peers, giver: Giver
    ) -> None:
        self.registrar = registrar
        self.quorum = quorum
        self.peers = peers
        self.giver = giver
        # A node that could not be told of a newer epoch: told when it is back up
        # (``services.registry.cluster.reconcile.Reconciler.owe``; start.py sets it).
        self.owe: Callable[[str, SessionKey, int], None] = lambda node, key, epoch: None
        self._releases = Background()
        # Claims that adopted the session from its queue's copies, until their
        # registration is decided (``settled``).
        self._adopted: dict[SessionKey, int] = {}

    def active(self) -> bool:
        """Claims are made while this node is one of several members and sees a majority;
        alone, or on the minority side with ``allow_register_during_netsplit``, the
        registration stays local (tentative, in the minority's case)."""
        view = self.registrar.cluster()
        return len(view.members) > 1 and view.serving

    async def claim(self, c: Connect) -> int:
        """Win ``c.key`` for this node and bring its session here; the new epoch. Runs
        under the key's lock."""
        r = self.registrar
        node = r.settings.node
        view = r.cluster()
        expiry = r.table.policy.expiry(c.proto_ver, c.session_expiry)
        change = Claim(
            node,
            r.replica_set(c.key) or (node,),
            ONLINE,
            persistent=expiry > 0,
            floor=r.table.epoch + 1,
            resume=not c.clean_start,
            down=frozenset(view.members - view.up),
        )
        outcome = await self.quorum.change(c.key, change)
        if not isinstance(outcome, Committed):
            raise ClaimRefused("the session directory did not reach a majority")
        value, previous = outcome.value, outcome.previous
        if value is None or value.owner != node or value == previous:
            owner = previous.owner if previous is not None else "?"
            raise ClaimRefused(f"the session's queue is on {owner}, which is down")
        r.table.raise_epoch(value.epoch - 1)
        self.giver.claimed(c.key, value.epoch)
        if previous is not None and previous.live and previous.persistent and not c.clean_start:
            r.keeping(c.key, holders(previous))  # the copies that hold its queue stay
        else:
            r.replica_sets.pop(c.key, None)
        try:
            path = await self._bring_here(c, previous, value)
            if log.enabled("debug"):
                self._log_claimed(c.key, value, previous, path)
            if subscriptions_void(previous, node, c.clean_start):
                await self._drop_old_subscriptions(c.key)
            await self._record_replicas(c.key, value, path)
        except BaseException:
            # Refused after the claim took effect: the register names this node, so
            # what it adopted stays, for the next claim here to find.
            self._adopted.pop(c.key, None)
            raise
        return value.epoch

    async def _drop_old_subscriptions(self, key: SessionKey) -> None:
        """The id's session lived on another node and does not come here with it (a
        clean start, or a clean session): its subscriptions are void. This node drops
        them, before its client is answered (so before it can subscribe again): the old
        node cannot, as from its side the register names this node, whose listener
        might be re-owning them (``register.subscriptions_ours``). A failure is logged
        and leaves them to route to a session that no longer has them."""
        with contextlib.suppress(BackendError):
            await self.registrar.directory.write(subs_ops([key]))

    @staticmethod
    def _log_claimed(key: SessionKey, value: Entry, previous: Entry | None, path: str) -> None:
        log.emit(
            "session.claimed",
            "debug",
            client_id=key[1],
            mountpoint=key[0],
            epoch=value.epoch,
            previous_owner=previous.owner if previous is not None else "",
            previous_epoch=previous.epoch if previous is not None else 0,
            previous_state=previous.state if previous is not None else "",
            holders=list(holders(previous)) if previous is not None else [],
            path=path,
        )

    async def _record_replicas(self, key: SessionKey, value: Entry, path: str) -> None:
        """The register names where the queue is kept, so that a failover knows which
        copies to read, and the next claim where to ask for the session."""
        r = self.registrar
        wanted = holders_after(path, r.replica_set(key), r.settings.node)
        if not wanted or value.replicas == wanted:
            return
        moved = await self.quorum.change(key, Relocate(value.epoch, wanted))
        if not isinstance(moved, Committed) or moved.value is None:
            raise ClaimRefused("the session directory did not record the queue's replicas")

    async def _bring_here(self, c: Connect, previous: Entry | None, value: Entry) -> str:
        """Make the local table hold what the id's register says, before the plan; how
        the session came here (the ``session.claimed`` event's ``path``)."""
        r = self.registrar
        node = r.settings.node
        local = r.table.get(c.key)
        if previous is None:
            return "new"  # never claimed: whatever this node holds is the session
        # The queue's primary (the first holder; the only one with R = 1): where the
        # session's queue is, which may not be the owner when a claim whose CONNECT was
        # refused took effect (the queue stays where it is until it is moved).
        primary = holders(previous)[0]
        source = primary if primary != node else None
        if not previous.live or (source is None and previous.owner == node):
            local_epoch = local.epoch if local is not None else None
            lost = lost_attempt(previous, node, local_epoch)
            stale = local is not None and (not previous.live or local.epoch != previous.epoch)
            if stale and not (lost and superseded_here(previous, local_epoch)):
                # Released, or superseded while this node was away. Not a lost attempt
                # made right over the session here: demoting that one lost a persistent
                # session whose CONNECT's first round timed out (S4 race test).
                r.table.demote(c.key)
            if lost:
                # The owner that attempt superseded is not known here: whoever it is,
                # it ends its session (a clean start, or a queue the resume keeps
                # where ``holders`` says, which is not here).
                await self._evict_others(c.key, value.epoch, {node}, self._kept(c, previous))
                if (
                    not c.clean_start
                    and previous.persistent
                    and self._replicated()
                    and not superseded_here(previous, local_epoch)
                    and await self._fail_over(c, previous, value, only_held=True)
                ):
                    return "lost_attempt_failover"
                return "lost_attempt"
            return "here" if previous.live else "released"
        source = source or previous.owner
        resume = not c.clean_start and previous.persistent
        await self._evict_others(c.key, value.epoch, {node, source}, self._kept(c, previous))
        if resume and self._replicated():
            # Asked first even when seen down: a view that lags (a node just back) must
            # not fence the copy of an owner that still serves the session.
            seen_down = source not in r.cluster().up
            try:
                taken = await self._handover(c.key, source, value.epoch, resume, seen_down)
            except Unreachable:
                if not self._copies_up(previous, source):
                    raise ClaimRefused(
                        f"the session's queue is on {source}, which is down"
                    ) from None
                await self._fail_over(c, previous, value)
                self.owe(source, c.key, value.epoch)  # its stale copy goes when it returns
                return "failover"
            if taken.present and taken.persistent:
                await self._take_replicated(c, source, previous, value, taken)
                return "handover_replicated"
            if not taken.present:
                # The register names a live persistent session whose primary holds no
                # record of it (a claim there took effect, then its CONNECT failed):
                # the copies hold its queue, so the session comes back from them.
                await self._fail_over(c, previous, value)
                return "failover_absent"
            path = "handover_absent"
        elif source not in r.cluster().up:
            if resume:
                raise ClaimRefused(f"the session's queue is on {source}, which is down")
            self.owe(source, c.key, value.epoch)  # nothing to keep; told when it returns
            path = "owed"
        elif resume:
            taken = await self._handover(c.key, source, value.epoch, resume)
            if taken.present and taken.persistent:
                await self._move_queue(c.key, source, value, taken, c.route or node)
                return "handover"  # adopted: the local copy is replaced
            if primary == node:
                # The register still names this node as the queue's holder, and the
                # owner it names never took the session: that claim failed (its
                # CONNECT refused), before its TAKE or after it. The session is here,
                # in the table or given but not released.
                if r.table.get(c.key) is not None:
                    return "kept"
                if await self.giver.reclaim(c.key) is not None:
                    return "reclaimed"
            path = "handover_absent"
        elif not await self.evict(source, c.key, value.epoch):
            self.owe(source, c.key, value.epoch)  # paused or cut off: told when it answers
            path = "owed"
        else:
            path = "evicted"
        if local is not None:
            r.table.demote(c.key)  # another node owned the id since this copy
        return path

    def _kept(self, c: Connect, previous: Entry) -> frozenset[str]:
        """The nodes whose queue copy a claim's evictions must leave in place: the
        holders of the replicated queue that ``c`` resumes."""
        resume = not c.clean_start and previous.live and previous.persistent
        return frozenset(holders(previous)) if resume and self._replicated() else frozenset()

    def _replicated(self) -> bool:
        """Whether the queue moves by failover from its copies (R > 1), however many
        holders the register names. One holder is what ``Adopt`` records (a session the
        register never knew), and it is still a primary that feeds replicas: copied by
        the R = 1 path instead (``_move_queue``), what reached it after the TAKE was
        appended late, behind what the session had already received; a failover fences
        it, so such copies are refused and sent again, in order."""
        return self.registrar.settings.replication_factor > 1

    def _copies_up(self, previous: Entry, source: str) -> bool:
        """Whether a copy of the queue other than ``source``'s (down) is up. This node
        counts: the register may name it the first holder while the owner is another
        node (that owner's handover took the session, and the record of where its queue
        went did not land before it died). Looking only past the first holder refused
        every resume here while the owner was down, and the retry found the refused
        claim's own entry, a lost attempt, which started the session afresh."""
        view = self.registrar.cluster()
        return any(h in view.up for h in holders(previous) if h != source)

    async def _fail_over(
        self, c: Connect, previous: Entry, value: Entry, only_held: bool = False
    ) -> bool:
        """The queue's primary is down and it has replicas: this node's msgstore becomes
        the primary from the most up-to-date copy (DESIGN §4), and the session is
        adopted here as the CONNECT describes it (its record died with the old owner;
        its subscriptions live on in gossip). Whether it was adopted.

        ``only_held``: only if some copy held the queue. A lost attempt's entry does not
        tell a session that existed from a new one (a claim keeps the holders it read
        only for a live persistent session), so the copies tell: none holding it, the
        session starts afresh."""
        r = self.registrar
        expiry = r.table.policy.expiry(c.proto_ver, c.session_expiry)
        state = await self._queue_from_copies(c.key, value.epoch, queue_copies(previous))
        if only_held and not state.held:
            return False
        taken = Taken(present=True, persistent=True, session_expiry=expiry, proto_ver=c.proto_ver)
        if r.table.get(c.key) is not None:
            r.table.demote(c.key)
        r.table.adopt(adopted(c.key, r.settings.node, value.epoch - 1, taken, r.clock()))
        self._adopted[c.key] = value.epoch
        return True

    async def _take_replicated(
        self, c: Connect, source: str, previous: Entry, value: Entry, taken: Taken
    ) -> None:
        """A live handover of a replicated queue: the old owner has ended its session
        (TAKE); rather than copying its queue, this node fails over from the copies, the
        old one among them, which fences it: anything it appends from now on cannot be
        committed (its publishers are refused and send again), and whatever was
        committed is on the copies read. Seqs stay as they were, so the old queue's
        delivered mark and QoS 2 state apply as they are. The old copy stays, a replica."""
        r = self.registrar
        node = r.settings.node
        copies = queue_copies(previous, source)
        # Uncertain only if the old connection's end was not confirmed: else its marks
        # are on the copies, and entries it never sent go without DUP.
        await self._queue_from_copies(c.key, value.epoch, copies, uncertain=taken.unconfirmed)
        try:
            await r.backends.carry_marks(
                c.key, value.epoch, taken.inbound_qos2, taken.delivered_upto,
                taken.outbound_pubrel,
            )  # fmt: skip
        except BackendError as exc:
            raise ClaimRefused(f"the queue's delivery state could not be stored: {exc}") from None
        route = c.route or node
        r.hub.broadcast(moved_command(c.key, route))
        release = quorum_pb2.HandoverRequest(
            key=codec.key_pb(c.key),
            epoch=value.epoch,
            node=node,
            phase=quorum_pb2.HANDOVER_RELEASE,
            route=route,
            keep_queue=True,
        )
        try:
            await self._call(source, release)
        except ClaimRefused as exc:
            log.emit("session.handover_incomplete", "warning", client_id=c.key[1], reason=str(exc))
        if r.table.get(c.key) is not None:
            r.table.demote(c.key)
        r.table.adopt(adopted(c.key, node, value.epoch - 1, taken, r.clock()))
        self._adopted[c.key] = value.epoch

    async def _queue_from_copies(
        self, key: SessionKey, epoch: int, copies: tuple[str, ...], uncertain: bool = True
    ) -> msgstore_pb2.QueueState:
        try:
            limits = self.registrar.table.policy.queue_limits
            return await self.registrar.backends.failover(key, epoch, copies, limits, uncertain)
        except BackendError as exc:
            raise ClaimRefused(f"the queue could not fail over: {exc.reason}") from None

    async def fail_over_offline(
        self, key: SessionKey, dead: str, copies: tuple[str, ...], proto_ver: int
    ) -> bool:
        """``dead``, the primary of ``key``'s replicated queue, is down and no client is
        resuming the session: take it over here, offline (``orphans``). False when the
        register no longer names ``dead`` (a client resumed it, or another holder took
        it first): nothing to do. Raises ClaimRefused when it cannot be done now."""
        r = self.registrar
        node = r.settings.node
        async with r.claim_locks.hold(key):
            wanted = r.keeping(key, copies) or (node,)
            change = FailOver(dead, node, wanted, r.table.epoch + 1)
            outcome = await self.quorum.change(key, change)
            if not isinstance(outcome, Committed):
                raise ClaimRefused("the session directory did not reach a majority")
            value, previous = outcome.value, outcome.previous
            local = r.table.get(key)
            if previous is not None and lost_attempt(
                previous, node, local.epoch if local is not None else None
            ):
                # An earlier attempt took effect unseen: the retry left it as it was.
                # The copies to read are the ones this failover was asked for.
                value, source = previous, copies
            elif value is None or value.owner != node or value == previous:
                return False
            else:
                assert previous is not None
                source = queue_copies(previous)
            r.table.raise_epoch(value.epoch)
            try:
                await r.backends.failover(key, value.epoch, source, r.table.policy.queue_limits)
            except BackendError as exc:
                raise ClaimRefused(f"the queue could not fail over: {exc.reason}") from None
            async with r.locks.hold(key):
                expiry = r.table.policy.expiry(proto_ver, NEVER)
                taken = Taken(present=True, persistent=True, session_expiry=expiry)
                r.table.adopt(adopted(key, node, value.epoch, taken, r.clock()))
                await r.committer.sync(key)
                await r.directory.write(
                    r.directory_ops(PublishSession(key, r.table.get(key), False))
                )
            # This node's listeners re-own its subscriptions in gossip: publishes route here.
            r.hub.broadcast(moved_command(key, node))
            self.owe(dead, key, value.epoch)  # its stale copy goes when it returns
            return True

    async def heal(self, key: SessionKey, recorded: tuple[str, ...]) -> bool:
        """The queue of ``key``, owned here, is kept on ``recorded`` (this node first),
        some of which are down or too few: record a set of R members that are up, at
        the same epoch, and let the msgstore feed the new ones (an install). The
        survivors stay in it: whatever was committed is on a write quorum of the old
        set, so on the survivors or this node, and a failover reads the new set. False
        when there is nothing to do (the session moved or ended, or no member can take
        a copy)."""
        r = self.registrar
        node = r.settings.node
        wanted = r.keeping(key, recorded)
        up = r.cluster().up
        if wanted == recorded or not any(m in up for m in wanted[1:]):
            return False  # nothing to do, or no member up to take a copy
        async with r.claim_locks.hold(key), r.locks.hold(key):
            s = r.table.get(key)
            if s is None or s.node != node or not s.queued:
                return False
            moved = await self.quorum.change(key, Relocate(s.epoch, wanted))
            if not isinstance(moved, Committed) or moved.value is None:
                raise ClaimRefused("the session directory did not reach a majority")
            if moved.value.epoch != s.epoch or moved.value.owner != node:
                return False  # taken over meanwhile
            await r.queues.open(OpenQueue(key, s.epoch, False, *r.table.policy.queue_limits))
            return True

    async def _evict_others(
        self, key: SessionKey, epoch: int, skip: set[str], keep: frozenset[str] = frozenset()
    ) -> None:
        """End the id's session on every other member that is up, not only on the owner
        ``previous`` names: a claim that failed (its node refused the CONNECT) may still
        have taken effect, and then the value read names that node while the session it
        superseded lives on the node before it. A node without the session answers at
        once; one this node cannot reach is asked through the others (an asymmetric
        cut), and one nobody reaches learns of the epoch later.

        ``keep``: the holders of a replicated queue this claim resumes. They end any
        session of theirs but keep their copy: the failover that follows reads it. A
        copy deleted first still counted towards that read's quorum, as a copy without
        entries, and what it held on the write quorum was lost (a fault run: a replica
        evicted by the claim whose failover then read it and the new primary)."""
        view = self.registrar.cluster()
        for down in sorted(view.members - view.up - skip):
            self.owe(down, key, epoch)
        others = sorted((view.up & view.members) - skip)
        if not others:
            return
        results = await asyncio.gather(
            *(
                self._handover(key, other, epoch, False, keep_queue=other in keep)
                for other in others
            ),
            return_exceptions=True,
        )
        for other, result in zip(others, results, strict=True):
            if isinstance(result, Unreachable):
                if not await self._evict_through_others(other, key, epoch):
                    self.owe(other, key, epoch)
            elif isinstance(result, ClaimRefused):
                log.emit(
                    "session.handover_incomplete", "warning", client_id=key[1], reason=str(result)
                )
            elif isinstance(result, BaseException):
                raise result

    async def evict(self, node: str, key: SessionKey, epoch: int) -> bool:
        """Tell ``node`` that ``key`` is owned at ``epoch`` elsewhere (it ends its copy),
        through another member when this node cannot reach it; False when neither could."""
        try:
            await self._handover(key, node, epoch, False)
        except Unreachable:
            return await self._evict_through_others(node, key, epoch)
        except ClaimRefused:
            return True  # it holds a newer epoch: nothing to end there
        return True

    async def _evict_through_others(self, node: str, key: SessionKey, epoch: int) -> bool:
        """An asymmetric cut (S25): ``node`` still sees a majority through a member this
        node reaches, and serves the old connection for as long as the cut lasts unless
        that member passes the eviction on. Members are asked one at a time; the first
        that reaches ``node`` ends it there."""
        settings = self.registrar.settings
        view = self.registrar.cluster()
        req = quorum_pb2.HandoverRequest(
            key=codec.key_pb(key),
            epoch=epoch,
            node=settings.node,
            phase=quorum_pb2.HANDOVER_TAKE,
            discard=True,
            relay_to=node,
        )
        for via in sorted((view.up & view.members) - {settings.node, node}):
            try:
                await self._call(via, req, timeout=2 * settings.quorum_timeout)
                reason = ""
            except Unreachable:
                continue
            except ClaimRefused as exc:  # it holds a newer epoch: nothing to end there
                reason = str(exc)
            log.emit(
                "session.evicted_via",
                "info",
                client_id=key[1],
                mountpoint=key[0],
                epoch=epoch,
                node=node,
                via=via,
                reason=reason,
            )
            return True  # ended there, or it holds a newer epoch
        return False

    async def relay(self, req: quorum_pb2.HandoverRequest) -> quorum_pb2.HandoverReply:
        """Pass another member's eviction on to ``req.relay_to`` (one hop: the copy sent
        on names no relay). Raises Unreachable when that node does not answer, so the
        asker tries another member or keeps the eviction owed."""
        target = req.relay_to
        if not (req.discard and req.phase == quorum_pb2.HANDOVER_TAKE):
            raise Unreachable(f"only an eviction is relayed, not a {req.phase} handover")
        if target == self.registrar.settings.node:
            raise Unreachable("relayed to the relaying node itself")
        passed = quorum_pb2.HandoverRequest()
        passed.CopyFrom(req)
        passed.relay_to = ""
        try:
            return await self._call(target, passed, brief=True)
        except Unreachable:
            raise
        except ClaimRefused as exc:  # it holds a newer epoch: the asker is answered so
            return quorum_pb2.HandoverReply(error=str(exc))

    async def merge(
        self, owner: str, key: SessionKey, entries: list[msgstore_pb2.QueueEntry]
    ) -> str:
        """Append a lost copy's ``entries`` to ``owner``'s queue of ``key``; why not
        ("" when they are durable there)."""
        stub = self.peers.stub(owner)
        if stub is None:
            return f"no address known for the registry of {owner}"
        req = quorum_pb2.MergeRequest(
            key=codec.key_pb(key), entries=entries, node=self.registrar.settings.node
        )
        try:
            reply: quorum_pb2.MergeReply = await stub.Merge(
                req, timeout=self.registrar.settings.rpc_timeout, metadata=self.peers.metadata()
            )
        except grpc.aio.AioRpcError as exc:
            return f"merge into {owner} failed: {exc.code().name} {exc.details() or ''}"
        return reply.error

    async def _handover(
        self,
        key: SessionKey,
        source: str,
        epoch: int,
        resume: bool,
        brief: bool = False,
        keep_queue: bool = False,
    ) -> Taken:
        req = quorum_pb2.HandoverRequest(
            key=codec.key_pb(key),
            epoch=epoch,
            node=self.registrar.settings.node,
            phase=quorum_pb2.HANDOVER_TAKE,
            discard=not resume and not keep_queue,
            keep_queue=keep_queue,
        )
        reply = await self._call(source, req, brief)
        return Taken(
            present=reply.present,
            persistent=reply.persistent,
            session_expiry=reply.session_expiry,
            proto_ver=reply.proto_ver or 4,
            entries=list(reply.entries),
            inbound_qos2=list(reply.inbound_qos2),
            last_seq=reply.last_seq,
            delivered_upto=reply.delivered_upto,
            outbound_pubrel=list(reply.outbound_pubrel),
            unconfirmed=reply.unconfirmed,
        )

    async def _move_queue(
        self, key: SessionKey, source: str, value: Entry, taken: Taken, route: str
    ) -> None:
        """Copy, record the move, then let the old node delete its copy (and hand over
        what reached it meanwhile). ``route``: the listener process the session registers
        on, where both nodes' listeners send its copies. A newer claim's TAKE waits until
        the session is in the table (``Giver.moving``)."""
        with self.giver.moving(key, value.epoch):
            await self._move_queue_here(key, source, value, taken, route)

    async def _move_queue_here(
        self, key: SessionKey, source: str, value: Entry, taken: Taken, route: str
    ) -> None:
        r = self.registrar
        node = r.settings.node
        try:
            await r.queues.open(open_step(key, value.epoch))
            await r.backends.append_entries(
                key,
                value.epoch,
                taken.entries,
                taken.inbound_qos2,
                taken.delivered_upto,
                taken.outbound_pubrel,
            )
        except BackendError as exc:
            raise ClaimRefused(f"the handed-over queue could not be stored: {exc}") from None
        # This node's listeners hold the session's copies here from now on (appended
        # after what was handed over), not as strangers' to drop.
        r.hub.broadcast(moved_command(key, route))
        moved = await self.quorum.change(key, Relocate(value.epoch, (node,)))
        if (
            not isinstance(moved, Committed)
            or moved.value is None
            or moved.value.epoch != value.epoch
        ):
            raise ClaimRefused("the session directory did not record the moved queue")
        release = quorum_pb2.HandoverRequest(
            key=codec.key_pb(key),
            epoch=value.epoch,
            node=node,
            phase=quorum_pb2.HANDOVER_RELEASE,
            after_seq=taken.last_seq,
            route=route,
        )
        try:
            tail = await self._call(source, release)
            if tail.entries:
                await r.backends.append_entries(key, value.epoch, list(tail.entries))
        except (ClaimRefused, BackendError) as exc:
            # The queue is here and recorded so; what reached the old copy after the
            # TAKE stays there (logged), the rest is not at risk.
            log.emit("session.handover_incomplete", "warning", client_id=key[1], reason=str(exc))
        r.table.adopt(adopted(key, node, value.epoch - 1, taken, r.clock()))

    async def _call(
        self,
        source: str,
        req: quorum_pb2.HandoverRequest,
        brief: bool = False,
        timeout: float | None = None,
    ) -> quorum_pb2.HandoverReply:
        """A resumed session's handover may wait for the old connection to flush (up to
        ``registry.takeover_timeout``) and then read its queue; an eviction only closes a
        connection, and a node that cannot do that within ``registry.quorum_timeout`` is
        told again later rather than holding the CONNECT up. ``timeout``: another bound
        (a relayed eviction, which waits on two hops)."""
        stub = self.peers.stub(source)
        if stub is None:
            raise Unreachable(f"no address known for the registry of {source}")
        settings = self.registrar.settings
        if timeout is None and (req.discard or brief):  # brief: seen down, asked anyway
            timeout = settings.quorum_timeout
        elif timeout is None:
            timeout = settings.takeover_timeout + settings.rpc_timeout
        rpc = stub.Handover(req, timeout=timeout, metadata=self.peers.metadata())
        call = asyncio.ensure_future(rpc)
        watched = source in self.registrar.cluster().up
        try:
            while True:
                done, _ = await asyncio.wait({call}, timeout=DOWN_POLL)
                if done:
                    break
                if watched and source not in self.registrar.cluster().up:
                    # Stopped (SIGSTOP) or cut off mid-call: the detector says so within
                    # about a second, the call's deadline only after takeover_timeout.
                    raise Unreachable(f"{source} went down during the handover")
            reply: quorum_pb2.HandoverReply = call.result()
        except grpc.aio.AioRpcError as exc:
            raise Unreachable(
                f"handover from {source} failed: {exc.code().name} {exc.details() or ''}"
            ) from None
        finally:
            if not call.done():
                rpc.cancel()
                call.cancel()
        if reply.error:
            raise ClaimRefused(f"handover from {source} refused: {reply.error}")
        return reply

    async def owns(self, session: Session) -> bool:
        """Whether the register still names this node at ``session``'s epoch (a linearizable
        read); True when nothing ever claimed the id. Raises BackendError without a
        majority (the caller retries later)."""
        if not self.active():
            return True
        outcome = await self.quorum.change(session.key, Read())
        if not isinstance(outcome, Committed):
            raise BackendError("registry", "Read", "UNAVAILABLE", "no majority")
        v = outcome.value
        node = self.registrar.settings.node
        return v is None or (v.owner == node and v.epoch == session.epoch)

    async def subscriptions_ours(self, key: SessionKey, epoch: int | None) -> bool | None:
        """Whether this node may delete ``key``'s subscriptions, which its table no longer
        holds (:func:`~services.registry.quorum.register.subscriptions_ours`, on a
        linearizable read); None when it cannot tell now (no majority, or the read did
        not commit). Alone, the table is the whole truth. The caller keeps what cannot
        be told: a route too many costs a forward that finds no session, one too few
        loses every message of a session that lives on."""
        view = self.registrar.cluster()
        if len(view.members) < 2:
            return True
        if not view.serving:
            return None
        outcome = await self.quorum.change(key, Read())
        if not isinstance(outcome, Committed):
            return None
        return subscriptions_ours(outcome.value, self.registrar.settings.node, epoch)

    def settled(self, key: SessionKey, epoch: int, won: bool) -> None:
        """The registration of this node's claim at ``epoch`` went ahead (``won``), or a
        newer claim elsewhere overtook it. Overtaken after it adopted the session from
        the queue's copies (a failover, or a replicated handover), the adopted session
        is not this node's: the newer claim read the copies, this one among them, and
        serves the session. Left in the table, it was listed here beside the owner's,
        and resumed by the next claim here as if it were current (S7)."""
        if self._adopted.pop(key, None) != epoch or won:
            return
        r = self.registrar
        s = r.table.get(key)
        if s is None or s.epoch != epoch - 1 or s.node != r.settings.node or s.online:
            return
        r.table.forget(key, s.epoch)
        try:
            r.committer.write_behind(key)
        except StoreError as exc:
            log.emit("store.error", "error", op="registry.forget", reason=str(exc))

    def release(self, key: SessionKey, epoch: int) -> None:
        """The session of ``epoch`` ended here: tombstone its register (nobody waits; a
        release that fails leaves an entry the next claim supersedes anyway)."""
        if not self.active():
            return
        self._releases.spawn(self._release(key, epoch), "registry-release")

    async def _release(self, key: SessionKey, epoch: int) -> None:
        outcome = await self.quorum.change(key, Release(epoch))
        if not isinstance(outcome, Committed):
            log.emit("session.release_failed", "debug", client_id=key[1], epoch=epoch)

    async def close(self) -> None:
        await self._releases.close()
