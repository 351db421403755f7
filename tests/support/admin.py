"""``ternmq-admin`` run as an operator runs it, against a node's HTTP admin API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def admin(port: int, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``ternmq-admin --node 127.0.0.1:PORT ARGS…``, its output captured as text."""
    return subprocess.run(
        [str(BIN / "ternmq-admin"), "--node", f"127.0.0.1:{port}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
