"""What earlier runs read: the manifest that makes ``etl run`` incremental.

Theory of operation. Every run reads *chunks*: a byte range ``[start, end)`` of one log
file, cut at a line end. The manifest (``OUT/_etl_manifest.json``) records per file its
identity (device, inode, a hash of its first bytes), how far it was read, and the
chunks read from it; per chunk its line counts (the ``ingest`` table is their sum) and
the dates of its events. A file is recognised by its inode, not its name, so a rotation
(``x.jsonl`` renamed ``x.jsonl.1``, a new ``x.jsonl`` started) costs only the bytes
appended since: the renamed file's tail and the new file. Chunk ids grow across runs, and
a file's chain (its path with ``.N`` dropped) never changes under rotation, so sorting
chunks by (chain, id) orders lines exactly as a full run's (chain, rotation, offset) does.

A file whose first bytes changed, or that shrank, was replaced or truncated in place
(copytruncate): the plan asks for a full run. A file that disappeared (the oldest
rotation pruned) takes its chunks out of the tables, since a full run would not see it.
The live file (no ``.N``) is consumed up to its last newline. What follows (a line being
written, or the last line of a writer that crashed) is read as a *provisional* chunk:
counted like a full run would count it, and taken out again by the next run, which reads
those bytes once more with whatever was appended to them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from spark_pipeline.extract import rotation_of

# 2: the staged Parquet carries the corrupt-record column (null in every kept line).
FORMAT: Final = 2
NAME: Final = "_etl_manifest.json"
HEAD_BYTES: Final = 4096


@dataclass(slots=True)
class ChunkInfo:
    """One byte range read by one run, and what its lines held."""

    id: int
    chain: str
    path: str
    start: int
    end: int
    lines: int = 0
    events: int = 0
    corrupt_lines: int = 0
    unknown_events: int = 0
    schema_versions: list[str] = field(default_factory=list)
    first_us: int | None = None
    last_us: int | None = None
    dates: list[str] = field(default_factory=list)
    provisional: bool = False


@dataclass(slots=True)
class FileState:
    """A log file as last read: identity, bytes consumed, chunks taken from it."""

    path: str
    dev: int
    ino: int
    offset: int
    head_len: int
    head_sha: str
    chunks: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Manifest:
    """Everything a later run needs to read only what is new."""

    format: int = FORMAT
    columns: list[str] = field(default_factory=list)
    complete: bool = False
    next_chunk: int = 0
    files: list[FileState] = field(default_factory=list)
    chunks: dict[int, ChunkInfo] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["chunks"] = [asdict(c) for c in self.chunks.values()]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Manifest:
        chunks = {int(c["id"]): ChunkInfo(**c) for c in d.get("chunks", [])}
        files = [FileState(**f) for f in d.get("files", [])]
        return cls(
            format=int(d.get("format", 0)),
            columns=list(d.get("columns", [])),
            complete=bool(d.get("complete", False)),
            next_chunk=int(d.get("next_chunk", 0)),
            files=files,
            chunks=chunks,
        )


def load(out: Path) -> Manifest | None:
    """The manifest under ``out``, or None (no earlier run, or unreadable)."""
    try:
        return Manifest.from_json(json.loads((out / NAME).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def save(out: Path, manifest: Manifest) -> None:
    """Write atomically (rename), so a crash leaves the old manifest or the new one."""
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (NAME + ".tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=1), encoding="utf-8")
    os.replace(tmp, out / NAME)


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold ``OUT/_etl.lock`` for a run: two runs into one ``--out`` would mix chunks."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "_etl.lock").open("w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another etl run is writing {out}") from None
        yield


def chain_of(path: Path) -> str:
    """The live file's path for any file of its rotation chain."""
    rot = rotation_of(path)
    return str(path.with_name(rot[0])) if rot else str(path)


def _head_sha(path: Path, length: int) -> str:
    with path.open("rb") as fh:
        return hashlib.sha256(fh.read(length)).hexdigest()


def last_line_end(path: Path, size: int) -> int:
    """Offset just past the last ``\\n`` in the first ``size`` bytes (0 if none)."""
    block = 65536
    with path.open("rb") as fh:
        pos = size
        while pos > 0:
            lo = max(0, pos - block)
            fh.seek(lo)
            buf = fh.read(pos - lo)
            i = buf.rfind(b"\n")
            if i >= 0:
                return lo + i + 1
            pos = lo
    return 0


