"""How a supervised child ties its life to its parent's, from its own side.

The supervisor once ran these as ``preexec_fn``, in the forked child before ``exec``.
That is Python code between ``fork`` and ``exec`` in a process with threads (the HTTP
API, gRPC's pollers, the log writer), which CPython documents as unsafe, and under
uvloop it goes through uvloop's own fork path; a supervisor died of SIGSEGV while
starting its children in a CI run. Now the parent spawns plainly and the child does the
work first thing after ``exec``, where it is an ordinary single-threaded program.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

# Set in the environment of a supervisor's children, to the supervisor's pid.
SUPERVISED = "TERNMQ_SUPERVISED"
_PR_SET_PDEATHSIG = 1


def supervised_by() -> int | None:
    """The pid of the supervisor that started this process, if one did."""
    value = os.environ.get(SUPERVISED, "")
    return int(value) if value.isdigit() else None


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when ``parent`` dies (Linux), so a supervisor
    killed hard leaves no orphans holding ports and stores. If the parent died before we
    got here, we were already handed to init: die now rather than run unowned."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def ignore_sigint() -> None:
    """Ignore Ctrl-C: it reaches the whole foreground process group, and a child's parent
    is the one to stop it (in order). An ignored disposition survives ``exec``, so what
    this process starts afterwards begins with SIGINT ignored too, with no window."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def adopt_supervision() -> bool:
    """Called first by a service's entry point; True if a supervisor started us."""
    parent = supervised_by()
    if parent is None:
        return False
    ignore_sigint()
    die_with_parent(parent)
    return True
