"""Takeover: telling an old connection's listener to close it, and waiting for its answer.

Why wait: the old connection flushes its acks and marks before its listener reports it
gone (``Disconnected`` with its epoch), so the new connection reads a queue that holds
them; the wait is bounded by ``registry.takeover_timeout`` (or the end of that
listener's Watch stream), after which the takeover goes ahead anyway.
"""

from __future__ import annotations

import asyncio

from services.common import log
from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.pb import registry_pb2
from services.registry.records import pb_key
from services.registry.sessions import NotifyTakeover, Session
from services.registry.watchers import WatchHub


class Takeovers:
    def __init__(self, hub: WatchHub, timeout: float, metrics: MetricsRegistry) -> None:
        self.hub = hub
        self.timeout = timeout
        self._waiters: dict[tuple[SessionKey, int], asyncio.Event] = {}
        self._count = metrics.counter("registry_takeovers_total", "Sessions taken over.")
        self._timeouts = metrics.counter(
            "registry_takeover_timeouts_total",
            "Takeovers that went ahead without the old connection's Disconnected.",
        )

    def ended(self, key: SessionKey, epoch: int) -> bool:
        """The connection of ``epoch`` ended: a takeover waiting for it goes on. True if
        one was waiting (it decides what becomes of the old state)."""
        waiter = self._waiters.pop((key, epoch), None)
        if waiter is None:
            return False
        waiter.set()
        return True

    async def run(self, step: NotifyTakeover, old: Session) -> bool:
        """Tell the old listener, then wait for its Disconnected, its stream's end, or time.

        True when the Disconnected came: the old connection's delivery marks are in its
        queue. Otherwise (no answer in time, or its listener gone) it may have sent
        entries that no mark records, and a resume must set DUP on every entry it
        replays [MQTT-3.3.1-1]."""
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
                return False  # recovered after a restart, its listener gone: nothing to close
            self._count.inc()
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
                return False
            if not await _first(done, watcher.closed, self.timeout):
                self._timeouts.inc()
                _unanswered(step, "timeout", self.timeout)
            return done.is_set()
        finally:
            if self._waiters.get((step.key, step.old_epoch)) is done:
                del self._waiters[(step.key, step.old_epoch)]


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
