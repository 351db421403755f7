"""The writing end of the event-log spool: a service's events as records on disk.

Why: the listener logs three events per persistent QoS 1 message, and formatting them is
a real share of its cost per message, on the one core that bounds its throughput. With a
spool, a compiled emitter (``log.emitter``) appends a tuple instead of a line; a flush
pickles what is pending and appends it to a segment with one ``write(2)``; a converter
process (``services.common.logspool``), on another core, formats the records into the
same lines and appends them to ``<service>.jsonl``, as the service would have.

What stays true: a flush still puts the records in the OS before the listener writes to
a client socket, so a SIGKILLed service loses nothing it flushed.

Layout: each writing process has its own ``log_dir/spool/<service>.<pid>/``, holding
segments ``<time_ns>.seg`` (names sort by age), each a run of frames ``[u32 length]
[pickle of a list of str | tuple]``; a frame of length 0 closes a segment. ``meta``
names the node and service whose records these are; ``pos`` (how far conversion got)
and ``lock`` belong to the converter.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import struct
import subprocess
import sys
import time
from pathlib import Path

from services.common.logwriter import BufferedWriter

SEGMENT_SIZE = 16 * 1024 * 1024  # a writer starts a new segment past this size
MAX_SEGMENTS = 16  # more unconverted segments than this and the writer waits (see flush)
BEHIND_WAIT = 0.005  # s each flush waits while the converter is that far behind
STOP_WAIT = 10.0  # s a closing writer waits for its converter to finish
FRAME_HEADER = struct.Struct("<I")
_END = FRAME_HEADER.pack(0)


def _segment_name() -> str:
    return f"{time.time_ns():020d}.seg"


def spool_dir(log_dir: Path, service: str, pid: int) -> Path:
    return log_dir / "spool" / f"{service}.{pid}"


class SpoolWriter(BufferedWriter):
    """The writer of ``log.setup(spool=True)``: gathers lines and records as a
    ``JsonlWriter`` does, but writes them to the spool, and a converter process
    (started here, restarted if it dies) writes the ``.jsonl``."""

    def __init__(
        self,
        log_dir: Path,
        service: str,
        node: str,
        rotate_size: int,
        keep: int,
        stem: str = "",
    ) -> None:
        super().__init__()
        stem = stem or service  # the file's name: one per process of a service
        self.dir = spool_dir(log_dir, stem, os.getpid())
        self.dir.mkdir(parents=True, exist_ok=True)
        # Whose records these are, for whoever converts them if we and our converter die.
        (self.dir / "meta").write_text(json.dumps({"node": node, "service": service}))
        self._fd = -1
        self._size = 0
        self._behind = False
        self._open_segment()
        self._argv = [
            sys.executable, "-m", "services.common.logspool",
            "--spool", str(log_dir / "spool"),
            "--out", str(log_dir / f"{stem}.jsonl"),
            "--service", service,
            "--stem", stem,
            "--node", node,
            "--rotate-size", str(rotate_size),
            "--keep", str(keep),
            "--parent", str(os.getpid()),
        ]  # fmt: skip
        self._converter = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        # Its stdin is how it learns we are done: EOF when we close it or die. Ctrl-C
        # reaches it too (same process group), and a SIGINT while it was still starting
        # once killed it and stranded our last events in the spool: a supervised service
        # ignores SIGINT before it logs anything, so the converter inherits that from
        # its first instruction (and ignores it itself when we run alone).
        return subprocess.Popen(self._argv, stdin=subprocess.PIPE)

    def _open_segment(self) -> None:
        if self._fd >= 0:
            os.write(self._fd, _END)
            os.close(self._fd)
        path = self.dir / _segment_name()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        self._size = 0

    def _flush_locked(self) -> None:
        if not self.lines or self._fd < 0:
            return
        data = pickle.dumps(self._take(), 5)
        view = memoryview(FRAME_HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._size += len(data) + 4
        if self._size >= SEGMENT_SIZE:
            self._open_segment()
        if self._behind:
            # The converter runs at a lower priority; on a saturated node it could fall
            # behind for good and the spool fill the disk. Past MAX_SEGMENTS the service
            # slows down instead, as it would with a slow disk: the spool stays bounded.
            time.sleep(BEHIND_WAIT)

    def periodic(self) -> None:
        """From the log's flusher thread: flush, see whether the converter is far behind,
        and restart it if it died."""
        self.flush()
        self._behind = sum(1 for _ in self.dir.glob("*.seg")) > MAX_SEGMENTS
        if self._fd >= 0 and self._converter.poll() is not None:
            sys.stderr.write(
                f"ternmq: log converter exited ({self._converter.returncode}); restarting\n"
            )
            self._converter = self._spawn()

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            if self._fd >= 0:
                os.write(self._fd, _END)
                os.close(self._fd)
                self._fd = -1
        if self._converter.stdin is not None:
            self._converter.stdin.close()
        try:
            self._converter.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            sys.stderr.write("ternmq: the log converter is still converting; left running\n")
            return
        if not any(self.dir.glob("*.seg")):  # all converted: nothing to adopt later
            for leftover in self.dir.iterdir():
                leftover.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                self.dir.rmdir()
