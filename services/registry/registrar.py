"""Running the session table: per-id serialisation, takeover waits, store and gossip calls.

The pure :mod:`services.registry.sessions` decides; this module executes its steps in
order with I/O. Registrations of one client id run one at a time under a per-id lock
(FIFO, so the last CONNECT wins). A Disconnected never takes that lock to update the
table: a Register holding it may be waiting for exactly that Disconnected (the answer to
its takeover). Cleanup I/O after a Disconnected or an expiry does take the lock and
re-checks the epoch, so it can never delete what a newer registration just created.

Every change to a durable session reaches the disk (:class:`services.registry.store.Journal`)
before the RPC that caused it answers, and an epoch is reserved on disk before it leaves
the process. A clean session that replaces nothing costs no I/O at all (no queue, no
directory record, no journal write): see :meth:`services.registry.sessions.Plan.steps`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from services.common import log
from services.common.grpcutil import rpc_failed_as
from services.common.metrics import MetricsRegistry
from services.pb import gossip_pb2, registry_pb2
from services.registry.backends import BackendError, Backends
from services.registry.config import RegistryConfig
from services.registry.leadership import SessionKey, View, decide, replicas
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
from services.registry.store import Journal, StoreError
from services.registry.watchers import WatchHub

EPOCH_BLOCK = 1024  # epochs reserved on disk per write
EXPIRE_BATCH = 1000  # sessions expired per tick at most
RETRY_US = 5 * US  # a failed cleanup is tried again after this
RECOVERY_BATCH = 500  # directory records per gossip Put at start-up

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


class KeyedLocks:
    """One FIFO lock per session key, kept only while somebody holds or waits for it.

    Hand-rolled rather than an ``asyncio.Lock`` per key: every CONNECT takes one, and an
    uncontended acquire here is a dict insert, not a lock object and a context manager.
    """

    def __init__(self) -> None:
        # key -> the waiters behind the current holder (present while the key is held)
        self._held: dict[SessionKey, deque[asyncio.Future[None]]] = {}

    def hold(self, key: SessionKey) -> _Held:
        return _Held(self, key)

    async def _acquire(self, key: SessionKey) -> None:
        waiters = self._held.get(key)
        if waiters is None:
            self._held[key] = deque()
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release(key)  # we were handed the lock as we were cancelled: pass it on
            else:
                waiters.remove(fut)
            raise

    def _release(self, key: SessionKey) -> None:
        waiters = self._held[key]
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # ownership passes directly to the next waiter
                return
        del self._held[key]


class _Held:
    __slots__ = ("key", "locks")

    def __init__(self, locks: KeyedLocks, key: SessionKey) -> None:
        self.locks = locks
        self.key = key

    async def __aenter__(self) -> None:
        await self.locks._acquire(self.key)

    async def __aexit__(self, *exc: object) -> None:
        self.locks._release(self.key)


class Registrar:
    def __init__(
        self,
        cfg: RegistryConfig,
        table: SessionTable,
        journal: Journal,
        backends: Backends,
        hub: WatchHub,
        metrics: MetricsRegistry,
        clock: Callable[[], int] = wall_clock_us,
    ) -> None:
        self.cfg = cfg
        self.table = table
        self.journal = journal
        self.backends = backends
        self.hub = hub
        self.clock = clock
        self.view = View.single(cfg.node)
        self.reserved = 0  # every epoch at or below this is reserved on disk
        self._locks = KeyedLocks()
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

    # -- registration -------------------------------------------------------------

    async def register(self, c: Connect, shield: bool = True) -> RegisterResult:
        """``shield``: once begun, a registration completes even if the caller is cancelled
        (a unary RPC whose client went away), so the table never stops half-way between a
        takeover and its commit. A caller that is never cancelled passes False and saves
        the extra task."""
        decision = decide(self.view, c.key, self.cfg.allow_register_during_netsplit)
        if not decision.act:
            self._registrations.labels("refused").inc()
            return RegisterResult(False, reason=decision.reason, reason_code=RC_SERVER_UNAVAILABLE)
        result = await (asyncio.shield(self._register(c)) if shield else self._register(c))
        self._registrations.labels("ok" if result.ok else "failed").inc()
        return result

    async def _register(self, c: Connect) -> RegisterResult:
        async with self._locks.hold(c.key):
            plan = self.table.plan_register(c, self.clock())
            epoch = plan.session.epoch
            try:
                await self._reserve(epoch)
                for step in plan.steps():
                    await self._execute(step)
            except BackendError as exc:
                self.table.raise_epoch(exc.store_epoch)
                return RegisterResult(False, reason=str(exc), reason_code=RC_SERVER_UNAVAILABLE)
            except StoreError as exc:
                return self._store_failed("register", exc)
            self.table.commit(plan)
            try:
                await self.journal.sync(c.key)
            except StoreError as exc:
                # Not durable, so not live: no later CONNECT may wait on this connection.
                self.table.disconnected(c.key, epoch, None, self.clock())
                return self._store_failed("register", exc)
            return RegisterResult(True, epoch, plan.session_present, plan.keeps_queue)

    async def _reserve(self, epoch: int) -> None:
        if epoch > self.reserved:
            target = epoch + EPOCH_BLOCK
            await self.journal.sync(reserve=target)
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
        await self.backends.put_meta(self._directory_ops(step))

    def _directory_ops(self, step: PublishSession) -> list[gossip_pb2.MetaOp]:
        if not step.directory:
            return subs_ops([step.key])
        owner = step.session.node if step.session is not None else self.cfg.node
        nodes = replicas(step.key, owner, self.view.members, self.cfg.replication_factor)
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
                rpc_failed_as(
                    f"listener:{step.listener_id}",
                    "Takeover",
                    "UNAVAILABLE",
                    "the listener has no Watch stream",
                )
                return
            answered = await _first(done, watcher.closed, self.cfg.takeover_timeout)
            if not answered:
                self._takeover_timeouts.inc()
                rpc_failed_as(
                    f"listener:{step.listener_id}",
                    "Takeover",
                    "DEADLINE_EXCEEDED",
                    f"no Disconnected within {self.cfg.takeover_timeout:g}s; going ahead",
                )
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
            await self.journal.sync(key)
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
        if not decide(self.view, key, self.cfg.allow_register_during_netsplit).act:
            return
        async with self._locks.hold(key):
            if self.table.get(key) is not None:
                return
            with suppress(BackendError):  # logged; dropped at the next restart's reconcile
                await self.backends.put_meta(subs_ops([key]))

    async def _publish_offline(self, session: Session) -> None:
        async with self._locks.hold(session.key):
            current = self.table.get(session.key)
            if current is None or current.epoch != session.epoch or current.online:
                return
            # A failure is logged (rpc.failed); the directory catches up at the next change.
            with suppress(BackendError):
                await self._publish(PublishSession(current.key, current, drop_subs=False))

    async def _end(self, session: Session, reason: str, drop_subs: bool = True) -> bool:
        """Delete an offline session's queue, subscriptions and record, then forget it.

        False when the session was replaced or came back meanwhile. On a BackendError the
        session stays, due again after ``RETRY_US``.
        """
        async with self._locks.hold(session.key):
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
                await self.journal.sync(current.key)
            except StoreError as exc:
                log.emit("store.error", "error", op="registry.forget", reason=str(exc))
            return True

    async def expire_due(self) -> int:
        """Expire the sessions whose time has come; how many were deleted."""
        now = self.clock()
        count = 0
        due = self.table.due(now, EXPIRE_BATCH)
        for i, s in enumerate(due):
            if not decide(self.view, s.key, self.cfg.allow_register_during_netsplit).act:
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
                await asyncio.wait_for(stop.wait(), self.cfg.expiry_check_interval)

    # -- start-up -----------------------------------------------------------------

    async def recover(self, sessions: list[Session], reserved: int) -> None:
        """Rebuild the table from disk; sessions that were online are now offline.

        Their directory records are corrected before the registry serves, so a later
        registration's record cannot be overwritten by this one.
        """
        self.reserved = reserved
        self.table.raise_epoch(reserved)
        recovered = self.table.load(sessions, self.clock())
        await self._drop_orphan_subs()
        await self._drop_orphan_queues()
        if not recovered:
            return
        await self.journal.sync(*(s.key for s in recovered))
        persistent = [s for s in recovered if s.persistent]
        for start in range(0, len(persistent), RECOVERY_BATCH):
            ops = []
            for s in persistent[start : start + RECOVERY_BATCH]:
                ops.extend(self._directory_ops(PublishSession(s.key, s, drop_subs=False)))
            try:
                await self.backends.put_meta(ops)
            except BackendError:
                break  # logged; gossip is not up, each record is rewritten at its next change
        for s in persistent:  # they were online when the node died: offline limits now
            try:
                await self.backends.limit_queue(
                    s.key, s.epoch, self.table.policy.max_offline_messages
                )
            except BackendError:
                return  # logged; the msgstore is not up, the limit is set at the next change

    async def _drop_orphan_subs(self) -> None:
        """Delete the subscriptions of this node's sessions that the table does not hold.

        Clean sessions are not on disk, so after a restart the table cannot end them; their
        connections are gone (or about to be dropped by their listeners), and a client id
        that registers again must start without them. Only keys this registry leads and
        whose record names this node are touched: other nodes' sessions are theirs.
        """
        try:
            owners = await self.backends.subs_owners()
        except BackendError:
            return  # logged; gossip is not up, the next restart tries again
        orphans = []
        for raw, node in owners.items():
            mountpoint, _, client_id = raw.decode().partition("\0")
            key = (mountpoint, client_id)
            if (
                node == self.cfg.node
                and self.table.get(key) is None
                and decide(self.view, key, self.cfg.allow_register_during_netsplit).act
            ):
                orphans.append(key)
        for start in range(0, len(orphans), RECOVERY_BATCH):
            try:
                await self.backends.put_meta(subs_ops(orphans[start : start + RECOVERY_BATCH]))
            except BackendError:
                return  # logged

    async def _drop_orphan_queues(self) -> None:
        """Delete the msgstore queues of sessions the table does not hold.

        A persistent registration opens its queue before its record is journaled: a
        registry killed in between leaves a queue for an id it will not know, which nobody
        reads and, if the id only ever comes back clean, nobody deletes. Its client never
        got a CONNACK for it and never subscribed with it, so nothing acknowledged to it is
        lost. Deleted with the reserved epoch, at or above every epoch issued before the
        restart (a queue with a newer one, from a wiped registry, is refused and kept). Only
        keys this registry leads, as for subscriptions — which, like that sweep, trusts
        ``self.view`` at start-up: true on one node (the only mode built so far); with
        clustering, recovery must wait for the membership view, or a queue of a session led
        by another node's registry would look orphaned here.
        """
        orphans: list[SessionKey] = []
        try:
            async for page in self.backends.queue_pages():
                for queue in page:
                    key = (queue.key.mountpoint, queue.key.client_id)
                    if (
                        self.table.get(key) is None
                        and decide(self.view, key, self.cfg.allow_register_during_netsplit).act
                    ):
                        orphans.append(key)
        except BackendError:
            return  # logged; the msgstore is not up, the next restart tries again
        for key in orphans:
            try:
                await self.backends.delete_queue(DeleteQueue(key, self.reserved, "orphan"))
            except BackendError as exc:
                if exc.code != "REFUSED":
                    return  # logged, as above

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
