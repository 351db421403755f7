"""Running the session table: per-id serialisation, takeover waits, store and gossip calls.

The pure :mod:`services.registry.sessions` decides; this module executes its steps in
order with I/O. Registrations of one client id run one at a time under a per-id lock
(FIFO, so the last CONNECT wins). A Disconnected never takes that lock to update the
table: a Register holding it may be waiting for exactly that Disconnected (the answer to
its takeover). Cleanup I/O after a Disconnected or an expiry does take the lock and
re-checks the epoch, so it can never delete what a newer registration just created.

Every change to a durable session reaches the disk (through the group commit of
:class:`services.registry.committer.Committer`) before the RPC that caused it answers,
and an epoch is reserved on disk before it leaves the process. A clean session that
replaces nothing costs no I/O at all (no queue, no directory record, no group commit):
see :meth:`services.registry.sessions.Plan.steps`. Start-up is :mod:`recovery`'s.

A registration runs its takeover first (the old connection's writes are in before the
queue changes hands), then installs the session in the table and makes its writes at
once rather than one after another: the queue's Open (or Delete), the session record,
and the directory record, which is waited for only when it drops subscriptions (see
:mod:`services.registry.directory`). If the queue or a waited-for directory write fails,
the table gets its previous session back and the record is rewritten to match. What a
crash right after the CONNACK cannot lose: the session record (the CONNACK promised its
persistence and expiry) and the queue at the new epoch are on disk before the answer.
A crash during the writes may leave the record written and the queue not: the client
got no CONNACK, and its next CONNECT opens the queue at a newer epoch (a queue opened
for a record never written is swept at restart, see :mod:`recovery`). A directory
record not yet written is rewritten by the restart's recovery.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from services.common import log
from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.pb import gossip_pb2, registry_pb2
from services.registry.backends import BackendError, Backends
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.directory import DirectoryWriter
from services.registry.engines.base import StoreError
from services.registry.leadership import View, decide, replicas
from services.registry.locks import KeyedLocks
from services.registry.records import directory_ops, pb_key, subs_ops
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
from services.registry.watchers import WatchHub

EPOCH_BLOCK = 1024  # epochs reserved on disk per write
EXPIRE_BATCH = 1000  # sessions expired per tick at most
RETRY_US = 5 * US  # a failed cleanup is tried again after this

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
        self.reserved = 0  # every epoch at or below this is reserved on disk
        self.locks = KeyedLocks()
        self.directory = DirectoryWriter(backends.put_meta)
        self._waiters: dict[tuple[SessionKey, int], asyncio.Event] = {}
        self._registrations = metrics.counter(
            "registry_registrations_total", "Register calls by result.", ["result"]
        )
        self._takeovers = metrics.counter("registry_takeovers_total", "Sessions taken over.")
        self._takeover_timeouts = metrics.counter(
            "registry_takeover_timeouts_total",
            "Takeovers that went ahead without the old connection's Disconnected.",
        )
        self._stale = metrics.counter(
            "registry_stale_disconnects_total", "Disconnected reports for a replaced epoch."
        )
        self._expired = metrics.counter("registry_sessions_expired_total", "Sessions expired.")
        metrics.gauge("registry_sessions", "Sessions in the table.", fn=lambda: len(table))
        metrics.gauge("registry_sessions_online", "Sessions online.", fn=lambda: table.online)

    def leads(self, key: SessionKey) -> bool:
        """Whether this node may register, take over or expire ``key`` now."""
        return decide(self.view, key, self.settings.allow_register_during_netsplit).act

    # -- registration -------------------------------------------------------------

    async def register(self, c: Connect, shield: bool = True) -> RegisterResult:
        """``shield``: once begun, a registration completes even if the caller is cancelled
        (a unary RPC whose client went away), so the table never stops half-way between a
        takeover and its commit. A caller that is never cancelled passes False and saves
        the extra task."""
        decision = decide(self.view, c.key, self.settings.allow_register_during_netsplit)
        if not decision.act:
            self._registrations.labels("refused").inc()
            return RegisterResult(False, reason=decision.reason, reason_code=RC_SERVER_UNAVAILABLE)
        result = await (asyncio.shield(self._register(c)) if shield else self._register(c))
        self._registrations.labels("ok" if result.ok else "failed").inc()
        return result

    async def _register(self, c: Connect) -> RegisterResult:
        async with self.locks.hold(c.key):
            plan = self.table.plan_register(c, self.clock())
            epoch = plan.session.epoch
            writes: list[Step] = []
            try:
                await self._reserve(epoch)
                for step in plan.steps():
                    if isinstance(step, NotifyTakeover):
                        await self._takeover(step)  # first: the old connection flushes
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
            return RegisterResult(True, epoch, plan.session_present, plan.keeps_queue)

    async def _write_all(
        self, key: SessionKey, steps: list[Step]
    ) -> tuple[StoreError | None, BackendError | None]:
        """Run ``steps`` and write ``key``'s current state to disk, all at once; the first
        store error and the first backend error (any other error is raised)."""
        if not steps:  # a clean session replacing nothing: no task, no suspension
            try:
                await self.committer.sync(key)
            except StoreError as exc:
                return exc, None
            return None, None
        outcomes = await asyncio.gather(
            self.committer.sync(key), *(self._execute(s) for s in steps), return_exceptions=True
        )
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
            await self.backends.open_queue(step)
        elif isinstance(step, DeleteQueue):
            await self.backends.delete_queue(step)
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

    async def _takeover(self, step: NotifyTakeover) -> None:
        """Tell the old listener, then wait for its Disconnected, its stream's end, or time."""
        old = self.table.get(step.key)
        if old is None or old.epoch != step.old_epoch or not (old.online or old.recovered):
            return  # it went away while this registration waited for the lock
        command = registry_pb2.RegistryCommand(
            takeover=registry_pb2.Takeover(
                key=pb_key(step.key),
                old_epoch=step.old_epoch,
                new_epoch=step.new_epoch,
                new_node=step.new_node,
            )
        )
        done = asyncio.Event()
        self._waiters[(step.key, step.old_epoch)] = done
        try:
            watcher = self.hub.send(step.listener_id, command)
            if watcher is None and not old.online:
                return  # recovered after a restart, and its listener is gone: nothing to close
            self._takeovers.inc()
            log.emit(
                "session.takeover",
                client_id=step.key[1],
                mountpoint=step.key[0],
                old_node=old.node,
                new_node=step.new_node,
                epoch=step.new_epoch,
            )
            if watcher is None:
                _unanswered(step, "no watch stream", 0.0)
                return
            answered = await _first(done, watcher.closed, self.settings.takeover_timeout)
            if not answered:
                self._takeover_timeouts.inc()
                _unanswered(step, "timeout", self.settings.takeover_timeout)
        finally:
            if self._waiters.get((step.key, step.old_epoch)) is done:
                del self._waiters[(step.key, step.old_epoch)]

    # -- disconnection and expiry -------------------------------------------------

    async def disconnected(
        self, key: SessionKey, epoch: int, session_expiry: int | None, drop_subs: bool = True
    ) -> bool:
        """Record that the connection of ``epoch`` ended; False when the report is stale.

        ``drop_subs`` False: the listener says the connection never subscribed, so a session
        ending with it has no subscriptions to delete.

        A persistent session's queue gets its offline limit *before* the session is marked
        offline, so whoever sees it offline (``session show``, a publisher's next message)
        also sees the limit in force. Not for a takeover: the new registration sets its own.
        """
        current = self.table.get(key)
        if (
            current is not None
            and current.epoch == epoch
            and current.online
            and current.persistent
            and (key, epoch) not in self._waiters
        ):
            with suppress(BackendError):  # logged; the online limit stays until the next Open
                await self.backends.limit_queue(key, epoch, self.table.policy.max_offline_messages)
        session = self.table.disconnected(key, epoch, session_expiry, self.clock())
        if session is None:
            self._stale.inc()
            if drop_subs and self.table.get(key) is None:
                await self._drop_unknown_subs(key)
            return False
        waiter = self._waiters.pop((key, epoch), None)
        if waiter is not None:
            waiter.set()  # the waiting registration decides what becomes of the old state
        try:
            await self.committer.sync(key)
        except StoreError as exc:
            log.emit("store.error", "error", op="registry.disconnected", reason=str(exc))
        if waiter is not None:
            return True
        if session.persistent:
            await self._publish_offline(session)
        else:
            with suppress(BackendError):  # logged; the expiry timer tries again
                await self._end(session, "session ended", drop_subs)
        return True

    async def _drop_unknown_subs(self, key: SessionKey) -> None:
        """A connection the table never knew ended (it registered before a registry
        restart, and clean sessions are not on disk): its subscriptions go, unless a new
        registration of the id got in first."""
        if not self.leads(key):
            return
        async with self.locks.hold(key):
            if self.table.get(key) is not None:
                return
            with suppress(BackendError):  # logged; dropped at the next restart's reconcile
                await self.directory.write(subs_ops([key]))

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
                for step in end_steps(current, reason, drop_subs):
                    await self._execute(step)
            except BackendError:
                self.table.retry_at(current, self.clock() + RETRY_US)
                raise
            self.table.forget(current.key, current.epoch)
            try:
                await self.committer.sync(current.key)
            except StoreError as exc:
                log.emit("store.error", "error", op="registry.forget", reason=str(exc))
            return True

    async def expire_due(self) -> int:
        """Expire the sessions whose time has come; how many were deleted."""
        now = self.clock()
        count = 0
        due = self.table.due(now, EXPIRE_BATCH)
        for i, s in enumerate(due):
            if not self.leads(s.key):
                self.table.retry_at(s, now + RETRY_US)
                continue
            reason = "expired" if s.persistent else "session ended"
            try:
                if not await self._end(s, reason):
                    continue
            except BackendError:
                # The msgstore or gossip is down: the rest waits too, instead of each
                # spending a full rpc_timeout now.
                for rest in due[i + 1 :]:
                    self.table.retry_at(rest, now + RETRY_US)
                break
            count += 1
            if s.persistent:
                self._expired.inc()
                log.emit("session.expired", client_id=s.key[1], mountpoint=s.key[0], reason=reason)
                self.hub.broadcast(registry_pb2.RegistryCommand(expire=pb_key(s.key)))
        return count

    async def run_expiry(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.expire_due()
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.expiry_check_interval)

    async def close(self) -> None:
        """Finish the directory writes already made."""
        await self.directory.close()

    def details(self) -> dict[str, object]:
        return {
            "sessions": len(self.table),
            "online": self.table.online,
            "epoch": self.table.epoch,
            "watchers": self.hub.listeners(),
        }


async def _first(done: asyncio.Event, closed: asyncio.Event, timeout: float) -> bool:
    """Wait for either event; False on timeout."""
    tasks = {asyncio.ensure_future(done.wait()), asyncio.ensure_future(closed.wait())}
    try:
        finished, _ = await asyncio.wait(
            tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for task in tasks:
            task.cancel()
    return bool(finished)


def _unanswered(step: NotifyTakeover, reason: str, waited_s: float) -> None:
    """The old connection did not confirm its end: the takeover goes ahead anyway."""
    log.emit(
        "session.takeover_unanswered",
        "warning",
        client_id=step.key[1],
        mountpoint=step.key[0],
        listener_id=step.listener_id,
        epoch=step.new_epoch,
        reason=reason,
        waited_s=waited_s,
    )
