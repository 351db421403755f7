"""The converting end of the event-log spool: records made JSON lines, in order.

One converter process runs beside each spooling service (``spoolwriter.SpoolWriter``
starts it) and writes the lines the service would have written, with the same
formatter (``recordlines``, compiled). It runs on CPU the service leaves idle; the lines
reach the ``.jsonl`` up to a poll later than the service handed them over.

Crashes: when the service is SIGKILLed its converter sees it gone, converts the rest and
exits; if the converter dies too (the whole node killed), the next converter for that
service converts the leftovers first, in order (``adopt_orphans``), and ``ternmq log
convert`` does it for a node that will not start again. A frame torn by a crash
mid-write is dropped with a warning on stderr. ``pos`` in a writer's directory records
how far conversion got; ``lock`` is held by the converter at work, and a directory is
removed once its writer is gone and everything in it is converted.

    python -m services.common.logspool --spool DIR --out FILE --service S --node N --parent PID
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.common import log
from services.common.child_process import ignore_sigint
from services.common.events import EVENTS
from services.common.logwriter import JsonlWriter
from services.common.pids import alive
from services.common.recordlines import RecordLines
from services.common.spoolwriter import FRAME_HEADER, spool_dir

POLL = 0.05  # s between the converter's passes
NICE = 10  # the converter's niceness where SCHED_IDLE is refused
_POS_LEN = 20 + 4 + 1 + 20  # "<time_ns>.seg <offset>"


class Converter:
    """Turns the segments of one writer's spool directory into lines, in order, and
    deletes the segments it has finished. ``write`` takes the lines of each frame."""

    def __init__(
        self,
        spool: Path,
        writer_pid: int,
        write: Callable[[list[str]], None],
        envelope: tuple[str, str] | None = None,
    ) -> None:
        self.dir = spool
        self.writer_pid = writer_pid
        self.write = write
        self.envelope = envelope  # (node, service) of the lines; default this process's
        self._lines = RecordLines(self._event_of, self._fallback, log.dumps)
        self._pos_fd = os.open(spool / "pos", os.O_RDWR | os.O_CREAT, 0o644)
        raw = os.pread(self._pos_fd, _POS_LEN, 0).decode("ascii", "replace").split()
        self.segment, self.offset = (raw[0], int(raw[1])) if len(raw) == 2 else ("", 0)

    def close(self) -> None:
        os.close(self._pos_fd)

    def run_pass(self) -> int:
        """Convert what the segments hold beyond ``pos``; return the frames converted."""
        frames = 0
        names = sorted(p.name for p in self.dir.glob("*.seg"))
        for i, name in enumerate(names):
            if name < self.segment:  # finished earlier, deletion interrupted
                (self.dir / name).unlink(missing_ok=True)
                continue
            if name != self.segment:
                self.segment, self.offset = name, 0
            done, n = self._convert(name)
            frames += n
            writer_gone = i + 1 < len(names) or not alive(self.writer_pid)
            if not (done or writer_gone):
                break  # the newest segment, still being written
            if not done:
                size = (self.dir / name).stat().st_size
                if size > self.offset:
                    sys.stderr.write(
                        f"ternmq: {self.dir / name}: {size - self.offset} bytes of a frame "
                        "torn by a crash dropped\n"
                    )
            (self.dir / name).unlink(missing_ok=True)
        return frames

    def _convert(self, name: str) -> tuple[bool, int]:
        """Convert the complete frames of ``name`` from ``offset``; True when its end
        marker was reached."""
        with open(self.dir / name, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        at = frames = 0
        ended = False
        while len(data) - at >= 4:
            (n,) = FRAME_HEADER.unpack_from(data, at)
            if n == 0:
                ended = True
                at += 4
                break
            if len(data) - at - 4 < n:
                break  # not all written yet (or torn)
            self.write(self._lines.lines(pickle.loads(data[at + 4 : at + 4 + n])))
            at += 4 + n
            frames += 1
        if at:
            self.offset += at
            os.pwrite(self._pos_fd, f"{name} {self.offset:020d}\n".encode(), 0)
        return ended, frames

    def _event_of(self, key: str) -> tuple[str, dict[str, str]]:
        level, event = key.split(" ", 1)
        return log.record_head(level, event, self.envelope), dict(EVENTS[event].fields)

    def _fallback(self, record: tuple[Any, ...], exc: Exception) -> str:
        """A record whose fields do not fit its event (the inline emitter raises at the call
        site): keep the event, written as emit() writes any, and say so rather than crash
        in a loop."""
        key, t, *fields = record
        level, event = key.split(" ", 1)
        sys.stderr.write(f"ternmq: log converter: {event}: {exc}\n")
        named = dict(zip(EVENTS[event].fields, fields, strict=False))
        return log.format_line(level, event, named, t)


def converted(path: Path) -> bool:
    """Whether the converter of the writer directory ``path`` has caught up with what the
    writer has handed to the spool (a finished segment is deleted; ``pos`` tells the rest)."""
    segments = sorted(path.glob("*.seg"))
    if not segments:
        return True
    if len(segments) > 1:
        return False
    try:
        pos = (path / "pos").read_text().split()
    except OSError:
        return False
    newest = segments[-1]
    return len(pos) == 2 and pos[0] == newest.name and int(pos[1]) >= newest.stat().st_size


def _locked(path: Path) -> int | None:
    """An fd holding ``path``'s lock, or None when another converter holds it."""
    fd = os.open(path / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _envelope(path: Path) -> tuple[str, str] | None:
    """The (node, service) a writer recorded in its directory."""
    try:
        meta = json.loads((path / "meta").read_text())
        return str(meta["node"]), str(meta["service"])
    except (OSError, ValueError, KeyError):
        return None


def drain(path: Path, writer_pid: int, write: Callable[[list[str]], None]) -> None:
    """Convert everything in a dead writer's directory and remove it."""
    converter = Converter(path, writer_pid, write, _envelope(path))
    while converter.run_pass():
        pass
    converter.close()
    for leftover in path.iterdir():
        leftover.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.rmdir()


def adopt_orphans(spool: Path, service: str, write: Callable[[list[str]], None]) -> None:
    """Convert the directories of ``service``'s writers that died with their converter."""
    for path in sorted(spool.glob(f"{service}.*"), key=lambda p: p.stat().st_mtime):
        pid = int(path.suffix[1:]) if path.suffix[1:].isdigit() else 0
        if not pid or alive(pid):
            continue
        fd = _locked(path)
        if fd is None:
            continue  # its own converter is still at it
        try:
            drain(path, pid, write)
        finally:
            os.close(fd)


def convert_leftovers(log_dir: Path) -> dict[str, int]:
    """Convert what the dead writers under ``log_dir/spool`` left (a node killed hard and
    not started again) into their ``.jsonl`` files; lines written per service. A spool
    whose writer still runs is left to its converter."""
    written: dict[str, int] = {}
    for path in sorted((log_dir / "spool").glob("*.*")):
        service = path.name.rsplit(".", 1)[0]
        if service in written:
            continue
        out = JsonlWriter(log_dir / f"{service}.jsonl", 0, 1)

        def write(lines: list[str], service: str = service, out: JsonlWriter = out) -> None:
            written[service] += len(lines)
            out.lines.extend(lines)
            out.flush()

        written[service] = 0
        adopt_orphans(log_dir / "spool", service, write)
        out.close()
    return written


def _background() -> None:
    """Run only on CPU the broker leaves idle: SCHED_IDLE, or nice 10 where it is refused.

    The spool absorbs a burst and its bound (``spoolwriter.MAX_SEGMENTS``) throttles the
    writer if the converter falls that far behind, so a starved converter delays lines,
    never loses them. Nice alone is not enough: on a machine with as few cores as services,
    a niced converter still takes a core from the msgstore at its wake-ups
    (docs/benchmarks.md).
    """
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except OSError as exc:  # a sandbox may refuse it; nice is the next best thing
        print(f"logspool: SCHED_IDLE refused ({exc}), running at nice {NICE}", file=sys.stderr)
        os.nice(NICE)


def _foreground() -> None:
    """Told to stop: finish at normal priority. At SCHED_IDLE, on a machine kept busy,
    the last pass and the close got so little CPU that a node's stop (or CI's test of
    it) waited more than 30 s for the converter to exit."""
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError as exc:  # not allowed back (nice fallback, or RLIMIT_NICE): it still ends
        print(f"logspool: normal priority refused ({exc}), stopping at idle", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spool", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--service", required=True)
    parser.add_argument("--stem", default="", help="the spool's and log file's name")
    parser.add_argument("--node", required=True)
    parser.add_argument("--rotate-size", type=int, default=100 * 1024 * 1024)
    parser.add_argument("--keep", type=int, default=10)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    _background()
    log.setup(args.service, args.node, None, console="off")  # the lines' envelope
    stopping = threading.Event()

    def on_term(*_: object) -> None:
        stopping.set()
        _foreground()

    signal.signal(signal.SIGTERM, on_term)

    def watch_writer() -> None:  # EOF: the writer closed the spool or died
        # Raw reads: a daemon thread blocked in ``sys.stdin.buffer.read`` holds the
        # buffer's lock, and an exit by SIGTERM then aborts the interpreter's shutdown
        # ("could not acquire lock for <stdin> at interpreter shutdown").
        while os.read(0, 65536):
            pass
        stopping.set()

    threading.Thread(target=watch_writer, daemon=True).start()
    out = JsonlWriter(args.out, args.rotate_size, args.keep)

    def write(lines: list[str]) -> None:
        out.lines.extend(lines)
        out.flush()

    stem = args.stem or args.service
    own = spool_dir(args.spool.parent, stem, args.parent)
    # Locked first: a writer dead before this line must not look like an orphan to
    # adopt_orphans, which would drain and remove the directory from under us.
    lock_fd = _locked(own)
    if lock_fd is None:  # a restarted converter while the one before still runs
        return 0
    adopt_orphans(args.spool, stem, write)
    converter = Converter(own, args.parent, write, (args.node, args.service))
    while True:
        # Read before the pass: the pass after the service went away sees all it wrote.
        leaving = stopping.is_set()
        converted = converter.run_pass()
        if leaving and not converted:
            break
        if not converted:
            stopping.wait(POLL)
    if not alive(args.parent):
        drain(own, args.parent, write)  # nothing is left to convert; removes the directory
    converter.close()
    out.close()
    os.close(lock_fd)
    return 0


if __name__ == "__main__":
    # Its parent closes its stdin to stop it; a Ctrl-C must not end it first. A
    # supervised parent already ignores SIGINT and we inherit that from the start.
    ignore_sigint()
    raise SystemExit(main())
