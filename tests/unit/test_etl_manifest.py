"""The incremental run's plan: which byte ranges of which log files are new."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_pipeline import manifest
from spark_pipeline.extract import find_log_files

COLS = ["ts", "event"]


def _ran(files: list[Path], prev: manifest.Manifest | None) -> manifest.Manifest:
    """The manifest after a run of ``plan`` that succeeded."""
    p = manifest.plan(files, prev, COLS)
    state = manifest.next_manifest(prev, p, COLS)
    state.complete = True
    return state


def test_rotation_reads_only_the_renamed_files_tail_and_the_new_file(tmp_path: Path) -> None:
    live = tmp_path / "n1" / "listener.jsonl"
    live.parent.mkdir()
    live.write_bytes(b'{"a":1}\n{"a":2}\n{"a":')  # the last line is still being written
    first = manifest.plan(find_log_files(tmp_path), None, COLS)
    assert first.full
    assert [(c.start, c.end, c.provisional) for c in first.new] == [(0, 16, False), (16, 21, True)]
    state = _ran(find_log_files(tmp_path), None)

    with live.open("ab") as fh:
        fh.write(b'3}\n{"a":4}\n')
    live.rename(live.with_name("listener.jsonl.1"))
    live.write_bytes(b'{"a":5}\n')
    p = manifest.plan(find_log_files(tmp_path), state, COLS)
    assert not p.full
    assert [c.id for c in p.removed] == [1], "the half line is taken out, then read again"
    got = [(Path(c.path).name, c.start, c.end, c.chain) for c in p.new]
    assert got == [
        ("listener.jsonl.1", 16, 32, str(live)),
        ("listener.jsonl", 0, 8, str(live)),
    ]
    assert [c.id for c in p.new] == [2, 3], "chunk ids keep growing across runs"
    state = _ran(find_log_files(tmp_path), state)
    assert manifest.plan(find_log_files(tmp_path), state, COLS).new == []

    live.with_name("listener.jsonl.1").unlink()
    p = manifest.plan(find_log_files(tmp_path), state, COLS)
    assert sorted(c.id for c in p.removed) == [0, 2] and p.new == []


def test_truncated_or_unfinished_runs_are_read_again_in_full(tmp_path: Path) -> None:
    live = tmp_path / "x.jsonl"
    live.write_bytes(b'{"a":1}\n{"a":2}\n')
    state = _ran([live], None)
    live.write_bytes(b'{"b":1}\n')  # copytruncate: same inode, shorter
    p = manifest.plan([live], state, COLS)
    assert p.full and p.full_reason and "truncated" in p.full_reason
    live.write_bytes(b'{"b":1}\n{"b":2}\n{"b":3}\n')  # same inode, other first bytes
    p = manifest.plan([live], state, COLS)
    assert p.full and [(c.start, c.end) for c in p.new] == [(0, 24)]

    state.complete = False
    p = manifest.plan([live], state, COLS)
    assert p.full and p.full_reason == "the previous run did not finish"


def test_manifest_round_trips(tmp_path: Path) -> None:
    live = tmp_path / "x.jsonl"
    live.write_bytes(b'{"a":1}\n')
    state = _ran([live], None)
    state.chunks[0].dates = ["2026-11-22"]
    manifest.save(tmp_path / "out", state)
    back = manifest.load(tmp_path / "out")
    assert back == state
    assert manifest.load(tmp_path / "nowhere") is None


def test_one_run_at_a_time_per_output(tmp_path: Path) -> None:
    with (
        manifest.locked(tmp_path / "out"),
        pytest.raises(RuntimeError, match="another etl run"),
        manifest.locked(tmp_path / "out"),
    ):
        pass
    with manifest.locked(tmp_path / "out"):  # released after the run
        pass