@dataclass(slots=True)
class Plan:
    """What this run reads and drops; ``full``: start over (``full_reason`` says why)."""

    new: list[ChunkInfo] = field(default_factory=list)
    removed: list[ChunkInfo] = field(default_factory=list)
    files: list[FileState] = field(default_factory=list)
    full_reason: str | None = None
    full: bool = False

    @property
    def affected_dates(self) -> set[str]:
        """Dates whose time-bucketed rows can change: those of new or dropped lines."""
        return {d for c in (*self.new, *self.removed) for d in c.dates}


def plan(files: list[Path], previous: Manifest | None, columns: list[str]) -> Plan:
    """Compare ``files`` (``find_log_files`` order) with ``previous``; chunks to read."""
    if previous is None:
        return _plan_all(files, Manifest(columns=columns), None)
    why = None
    if previous.format != FORMAT or previous.columns != columns:
        why = "the staged columns changed"
    elif not previous.complete:
        why = "the previous run did not finish"
    if why:
        return _plan_all(files, Manifest(columns=columns), why)
    by_ino = {(f.dev, f.ino): f for f in previous.files}
    result = Plan(removed=[c for c in previous.chunks.values() if c.provisional])
    next_id = previous.next_chunk
    seen: set[tuple[int, int]] = set()
    for path in files:
        st = path.stat()
        key = (st.st_dev, st.st_ino)
        seen.add(key)
        old = by_ino.get(key)
        end = _readable_end(path, st.st_size)
        if old is not None:
            if old.chunks and previous.chunks[old.chunks[0]].chain != chain_of(path):
                why = f"{path} moved to another rotation chain"
                return _plan_all(files, Manifest(columns=columns), why)
            if end < old.offset or _head_sha(path, old.head_len) != old.head_sha:
                why = f"{path} was truncated or replaced since the last run"
                return _plan_all(files, Manifest(columns=columns), why)
        start = old.offset if old is not None else 0
        chunks = list(old.chunks) if old is not None else []
        if end > start:
            chunk = ChunkInfo(next_id, chain_of(path), str(path), start, end)
            next_id += 1
            result.new.append(chunk)
            chunks.append(chunk.id)
        if st.st_size > max(end, start):
            tail = ChunkInfo(next_id, chain_of(path), str(path), max(end, start), st.st_size)
            tail.provisional = True
            next_id += 1
            result.new.append(tail)
        head_len = min(end, HEAD_BYTES)
        keep_head = old is not None and old.head_len >= head_len
        result.files.append(
            FileState(
                str(path),
                st.st_dev,
                st.st_ino,
                max(end, start),
                old.head_len if old is not None and keep_head else head_len,
                old.head_sha if old is not None and keep_head else _head_sha(path, head_len),
                chunks,
            )
        )
    for f in previous.files:
        if (f.dev, f.ino) not in seen:
            result.removed.extend(previous.chunks[c] for c in f.chunks)
    return result


def _readable_end(path: Path, size: int) -> int:
    """Rotated files are final and consumed whole; the live one up to its last newline."""
    rot = rotation_of(path)
    return size if rot is not None and rot[1] > 0 else last_line_end(path, size)


def _plan_all(files: list[Path], empty: Manifest, reason: str | None) -> Plan:
    """Every file from its first byte; ``reason`` says why a full run was forced."""
    empty.complete = True
    result = plan(files, empty, empty.columns)
    result.full_reason, result.full = reason, True
    return result


def next_manifest(previous: Manifest | None, p: Plan, columns: list[str]) -> Manifest:
    """The manifest after ``p`` ran: its files, the chunks still present, the new ones."""
    chunks = {} if previous is None or p.full else dict(previous.chunks)
    for c in p.removed:
        chunks.pop(c.id, None)
    for c in p.new:
        chunks[c.id] = c
    next_id = max([c.id + 1 for c in chunks.values()] + [0])
    if previous is not None and not p.full:
        next_id = max(next_id, previous.next_chunk)
    return Manifest(FORMAT, columns, False, next_id, p.files, chunks)
