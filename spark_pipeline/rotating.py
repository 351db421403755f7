"""Log files written the way ternmq's services write them: JSON lines, rotated.

Rotation follows ``logging.handlers.RotatingFileHandler``: when the live file would
pass its size limit, ``.N`` becomes ``.N+1`` (highest first), the live file becomes
``.1`` and a new live file starts; so ``.1`` is always the newest rotated file.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, TextIO

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def format_ts(us: int) -> str:
    """µs since the epoch as the loggers write it: ``2026-11-22T07:05:00.123456Z``."""
    return (EPOCH + timedelta(microseconds=us)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class RotatingWriter:
    """Appends lines to ``path``; past ``limit`` bytes shifts ``.N`` up and starts anew."""

    def __init__(self, path: Path, limit: int) -> None:
        self.path, self.limit, self.size = path, limit, 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: TextIO = path.open("w", encoding="utf-8")

    def write(self, line: str) -> None:
        if self.size and self.size + len(line) > self.limit:
            self._rotate()
        self._fh.write(line)
        self.size += len(line)

    def _rotate(self) -> None:
        self._fh.close()
        n = 1
        while self.path.with_name(f"{self.path.name}.{n}").exists():
            n += 1
        for i in range(n - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{i}")
            src.rename(self.path.with_name(f"{self.path.name}.{i + 1}"))
        self.path.rename(self.path.with_name(f"{self.path.name}.1"))
        self._fh, self.size = self.path.open("w", encoding="utf-8"), 0

    def flush(self) -> None:
        """Make what was written visible to readers (a run between two writes)."""
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
