"""A node-wide value changed at run time by ``ternmq-admin``, handed to the node's
service processes through one file.

The node's HTTP API rewrites the file (atomically) with a *generation* that each change
increments; every process that cares polls it (a ``stat`` every :data:`POLL` seconds),
applies what changed, and answers with ``PREFIX.applied-PID`` holding the generation it
applied, which the HTTP API waits for before it says done. A node start removes the
file and the answers: a run-time change lasts until the node stops, as in VerneMQ. A
process the supervisor restarts reads the file, so it keeps the node's current state.

Used for webhooks (``ternmq-admin webhooks register``, ``listener.webhooks.runtime``)
and settings (``ternmq-admin set``, ``services.common.live_settings``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.common import log

POLL = 0.2  # seconds between two looks at the file


class RuntimeFile:
    """``DIR/run/NAME.json`` holding ``{"generation": N, KEY: payload}``."""

    def __init__(self, data_dir: str | Path, name: str, key: str) -> None:
        self.path = Path(data_dir) / "run" / f"{name}.json"
        self.key = key
        self.ack_prefix = f"{name}.applied-"

    def ack_path(self, pid: int) -> Path:
        return self.path.with_name(f"{self.ack_prefix}{pid}")

    def load(self) -> tuple[int, Any] | None:
        """(generation, payload); None when there is no file or it is unreadable."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return int(data["generation"]), data[self.key]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, generation: int, payload: Any) -> None:
        """Write atomically: a process never reads half a file."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        text = json.dumps({"generation": generation, self.key: payload}, indent=1)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.path)

    def clear(self) -> None:
        """At node start: the previous run's changes are gone."""
        for p in [self.path, *self.path.parent.glob(f"{self.ack_prefix}*")]:
            with contextlib.suppress(OSError):
                p.unlink()

    def applied(self, pid: int) -> int:
        """The generation process ``pid`` last applied (0: none yet)."""
        try:
            return int(self.ack_path(pid).read_text())
        except (OSError, ValueError):
            return 0


class Watcher:
    """One process's look at a :class:`RuntimeFile`: ``apply`` gets each new payload."""

    def __init__(self, file: RuntimeFile, apply: Callable[[Any], object], op: str) -> None:
        self.file = file
        self.apply = apply
        self.op = op  # names the watcher in its task and in a logged failure
        self.seen: tuple[int, int] | None = None  # (inode, mtime_ns) last applied
        self.generation = 0
        self.task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """Apply the file if it changed since the last look; whether it did."""
        loaded = self._changed()
        if loaded is None:
            return False
        try:
            self.apply(loaded[1])
        except (KeyError, TypeError, ValueError) as exc:  # a hand-edited file
            log.emit("internal.error", "error", op=self.op, reason=repr(exc))
            return False
        self._applied(loaded[0])
        return True

    async def check_async(self) -> bool:
        """:meth:`check` for an ``apply`` that returns an awaitable (opening sockets):
        the generation is acknowledged once it is done."""
        loaded = self._changed()
        if loaded is None:
            return False
        try:
            result = self.apply(loaded[1])
            if inspect.isawaitable(result):
                await result
        except (KeyError, TypeError, ValueError) as exc:  # a hand-edited file
            log.emit("internal.error", "error", op=self.op, reason=repr(exc))
            return False
        self._applied(loaded[0])
        return True

    def _changed(self) -> tuple[int, Any] | None:
        try:
            st = self.file.path.stat()
        except OSError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp == self.seen:
            return None
        loaded = self.file.load()
        if loaded is not None:
            self.seen = stamp
        return loaded

    def _applied(self, generation: int) -> None:
        self.generation = generation
        with contextlib.suppress(OSError):
            self.file.ack_path(os.getpid()).write_text(str(generation), encoding="utf-8")

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name=self.op)

    async def _run(self) -> None:
        while True:
            await self.check_async()
            await asyncio.sleep(POLL)

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
