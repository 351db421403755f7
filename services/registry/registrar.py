"""Running the session table: per-id serialisation, takeover waits, store and gossip calls.

The pure :mod:`services.registry.sessions` decides; this module executes its steps with
I/O. Registrations of one client id run one at a time under a per-id lock
(FIFO, so the last CONNECT wins). A Disconnected never takes that lock to update the
table: a Register holding it may be waiting for exactly that Disconnected (the answer to
its takeover). Cleanup I/O after a Disconnected or an expiry does take the lock and
re-checks the epoch, so it can never delete what a newer registration just created.

Every change to a durable session reaches the disk (through the group commit of
:class:`services.registry.committer.Committer`) before the RPC that caused it answers,
but the end of a connection, which is written with the next transaction (within
``committer.BEHIND``): nobody waits for it, and a CONNECT right after it then waits for
one transaction, not for that end's first. A crash that loses it loses the time of the
end and a v5 DISCONNECT's new session expiry; the session itself is found offline
anyway (the restart marks every session that was online offline). An epoch is reserved
on disk before it leaves the process. A clean session that
replaces nothing costs no I/O at all (no queue, no directory record, no group commit):
see :meth:`services.registry.sessions.Plan.steps`. Start-up is :mod:`recovery`'s.

A registration runs its takeover first (the old connection's writes are in before the
queue changes hands), then installs the session in the table and makes its writes at
once rather than one after another: the queue's Open (or Delete), the session record,
and the directory record, which is waited for only when it drops subscriptions (see
:mod:`services.registry.directory`). If the queue or a waited-for directory write fails,
the table gets its previous session back and the record is rewritten to match.

Resuming a session that no connection holds answers after the session record alone:
its queue's Open (:attr:`Plan.resumes_offline`) follows the answer, and any later queue
call for the id waits for it. Nothing needs it first: it deletes no entry, the new
connection's epoch is newer than the queue's so its reads, acks and marks pass the
fence, and no older connection is left to fence out. Until it lands the queue keeps
its offline length limit.

What a crash right after the CONNACK must not lose, and does not: the session record,
on disk before every answer (the CONNACK promised the session's persistence and
expiry), and every entry of the queue, which no Open of a resumed session deletes; a
queue that did not see the new epoch yet sees a newer one at the next registration.
A crash during the writes may leave the record written and the queue not opened: that
client got no CONNACK, and its next CONNECT opens the queue (a queue opened for a
record never written is swept at restart, see :mod:`recovery`). A directory record not
yet written is rewritten by the restart's recovery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol

from mypy_extensions import mypyc_attr

from services.common import log
from services.common.cluster_view import ClusterView
from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.pb import gossip_pb2, registry_pb2
from services.registry.backends import BackendError, Backends
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.directory import DirectoryWriter
from services.registry.engines.base import StoreError
from services.registry.epoch_marks import EpochMarks
from services.registry.leadership import View, decide, replica_set, replicas
from services.registry.locks import KeyedLocks
from services.registry.queue_calls import QueueCalls
from services.registry.records import directory_ops, moved_command, pb_key, subs_ops
from services.registry.sessions import (
    US,
    Connect,
    DeleteQueue,
    NotifyTakeover,
    OpenQueue,
    PublishSession,
    Session,
    SessionTable,
    Step,
    end_steps,
)
from services.registry.takeover import Takeovers
from services.registry.watchers import WatchHub


@mypyc_attr(allow_interpreted_subclasses=True)  # the cluster side's Unreachable is one
class ClaimRefused(Exception):
    """The cluster's directory did not give this node the client id; the message says why
    (the CONNECT gets 0x88)."""


class ClusterClaims(Protocol):
    """The registry's cluster side (``services.registry.cluster.claims.Claims``)."""

    def active(self) -> bool: ...

    async def claim(self, c: Connect) -> int: ...

    async def owns(self, session: Session) -> bool: ...

    async def subscriptions_ours(self, key: SessionKey, epoch: int | None) -> bool | None: ...

    def release(self, key: SessionKey, epoch: int) -> None: ...

    def settled(self, key: SessionKey, epoch: int, won: bool) -> None: ...


class ClusterListing(Protocol):
    """Every member's sessions (``services.registry.cluster.listing.Listing``)."""

    async def gather(
        self, request: registry_pb2.SessionsRequest, own: registry_pb2.SessionsReply
    ) -> registry_pb2.SessionsReply: ...


