"""The progress bar of ``etl run``: step, Spark tasks, events read and events/s.

A thread polls Spark's status tracker twice a second. Events read come from the input
records of the stages Spark ran while the logs were parsed (the largest one: the scan
that read every new line; later stages reread the cached lines). That figure is read
through the driver's status store, an internal API: if it is missing, the bar shows
tasks only. On a terminal the bar is redrawn in place on stderr; elsewhere (a pipe, a
CI log) one plain line is printed per step and every ``PLAIN_EVERY`` seconds, so logs
stay readable.
"""

from __future__ import annotations

import shutil
import threading
import time
from typing import Any, Final, TextIO

from pyspark import SparkContext

PLAIN_EVERY: Final = 15.0
WIDTH: Final = 24


def bar(done: int, total: int, width: int = WIDTH) -> str:
    """``[#####.....]`` for ``done`` of ``total``."""
    filled = 0 if total <= 0 else min(width, round(width * done / total))
    return "[" + "#" * filled + "." * (width - filled) + "]"


class ProgressBar:
    """Messages as permanent lines, and one status line kept up to date below them."""

    def __init__(self, sc: SparkContext, stream: TextIO, interval: float = 0.5) -> None:
        self.sc, self.stream, self.interval = sc, stream, interval
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self.step, self.steps, self.name = 0, 0, "starting"
        self.parse_t0: float | None = None
        self.parse_took: float | None = None
        self.parse_stages: set[int] = set()
        self.events = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._shown = ""
        self._last_plain = 0.0
        self._thread = threading.Thread(target=self._run, name="etl-progress", daemon=True)

    def __enter__(self) -> ProgressBar:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            self._clear()

    def message(self, text: str) -> None:
        """A line that stays: printed above the bar."""
        with self._lock:
            self._clear()
            self.stream.write(f"[etl {time.monotonic() - self.t0:7.1f}s] {text}\n")
            self.stream.flush()
            self._draw(self._shown)

    def begin(self, step: int, steps: int, name: str) -> None:
        """Step ``step`` of ``steps`` starts (``parse`` counts events read)."""
        with self._lock:
            if self.name == "parse" and self.parse_t0 is not None:
                self.parse_took = time.monotonic() - self.parse_t0
            self.step, self.steps, self.name = step, steps, name
            if name == "parse":
                self.parse_t0 = time.monotonic()
            self._last_plain = 0.0

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                line = self.status()
            except Exception:
                continue
            with self._lock:
                self._draw(line)

    def status(self) -> str:
        """The status line as it stands (empty until the first step starts)."""
        if self.step == 0:
            return ""
        tracker = self.sc.statusTracker()
        done = total = 0
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
                if self.name == "parse":
                    self.parse_stages.add(sid)
        self.events = max([self.events, *(self._input_records(s) for s in self.parse_stages)])
        elapsed = time.monotonic() - self.t0
        parts = [f"{elapsed:6.1f}s step {self.step}/{self.steps} {self.name:<17}"]
        parts.append(f"{bar(done, total)} {done}/{total} tasks" if total else " " * (WIDTH + 8))
        if self.events and self.parse_t0 is not None:
            took = self.parse_took or time.monotonic() - self.parse_t0
            parts.append(f"{self.events:,} events read")
            parts.append(f"{self.events / max(1e-3, took):,.0f} events/s")
        return " | ".join(parts)

    def _input_records(self, stage_id: int) -> int:
        store: Any = self.sc._jsc.sc().statusStore()  # type: ignore[union-attr]
        try:
            return int(store.lastStageAttempt(stage_id).inputRecords())
        except Exception:
            return 0

    def _draw(self, line: str) -> None:
        self._shown = line
        if not line:
            return
        if self.tty:
            width = shutil.get_terminal_size((120, 20)).columns - 1
            self.stream.write("\r" + line[:width].ljust(width))
            self.stream.flush()
            return
        now = time.monotonic()
        if now - self._last_plain >= PLAIN_EVERY:
            self._last_plain = now
            self.stream.write(line.rstrip() + "\n")
            self.stream.flush()

    def _clear(self) -> None:
        if self.tty and self._shown:
            width = shutil.get_terminal_size((120, 20)).columns - 1
            self.stream.write("\r" + " " * width + "\r")
            self.stream.flush()
