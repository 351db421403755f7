"""Webhooks registered at run time (``ternmq-admin webhooks register|deregister``): how
the node's HTTP API hands them to every listener process of the node.

The node's list of webhooks lives in one file, ``DATA_DIR/run/webhooks.json``: the
configured ones plus those registered since, minus those deregistered, with a
*generation* that each change increments. The HTTP API rewrites it (atomically, under
its lock); each listener process polls it (a ``stat`` every :data:`POLL` seconds),
swaps its endpoints when it changes, and answers with ``run/webhooks.applied-PID``
holding the generation it applied, which the HTTP API waits for before it says done.

As in VerneMQ, a registration lasts until the node stops: a node start removes the file,
and the configuration's webhooks apply again. A listener process that the supervisor
restarts reads the file, so it keeps the node's current registrations.

Worked example: config has ``auth_on_register -> http://a``; ``register
hook=on_deliver endpoint=http://b`` writes generation 1 with both; every listener
process answers ``applied-PID = 1``; ``deregister hook=auth_on_register
endpoint=http://a`` writes generation 2 with only ``on_deliver``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.common import log
from services.common.config import Config
from services.listener.webhooks.spec import check_registration

POLL = 0.2  # seconds between two looks at the file
FILE = "webhooks.json"
ACK_PREFIX = "webhooks.applied-"


def runtime_path(config: Config) -> Path:
    return Path(config["data_dir"]) / "run" / FILE


def ack_path(path: Path, pid: int) -> Path:
    return path.with_name(f"{ACK_PREFIX}{pid}")


def load(path: Path) -> tuple[int, list[dict[str, Any]]] | None:
    """The file's (generation, endpoints); None when there is none (or it is unreadable:
    the configuration applies)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return int(data["generation"]), list(data["endpoints"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(path: Path, generation: int, endpoints: list[dict[str, Any]]) -> None:
    """Write atomically: a listener process never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(
        json.dumps({"generation": generation, "endpoints": endpoints}, indent=1), encoding="utf-8"
    )
    os.replace(tmp, path)


def clear(path: Path) -> None:
    """At node start: the registrations of the previous run are gone, as in VerneMQ."""
    for p in [path, *path.parent.glob(f"{ACK_PREFIX}*")]:
        with contextlib.suppress(OSError):
            p.unlink()


def change(
    current: list[dict[str, Any]], op: str, hook: str, endpoint: str, base64_payload: bool = True
) -> list[dict[str, Any]] | str:
    """The endpoint list after ``register`` or ``deregister``, or why it cannot be done
    (VerneMQ's ``already_registered`` / ``not_found``). A new endpoint goes last: the
    endpoints of a hook are asked oldest first."""
    why = check_registration(hook, endpoint)
    if why:
        return why
    present = any(e["hook"] == hook and e["endpoint"] == endpoint for e in current)
    if op == "register":
        if present:
            return f"already_registered: {hook} {endpoint}"
        entry = {"hook": hook, "endpoint": endpoint, "base64_payload": base64_payload}
        return [*current, {**entry, "name": "", "source": "runtime"}]
    if not present:
        return f"not_found: {hook} {endpoint}"
    return [e for e in current if not (e["hook"] == hook and e["endpoint"] == endpoint)]


class Watcher:
    """A listener process's look at the file: ``apply`` gets each new endpoint list."""

    def __init__(self, path: Path, apply: Callable[[list[dict[str, Any]]], None]) -> None:
        self.path = path
        self.apply = apply
        self.seen: tuple[int, int] | None = None  # (inode, mtime_ns) last applied
        self.generation = 0
        self.task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """Apply the file if it changed since the last look; whether it did."""
        try:
            st = self.path.stat()
        except OSError:
            return False
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp == self.seen:
            return False
        loaded = load(self.path)
        if loaded is None:
            return False
        self.seen = stamp
        generation, eps = loaded
        try:
            self.apply(eps)
        except (KeyError, TypeError, ValueError) as exc:  # a hand-edited file
            log.emit("internal.error", "error", op="webhooks.runtime", reason=repr(exc))
            return False
        self.generation = generation
        with contextlib.suppress(OSError):
            ack_path(self.path, os.getpid()).write_text(str(self.generation), encoding="utf-8")
        return True

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run(), name="webhooks-runtime")

    async def _run(self) -> None:
        while True:
            self.check()
            await asyncio.sleep(POLL)

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
