"""Whether a process id (or a process group) still names a running process."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` runs. A zombie does not: it was killed or exited and only waits for
    its parent to reap it (a killed log writer has written its last; a killed node is
    down even while the command that started it has not waited for it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:  # gone between the two calls
        return False
    state = stat[stat.rindex(b")") + 1 :].split(maxsplit=1)[0]  # after "(comm)"
    return state not in (b"Z", b"X")


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is left (zombies count: a caller that has
    reaped its own child waits here for the rest of the group, the JVM or the services
    it started)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
