"""The files under the event log: lines gathered in memory, written out in batches.

One ``write(2)`` per event would cost the listener more than routing the message, so a
writer gathers lines and writes them when it holds :data:`FLUSH_LINES`, when flushed
(the listener flushes before it writes to client sockets, so a client never sees a
message whose event is not yet in the OS) and periodically from ``log``'s flusher
thread. A process killed with SIGKILL loses at most its last, unflushed batch.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from pathlib import Path
from typing import Any

FLUSH_LINES = 256  # buffered lines that trigger a write (lines are ~250 bytes)


class BufferedWriter:
    """Gathers lines (or, for the spool, records) and writes them out in batches: the
    base of :class:`JsonlWriter` and ``spoolwriter.SpoolWriter``, which say how
    (``_flush_locked``, called with the lock held)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held while writing out
        # Lines go into a deque without the lock: ``append`` and ``popleft`` are atomic, so
        # a line added while another thread flushes is written now or by the next flush,
        # never lost. Compiled emitters append to ``lines`` themselves (as ``write``).
        self.lines: deque[Any] = deque()

    def write(self, line: str) -> None:
        lines = self.lines
        lines.append(line)
        if len(lines) >= FLUSH_LINES:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            with self._lock:
                self._flush_locked()

    def periodic(self) -> None:
        """Called by ``log``'s flusher thread each period: a flush, plus any upkeep a
        subclass needs (the spool's writer watches its converter)."""
        self.flush()

    def _take(self) -> list[Any]:
        """Everything gathered so far, in order (with the lock held)."""
        buf = self.lines
        popleft = buf.popleft
        return [popleft() for _ in range(len(buf))]

    def _flush_locked(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class JsonlWriter(BufferedWriter):
    """Appends lines to a file, buffered, rotating by size (``path.1`` is the newest old file)."""

    def __init__(self, path: Path, rotate_size: int, keep: int) -> None:
        super().__init__()
        self.path = path
        self.rotate_size = rotate_size
        self.keep = keep
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size

    def _flush_locked(self) -> None:
        if not self.lines:
            return
        data = "".join(self._take()).encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(data)
        if self.rotate_size and self._size >= self.rotate_size:
            self._rotate()

    def _rotate(self) -> None:
        os.close(self._fd)
        for i in range(self.keep - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{i}")
            if src.exists():
                src.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = 0

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            os.close(self._fd)
            self._fd = -1
