"""Keep a fixed set of child processes running until told to stop.

Children start in the order given and stop in the reverse order, so a child can rely on
the ones started before it for as long as it runs. A child that exits unexpectedly is
restarted after a short backoff; more than ``max_restarts`` restarts of one child within
``restart_window`` seconds stop them all with a failure (a crash loop is louder than a
flapping child). On stop each child gets SIGTERM, and SIGKILL if still running after
``shutdown_timeout``. Children ask the kernel for SIGKILL when the supervisor dies, so a
supervisor killed hard leaves no orphans.

What the children are, and what runs around them, is the caller's: ``services.node``
makes a ternmq node of it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from services.common import log
from services.common.child_process import SUPERVISED


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int
    restart_window: float  # s
    shutdown_timeout: float  # s


@dataclass(frozen=True)
class ChildSpec:
    name: str
    argv: Sequence[str]


class ChildStatus(TypedDict):
    pid: int | None
    running: bool
    restarts: int
    uptime_s: float


@dataclass
class Child:
    spec: ChildSpec
    proc: asyncio.subprocess.Process | None = None
    restarts: deque[float] = field(default_factory=deque)  # times, within the window
    total_restarts: int = 0
    started_at: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name


class Supervisor:
    def __init__(self, children: Sequence[ChildSpec], policy: RestartPolicy) -> None:
        self.policy = policy
        self.children = {spec.name: Child(spec) for spec in children}
        self.stopping = False
        self.failed = False
        self.started_at = time.time()

    async def _spawn(self, child: Child) -> None:
        # No preexec_fn: the child ignores SIGINT and asks to die with us itself
        # (``child_process.adopt_supervision``), so nothing runs between fork and exec.
        child.proc = await asyncio.create_subprocess_exec(
            *child.spec.argv,
            env={**os.environ, SUPERVISED: str(os.getpid())},
        )
        child.started_at = time.time()

    async def run(self, stop: asyncio.Event) -> int:
        """Start the children and keep them running until ``stop`` is set (by the caller
        or by a crash loop); return the exit status: 1 after a crash loop, else 0."""
        for child in self.children.values():
            await self._spawn(child)
        watchers = [asyncio.create_task(self._watch(c, stop)) for c in self.children.values()]
        await stop.wait()
        self.stopping = True
        await self._stop_all()
        for w in watchers:
            w.cancel()
        return 1 if self.failed else 0

    async def _watch(self, child: Child, stop: asyncio.Event) -> None:
        window = self.policy.restart_window
        limit = self.policy.max_restarts
        while not self.stopping:
            assert child.proc is not None
            code = await child.proc.wait()
            if self.stopping:
                return
            now = time.time()
            child.restarts.append(now)
            while child.restarts and child.restarts[0] < now - window:
                child.restarts.popleft()
            child.total_restarts += 1
            log.emit(
                "service.crashed",
                "error",
                child=child.name,
                exit_code=code,
                restarts=child.total_restarts,
            )
            if len(child.restarts) > limit:
                log.emit(
                    "service.stopping",
                    "error",
                    reason=f"{child.name} restarted {limit} times in {window:g}s",
                )
                self.failed = True
                stop.set()
                return
            await asyncio.sleep(min(0.2 * len(child.restarts), 2.0))
            if self.stopping:
                return
            await self._spawn(child)
            assert child.proc is not None
            log.emit("service.restarted", "warning", child=child.name, pid=child.proc.pid)

    async def _stop_all(self) -> None:
        timeout = self.policy.shutdown_timeout
        for name in reversed(self.children):
            proc = self.children[name].proc
            if proc is None or proc.returncode is not None:
                continue
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                await asyncio.wait_for(proc.wait(), timeout)
            except TimeoutError:
                log.emit("service.stopping", "warning", reason=f"{name} killed after {timeout}s")
                proc.kill()
                await proc.wait()

    def status(self) -> dict[str, ChildStatus]:
        return {
            name: {
                "pid": c.proc.pid if c.proc else None,
                "running": bool(c.proc and c.proc.returncode is None),
                "restarts": c.total_restarts,
                "uptime_s": round(time.time() - c.started_at, 1) if c.started_at else 0,
            }
            for name, c in self.children.items()
        }
