"""What a parent sets up in a child process between ``fork`` and ``exec``.

These run as ``preexec_fn``, in the forked child before it executes the new program:
there only async-signal-safe work is sound, so they call libc directly rather than
Python's ``signal`` module (whose handlers belong to the parent's interpreter).
"""

from __future__ import annotations

import contextlib
import ctypes
import signal

SUPERVISED = "TERNMQ_SUPERVISED"  # set in the environment of a supervisor's children
_PR_SET_PDEATHSIG = 1
_SIG_IGN = 1


def ignore_sigint() -> None:
    """Start the child with SIGINT ignored: a Ctrl-C reaches the whole process group,
    and one that arrives while the child is still starting (before it can say how it
    handles signals) would kill it; its parent is the one to stop it."""
    with contextlib.suppress(OSError):
        libc_signal = ctypes.CDLL("libc.so.6", use_errno=True).signal
        libc_signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc_signal.restype = ctypes.c_void_p
        libc_signal(signal.SIGINT, _SIG_IGN)


def die_with_parent() -> None:
    """Have the kernel SIGKILL the child when its parent dies (Linux), so a supervisor
    killed hard leaves no orphans holding ports and stores; SIGINT as ``ignore_sigint``."""
    ignore_sigint()
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