EPOCH_BLOCK = 1024  # epochs reserved on disk per write
ALL_SEQS = 2**63 - 1  # a delivered mark the store caps at the queue's last seq
EXPIRE_BATCH = 1000  # sessions expired per tick at most
CONCURRENT_ENDS = 64  # sessions ended at once (their writes share batches and commits)
RETRY_US = 5 * US  # a failed cleanup is tried again after this
FENCES_MAX = 100_000  # ids remembered as taken over elsewhere (oldest forgotten first)

RC_UNSPECIFIED = 0x80
RC_CLIENT_ID_INVALID = 0x85
RC_SERVER_UNAVAILABLE = 0x88


def wall_clock_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True, slots=True)
class RegisterResult:
    ok: bool
    epoch: int = 0
    session_present: bool = False
    persistent: bool = False
    reason: str = ""
    reason_code: int = 0


class Registrar:
    def __init__(
        self,
        settings: RegistrySettings,
        table: SessionTable,
        committer: Committer,
        backends: Backends,
        hub: WatchHub,
        metrics: MetricsRegistry,
        clock: Callable[[], int] = wall_clock_us,
    ) -> None:
        self.settings = settings
        self.table = table
        self.committer = committer
        self.backends = backends
        self.hub = hub
        self.clock = clock
        self.view = View.single(settings.node)
        alone = ClusterView.alone(settings.node)
        self.cluster: Callable[[], ClusterView] = lambda: alone  # server.py: the followed view
        self.reserved = 0  # every epoch at or below this is reserved on disk
        self.locks = KeyedLocks()
        self.claim_locks = KeyedLocks()  # a cluster claim of an id, one at a time
        # id -> the highest epoch another node took it over at (see ``fence``)
        self._fences = EpochMarks(FENCES_MAX)
        self.directory = DirectoryWriter(backends.put_meta)
        # id -> the replica set the cluster side settled on (``keeping``)
        self.replica_sets: dict[SessionKey, tuple[str, ...]] = {}
        if settings.replication_factor > 1:
            backends.replica_set = self.replica_set
        self.queues = QueueCalls(backends, self._refused_behind)
        self.takeovers = Takeovers(hub, settings.takeover_timeout, metrics)
        self.claims: ClusterClaims | None = None  # server.py, when the node may join a cluster
        self.listing: ClusterListing | None = None
        self._registrations = metrics.counter(
            "registry_registrations_total", "Register calls by result.", ["result"]
        )
        self._stale = metrics.counter(
            "registry_stale_disconnects_total", "Disconnected reports for a replaced epoch."
        )
        self._expired = metrics.counter("registry_sessions_expired_total", "Sessions expired.")
        self._claims_refused = metrics.counter(
            "registry_claims_refused_total",
            "CONNECTs refused because the cluster's session directory could not give this "
            "node the client id (no majority, or the session's queue is on a node that is down).",
        )
        metrics.gauge("registry_sessions", "Sessions in the table.", fn=lambda: len(table))
        metrics.gauge("registry_sessions_online", "Sessions online.", fn=lambda: table.online)

    def fence(self, key: SessionKey, epoch: int) -> None:
        """Another node took ``key`` over at ``epoch``: a registration here that claimed
        an older epoch and has not installed its session yet must not install it."""
        self._fences.raise_to(key, epoch)

    def _newest(self, key: SessionKey, epoch: int) -> bool:
        current = self.table.get(key)
        if current is not None and current.epoch >= epoch:
            return False
        fenced = self._fences.get(key)
        if fenced >= epoch:
            return False
        if fenced:
            self._fences.discard(key)
        return True

    def replica_set(self, key: SessionKey) -> tuple[str, ...]:
        """Where a queue this node owns is kept: here (its primary) and R - 1 other
        members (DESIGN §4); () when not replicated. The set the cluster side settled on
        for the id (``replica_sets``: it keeps the copies that survive a change), else
        the next members on the id's ring that are up now."""
        return self.replica_sets.get(key) or self.ring_set(key)

    def ring_set(self, key: SessionKey) -> tuple[str, ...]:
        r = self.settings.replication_factor
        if r < 2:
            return ()
        view = self.cluster()
        return tuple(replica_set(key, self.settings.node, view.members, view.up, r))

    def keeping(self, key: SessionKey, survivors: tuple[str, ...]) -> tuple[str, ...]:
        """A replica set for ``key`` that keeps the members of ``survivors`` that are up
        (they hold what was committed) and fills up to R from the ring; remembered as
        the id's set (``replica_set``)."""
        ring = self.ring_set(key)
        if not ring:
            return ()
        view = self.cluster()
        node = self.settings.node
        kept = [m for m in dict.fromkeys(survivors) if m in view.up and m != node]
        fill = [m for m in ring[1:] if m not in kept]
        chosen = (node, *kept, *fill)[: max(len(ring), len(kept) + 1)]
        self.replica_sets[key] = chosen
        return chosen

    def leads(self, key: SessionKey) -> bool:
        """Whether this node may register, take over or expire ``key`` now."""
        return decide(self.view, key, self.settings.allow_register_during_netsplit).act

    # -- registration -------------------------------------------------------------

    async def register(self, c: Connect, shield: bool = True) -> RegisterResult:
        """``shield``: once begun, a registration completes even if the caller is cancelled
        (a unary RPC whose client went away), so the table never stops half-way between a
        takeover and its commit. A caller that is never cancelled passes False and saves
        the extra task."""
        cluster = self.cluster()
        if not cluster.serving and not self.settings.allow_register_during_netsplit:
            self._registrations.labels("refused").inc()
            return RegisterResult(
                False, reason=cluster.refusal(), reason_code=RC_SERVER_UNAVAILABLE
            )
        decision = decide(self.view, c.key, self.settings.allow_register_during_netsplit)
        if not decision.act:
            self._registrations.labels("refused").inc()
            return RegisterResult(False, reason=decision.reason, reason_code=RC_SERVER_UNAVAILABLE)
        result = await (asyncio.shield(self._register(c)) if shield else self._register(c))
        self._registrations.labels("ok" if result.ok else "failed").inc()
        return result

    async def _register(self, c: Connect) -> RegisterResult:
        claimed = 0
        if self.claims is not None and self.claims.active():
            # Not under the id's lock: the old owner's handover (another node's request)
            # takes that lock here, and two nodes claiming one id would wait for each other.
            async with self.claim_locks.hold(c.key):
                try:
                    claimed = await self.claims.claim(c)
                except ClaimRefused as exc:
                    self._claims_refused.inc()
                    # The listener logs client.rejected "registry"; why, only this knows.
                    log.emit(
                        "session.claim_refused",
                        "warning",
                        client_id=c.key[1],
                        mountpoint=c.key[0],
                        reason=str(exc),
                    )
                    return RegisterResult(False, reason=str(exc), reason_code=RC_SERVER_UNAVAILABLE)
                except StoreError as exc:
                    return self._store_failed("register", exc)
        async with self.locks.hold(c.key):
            newest = not claimed or self._newest(c.key, claimed)
            if claimed and self.claims is not None:
                self.claims.settled(c.key, claimed, newest)
            if not newest:
                self._claims_refused.inc()
                return RegisterResult(
                    False,
                    reason="taken over on another node while registering",
                    reason_code=RC_SERVER_UNAVAILABLE,
                )
            plan = self.table.plan_register(
                c, self.clock(), claimed, only_node=len(self.cluster().members) <= 1
            )
            epoch = plan.session.epoch
            writes: list[Step] = []
            behind: OpenQueue | None = None  # the queue Open made after the answer
            confirmed = True
            try:
                await self._reserve(epoch)
                for step in plan.steps():
                    if isinstance(step, NotifyTakeover):
                        # first: the old connection flushes
                        confirmed = await self._takeover(step) and confirmed
                    elif isinstance(step, OpenQueue) and plan.resumes_offline:
                        behind = step
                    else:
                        writes.append(step)
            except StoreError as exc:
                return self._store_failed("register", exc)
            before = self.table.get(c.key)
            self.table.commit(plan)
            # The queue, the directory and the session record are independent writes: one
            # round of them, not one after another. A failed queue or directory write
            # undoes the registration (the record is written back as it was).
            store_error, backend_error = await self._write_all(c.key, writes)
            if backend_error is not None:
                self.table.restore(c.key, epoch, before)
                self.table.raise_epoch(backend_error.store_epoch)
                with suppress(StoreError):  # logged by the committer's next caller
                    await self.committer.sync(c.key)
                return RegisterResult(
                    False, reason=str(backend_error), reason_code=RC_SERVER_UNAVAILABLE
                )
            if store_error is not None:
                # Not durable, so not live: no later CONNECT may wait on this connection.
                self.table.disconnected(c.key, epoch, None, self.clock())
                return self._store_failed("register", store_error)
            if behind is not None:
                self.queues.open_behind(behind)
            if not confirmed and plan.session_present and plan.keeps_queue:
                await self.all_delivered(c.key, epoch)
            if plan.session_present and c.route and len(self.hub) > 1:
                # Several listener processes: the others may hold the session's
                # subscriptions as another process's (or their own, from an earlier
                # connection); they route its copies to the new one from now on, before
                # its queue is replayed there.
                self.hub.broadcast(moved_command(c.key, c.route))
            return RegisterResult(True, epoch, plan.session_present, plan.keeps_queue)

    async def all_delivered(self, key: SessionKey, epoch: int) -> None:
        """The old connection's end was not confirmed: it may have sent entries whose
        delivery marks never reached the queue. Every entry counts as sent, so the resume
        replays each with DUP [MQTT-3.3.1-1]; one that was never sent carries a DUP it
        did not need, which receivers must accept."""
        with suppress(BackendError):  # logged; the replay sets DUP by the marks it has
            await self.backends.carry_marks(key, epoch, [], ALL_SEQS, [])

    def _refused_behind(self, step: OpenQueue, exc: BackendError) -> None:
        """The store refused a resumed session's epoch after its answer (it holds a newer
        one, as after a registry that lost its disk): the connection's acks and marks
        would be refused, so it is closed, as a takeover closes one."""
        self.table.raise_epoch(exc.store_epoch)
        current = self.table.get(step.key)
        if current is not None and current.epoch == step.epoch and current.online:
            command = registry_pb2.Takeover(
                key=pb_key(step.key),
                old_epoch=step.epoch,
                new_epoch=exc.store_epoch,
                new_node=self.settings.node,
            )
            self.hub.send(current.listener_id, registry_pb2.RegistryCommand(takeover=command))

    async def _write_all(
        self, key: SessionKey, steps: list[Step]
    ) -> tuple[StoreError | None, BackendError | None]:
        """Run ``steps`` and write ``key``'s current state to disk, all at once; the first
        store error and the first backend error (any other error is raised). A directory
        record nobody waits for is handed to its writer in passing: a resume (its only
        step) or a clean session replacing nothing costs no task."""
        outcomes: list[BaseException | None] = []
        try:
            written = self.committer.sync_soon(key)
        except StoreError as exc:
            written = None
            outcomes.append(exc)
        waited: list[Step] = []
        for step in steps:
            if isinstance(step, PublishSession) and not step.drop_subs:
                self.directory.send(self.directory_ops(step))
            else:
                waited.append(step)
        if waited:
            outcomes.extend(
                await asyncio.gather(*(self._execute(s) for s in waited), return_exceptions=True)
            )
        if written is not None:
            try:
                await written
            except StoreError as exc:
                outcomes.append(exc)
        store_error: StoreError | None = None
        backend_error: BackendError | None = None
        for outcome in outcomes:
            if isinstance(outcome, StoreError):
                store_error = store_error or outcome
            elif isinstance(outcome, BackendError):
                backend_error = backend_error or outcome
            elif isinstance(outcome, BaseException):
                raise outcome
        return store_error, backend_error

    async def _reserve(self, epoch: int) -> None:
        if epoch > self.reserved:
            target = epoch + EPOCH_BLOCK
            await self.committer.sync(reserve=target)
            self.reserved = max(self.reserved, target)

    def _store_failed(self, op: str, exc: StoreError) -> RegisterResult:
        log.emit("store.error", "error", op=f"registry.{op}", reason=str(exc))
        return RegisterResult(False, reason=f"session table: {exc}", reason_code=RC_UNSPECIFIED)

    async def _execute(self, step: Step) -> None:
        if isinstance(step, NotifyTakeover):
            await self._takeover(step)
        elif isinstance(step, OpenQueue):
            await self.queues.open(step)
        elif isinstance(step, DeleteQueue):
            await self.queues.delete(step)
        else:
            await self._publish(step)

    async def _publish(self, step: PublishSession) -> None:
        """Through the directory writer, in order. A record that drops no subscriptions
        is not waited for (see :mod:`services.registry.directory`)."""
        if step.drop_subs:
            await self.directory.write(self.directory_ops(step))
        else:
            self.directory.send(self.directory_ops(step))

    def directory_ops(self, step: PublishSession) -> list[gossip_pb2.MetaOp]:
        if not step.directory:
            return subs_ops([step.key])
        owner = step.session.node if step.session is not None else self.settings.node
        nodes = replicas(step.key, owner, self.view.members, self.settings.replication_factor)
        return directory_ops(step.key, step.session, step.drop_subs, nodes)

    async def _takeover(self, step: NotifyTakeover) -> bool:
        """Whether the old connection's end is confirmed (``Takeovers.run``)."""
        old = self.table.get(step.key)
        if old is None or old.epoch != step.old_epoch or not (old.online or old.recovered):
            return True  # it went away while this registration waited for the lock
        return await self.takeovers.run(step, old)

    # -- disconnection and expiry -------------------------------------------------

    async def disconnected(
        self, key: SessionKey, epoch: int, session_expiry: int | None, drop_subs: bool = True
    ) -> bool:
        """Record that the connection of ``epoch`` ended; False when the report is stale.

        ``drop_subs`` False: the listener says the connection never subscribed, so a session
        ending with it has no subscriptions to delete.

        The session is offline at once, so a client that reconnects right after its
        DISCONNECT resumes it without waiting, and takes nothing over (no command to the
        old listener, no ``session.takeover``). Its queue needs no call: the listener
        marks the appends it makes from now on offline, and the store applies the offline
        limit the queue's Open set (``services.registry.queue_calls``).
        """
        session = self.table.disconnected(key, epoch, session_expiry, self.clock())
        if session is None:
            self._stale.inc()
            if drop_subs and self.table.get(key) is None:
                await self._drop_unknown_subs(key, epoch)
            return False
        taken_over = self.takeovers.ended(key, epoch)
        try:
            self.committer.write_behind(key)  # nobody waits for it: see the module's docstring
        except StoreError as exc:
            log.emit("store.error", "error", op="registry.disconnected", reason=str(exc))
        if taken_over:
            return True
        if session.persistent:
            await self._publish_offline(session)
        else:
            with suppress(BackendError):  # logged; the expiry timer tries again
                await self._end(session, "session ended", drop_subs)
        return True

    async def _drop_unknown_subs(self, key: SessionKey, epoch: int) -> None:
        """A connection of ``epoch`` that the table no longer holds ended: its clean session
        went with a registry restart (clean sessions are not on disk), and its
        subscriptions go, unless a new registration of the id got in first. In a cluster
        the session may instead have moved to another node (a handover, whose Disconnected
        for the connection here can come after the table gave the session away); its
        subscriptions are then the new owner's, and stay."""
        if not self.leads(key):
            return
        async with self.locks.hold(key):
            if self.table.get(key) is not None:
                return
            if not await self.subscriptions_ours(key, epoch, "unknown_connection"):
                return  # not ours, or nobody can tell now: kept
            with suppress(BackendError):  # logged; dropped at the next restart's reconcile
                await self.directory.write(subs_ops([key]))

    async def subscriptions_ours(
        self, key: SessionKey, epoch: int | None, reason: str
    ) -> bool | None:
        """Whether this node may delete ``key``'s subscriptions, which its table does not
        hold (call under the id's lock): not if it handed the session over at a newer
        epoch (``fence``), nor, in a cluster, unless the id's register says so
        (``ClusterClaims.subscriptions_ours``; None: it cannot be read now). ``epoch``:
        the ended connection's; None for the start-up sweep. Says which, as a debug event
        (``reason``)."""
        ours: bool | None = epoch is None or self._fences.get(key) <= epoch
        if ours and self.claims is not None:
            ours = await self.claims.subscriptions_ours(key, epoch)
        log.emit(
            "session.subscriptions_dropped" if ours else "session.subscriptions_kept",
            "debug",
            client_id=key[1],
            mountpoint=key[0],
            epoch=epoch or 0,
            reason=reason,
        )
        return ours

    async def _publish_offline(self, session: Session) -> None:
        async with self.locks.hold(session.key):
            current = self.table.get(session.key)
            if current is None or current.epoch != session.epoch or current.online:
                return
            # Not waited for: a failure is logged (rpc.failed), and the directory catches up
            # at the next change.
            await self._publish(PublishSession(current.key, current, drop_subs=False))

    async def _end(self, session: Session, reason: str, drop_subs: bool = True) -> bool:
        """Delete an offline session's queue, subscriptions and record, then forget it.

        False when the session was replaced or came back meanwhile. On a BackendError the
        session stays, due again after ``RETRY_US``.
        """
        async with self.locks.hold(session.key):
            current = self.table.get(session.key)
            if current is None or current.epoch != session.epoch or current.online:
                return False  # replaced or back online meanwhile
            try:
                steps = end_steps(current, reason, drop_subs)
                shared = any(isinstance(step, PublishSession) for step in steps)
                if shared and self.claims is not None and not await self.claims.owns(current):
                    # Another node owns the id now: its subscriptions and directory record
                    # are that node's; only the copy here goes.
                    steps = [step for step in steps if isinstance(step, DeleteQueue)]
                for step in steps:
                    await self._execute(step)
            except BackendError:
                self.table.retry_at(current, self.clock() + RETRY_US)
                raise
            self.table.forget(current.key, current.epoch)
            if self.claims is not None:
                self.claims.release(current.key, current.epoch)
            try:
                await self.committer.sync(current.key)
            except StoreError as exc:
                log.emit("store.error", "error", op="registry.forget", reason=str(exc))
            return True

    async def listener_lost(self, listener_id: str, grace: float) -> int:
        """A listener's Watch stream ended: unless it watches again within ``grace``
        seconds (a stream that broke and was reopened), its process is gone and so are its
        connections. End their sessions as its Disconnected reports would have: clean ones
        are deleted, persistent ones go offline and their expiry starts. Without this they
        stayed online until the registry restarted, and a later CONNECT of the same id
        waited for a takeover nobody could answer. Returns how many were ended."""
        await asyncio.sleep(grace)
        if self.hub.watching(listener_id):
            return 0
        lost = [s for s in self.table if s.online and s.listener_id == listener_id]
        ended = 0
        for s in lost:
            if await self.disconnected(s.key, s.epoch, None):
                ended += 1
        log.emit("listener.lost", "warning", listener_id=listener_id, sessions=ended)
        return ended

    async def expire_due(self) -> int:
        """Expire the sessions whose time has come; how many were deleted.

        Up to :data:`CONCURRENT_ENDS` sessions end at once: their deletes then share the
        msgstore's and gossip's batches and the registry's group commits, where one at a
        time cost a commit round each (3-7 expiries a second under churn, fewer than the
        sessions a churning fleet creates)."""
        now = self.clock()
        count = 0
        mine: list[Session] = []
        for s in self.table.due(now, EXPIRE_BATCH):
            if self.leads(s.key):
                mine.append(s)
            else:
                self.table.retry_at(s, now + RETRY_US)
        for lo in range(0, len(mine), CONCURRENT_ENDS):
            chunk = mine[lo : lo + CONCURRENT_ENDS]
            results = await asyncio.gather(
                *(self._end(s, "expired" if s.persistent else "session ended") for s in chunk),
                return_exceptions=True,
            )
            backend_down = False
            for s, result in zip(chunk, results, strict=True):
                if isinstance(result, BackendError):
                    backend_down = True  # _end set its retry
                    continue
                if isinstance(result, BaseException):
                    raise result
                if not result:
                    continue
                count += 1
                if s.persistent:
                    self._expired.inc()
                    log.emit(
                        "session.expired", client_id=s.key[1], mountpoint=s.key[0], reason="expired"
                    )
                    self.hub.broadcast(registry_pb2.RegistryCommand(expire=pb_key(s.key)))
            if backend_down:
                # The msgstore or gossip is down: the rest waits too, instead of each
                # chunk spending a full rpc_timeout now.
                for rest in mine[lo + CONCURRENT_ENDS :]:
                    self.table.retry_at(rest, now + RETRY_US)
                break
        return count

    async def run_expiry(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.expire_due()
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.expiry_check_interval)

    async def close(self) -> None:
        """Finish the queue Opens and directory writes already made."""
        await self.queues.close()
        await self.directory.close()

    def details(self) -> dict[str, object]:
        return {
            "sessions": len(self.table),
            "online": self.table.online,
            "epoch": self.table.epoch,
            "watchers": self.hub.listeners(),
        }
