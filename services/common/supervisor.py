"""``ternmq start``: run a node's four services as child processes and keep them running.

Children start in dependency order (msgstore, gossip, registry, listener), each with the
node's effective configuration written to ``data_dir/run/node.conf`` (the file plus any
``--set`` overrides), so a child started alone with that file behaves the same.

A child that exits unexpectedly is restarted after a short backoff; more than
``supervisor.max_restarts`` restarts within ``supervisor.restart_window`` stops the node
with exit status 1 (a crash loop is louder than a flapping service). SIGTERM/SIGINT stop
the children in reverse order, with SIGKILL for any still running after
``supervisor.shutdown_timeout``. Children ask the kernel for SIGKILL when the supervisor
dies (PR_SET_PDEATHSIG), so a node killed hard leaves no orphans.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvloop

from services.common import log
from services.common.child_process import SUPERVISED, ignore_sigint
from services.common.config import Config
from services.common.service import setup_logging

ORDER = ("msgstore", "gossip", "registry", "listener")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the supervisor dies (Linux); SIGINT is the
    supervisor's to act on (see ``service.ignore_sigint``)."""
    ignore_sigint()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


@dataclass
class Child:
    name: str
    proc: asyncio.subprocess.Process | None = None
    restarts: deque[float] = field(default_factory=deque)
    total_restarts: int = 0
    started_at: float = 0.0


class Supervisor:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.children = {name: Child(name) for name in ORDER}
        self.stopping = False
        self.failed = False
        run_dir = Path(config["data_dir"]) / "run"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.conf_path = run_dir / "node.conf"
        self.conf_path.write_text("\n".join(config.to_lines()) + "\n", encoding="utf-8")
        self.started_at = time.time()

    async def _spawn(self, child: Child) -> None:
        child.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            f"services.{child.name}",
            "--config",
            str(self.conf_path),
            preexec_fn=_die_with_parent,
            env={**os.environ, SUPERVISED: "1"},
        )
        child.started_at = time.time()

    async def run(self, stop: asyncio.Event) -> int:
        for name in ORDER:
            await self._spawn(self.children[name])
        watchers = [asyncio.create_task(self._watch(c, stop)) for c in self.children.values()]
        await stop.wait()
        self.stopping = True
        await self._stop_all()
        for w in watchers:
            w.cancel()
        return 1 if self.failed else 0

    async def _watch(self, child: Child, stop: asyncio.Event) -> None:
        window: float = self.config["supervisor.restart_window"]
        limit: int = self.config["supervisor.max_restarts"]
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
        timeout: float = self.config["supervisor.shutdown_timeout"]
        for name in reversed(ORDER):
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

    def status(self) -> dict[str, dict[str, Any]]:
        return {
            name: {
                "pid": c.proc.pid if c.proc else None,
                "running": bool(c.proc and c.proc.returncode is None),
                "restarts": c.total_restarts,
                "uptime_s": round(time.time() - c.started_at, 1) if c.started_at else 0,
            }
            for name, c in self.children.items()
        }


def start_node(config: Config) -> int:
    """Run a node in the foreground until SIGTERM/SIGINT; return the exit status."""
    setup_logging("node", config)
    from services.common.http_api import HttpApi

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        sup = Supervisor(config)
        api = HttpApi(config, sup)
        api.start()
        log.emit("service.started", address=str(config["listener.http.default"]), pid=os.getpid())
        try:
            return await sup.run(stop)
        finally:
            api.stop()

    try:
        code = uvloop.run(main())
    except OSError as exc:
        print(f"ternmq: {exc}", file=sys.stderr)
        code = 1
    log.emit(
        "service.stopping",
        reason="stopped",
    )
    log.shutdown()
    return code
