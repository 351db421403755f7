"""tracemalloc snapshots of each ternmq service, written on a timer: off unless asked.

Put this directory first on ``PYTHONPATH`` and set ``TERNMQ_TRACEMALLOC`` to a directory
before ``ternmq start``. Python imports ``sitecustomize`` at start-up, so every service
the supervisor starts (``python -m services.NAME``) then traces its allocations and
writes ``NAME-PID-NNN.snap`` there every ``TERNMQ_TRACEMALLOC_EVERY`` seconds (30).
``python -m bench.fuzz.snapdiff DIR NAME`` compares the first and the last. Tracing
slows a service two to three times: use it to find a leak, not to measure one.
"""

from __future__ import annotations

import os
import threading
import time
import tracemalloc

_DIR = os.environ.get("TERNMQ_TRACEMALLOC", "")


def _service() -> str:
    try:
        with open("/proc/self/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return ""
    for arg in argv:
        if arg.startswith(b"services.") and arg.count(b".") == 1:
            return arg.decode().split(".")[1]
    return ""


def _dump(directory: str, name: str, every: float) -> None:
    n = 0
    while True:
        time.sleep(every)
        path = os.path.join(directory, f"{name}-{os.getpid()}-{n:03d}.snap")
        tracemalloc.take_snapshot().dump(path + ".part")
        os.replace(path + ".part", path)  # a service killed mid-dump leaves no torn file
        n += 1


if _DIR and (_NAME := _service()):
    tracemalloc.start(int(os.environ.get("TERNMQ_TRACEMALLOC_FRAMES", "4")))
    _every = float(os.environ.get("TERNMQ_TRACEMALLOC_EVERY", "30"))
    threading.Thread(target=_dump, args=(_DIR, _NAME, _every), daemon=True).start()
