"""A 3-node dev cluster for a test module (``ternmq dev-cluster``, DESIGN §3's fixed
ports), stopped with ``ternmq dev-cluster stop`` whatever the tests did to it."""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

BIN = Path(sys.executable).parent
LOCK = Path("/tmp/ternmq-dev-cluster.lock")


@contextlib.contextmanager
def ports_held() -> Iterator[None]:
    """Hold the dev cluster's fixed ports (DESIGN §3) for this process: two test runs or a
    test and a benchmark on one machine would otherwise join each other's nodes."""
    with open(LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def dev_cluster(base: Path, *sets: str) -> Iterator[Path]:
    """Start 3 nodes under ``base`` (each ``sets`` item is a ``KEY=VALUE`` for every node's
    conf) and return once all are joined and healthy; stop them all on exit."""
    args = [str(BIN / "ternmq"), "dev-cluster", "--nodes", "3", "--base-dir", str(base)]
    for item in sets:
        args += ["--set", item]
    with ports_held():
        try:  # a start cut short (a test timeout while it ran) still stops what it started
            done = subprocess.run(args, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            yield base
        finally:
            subprocess.run(
                [str(BIN / "ternmq"), "dev-cluster", "stop", "--base-dir", str(base)],
                capture_output=True,
                timeout=60,
            )


def start_node(base: Path, node: str) -> None:
    """Start a dev-cluster node that was stopped or killed, with its conf and data, in a
    process group of its own; ``dev-cluster stop`` finds it by its new ``node.pid``.
    Returns at once: the caller waits for what it needs (the node up, the others)."""
    home = base / node.split("@")[0]
    with open(home / "console.log", "ab") as out:
        proc = subprocess.Popen(
            [str(BIN / "ternmq"), "start", "--config", str(home / "ternmq.conf")],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (home / "node.pid").write_text(f"{proc.pid}\n")
