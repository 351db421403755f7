"""The registry's journal engine on a real directory: whatever point a process dies at,
reopening gives every write that returned and nothing that did not, across torn records,
compactions interrupted at each step, and the import of an LMDB table."""

from __future__ import annotations

import os
import shutil
import struct
import threading
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.registry.engines.base import Change, StoreError
from services.registry.engines.journal_engine import (
    JournalEngine,
    decode_snapshot,
    encode_changes,
)
from services.registry.engines.lmdb_engine import LmdbEngine

MB = 1024 * 1024
KEYS = [b"\x00incarnation"] + [f"mp\0client-{i}".encode() for i in range(12)]

change = st.tuples(st.sampled_from(KEYS), st.none() | st.binary(min_size=0, max_size=300))
batch = st.lists(change, min_size=1, max_size=6)


def model_after(table: dict[bytes, bytes], changes: list[Change]) -> dict[bytes, bytes]:
    out = dict(table)
    for key, value in changes:
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def crash(engine: JournalEngine) -> None:
    """What a SIGKILL leaves: the files as they are, nothing flushed or tidied."""
    os.close(engine._fd)
    os.close(engine._lock)  # the kernel drops a dead process's lock
    engine._fd = engine._lock = -1


def tear(engine: JournalEngine, changes: list[Change], keep: int, flip: bool) -> None:
    """The record of ``changes`` half on disk when the process died: its first ``keep``
    bytes, or all of them with one byte wrong (a sector that did not make it)."""
    payload = encode_changes(changes)
    record = bytearray(struct.pack("<II", len(payload), zlib.crc32(payload)) + payload)
    if flip:
        record[8 + keep % len(payload)] ^= 0x5A
    else:
        record = record[: keep % len(record)]
    os.pwrite(engine._fd, bytes(record), engine._at)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lives=st.lists(
        st.tuples(
            st.lists(st.tuples(batch, st.booleans()), max_size=12),
            st.none() | st.tuples(batch, st.integers(0, 10_000), st.booleans()),
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_reopening_gives_exactly_the_writes_that_returned(
    tmp_path_factory: pytest.TempPathFactory,
    lives: list[tuple[list[tuple[list[Change], bool]], tuple[list[Change], int, bool] | None]],
) -> None:
    path = tmp_path_factory.mktemp("journal")
    model: dict[bytes, bytes] = {}
    for writes, torn in lives:
        engine = JournalEngine(path, 16 * MB, min_journal=64 * 1024)
        assert dict(engine.items()) == model
        for changes, compact_first in writes:
            if compact_first:  # as if the journal were full
                engine._capacity = engine._at
            engine.write(changes)
            model = model_after(model, changes)
        if torn is not None:
            changes, keep, flip = torn
            tear(engine, changes, keep, flip)
        crash(engine)
    engine = JournalEngine(path, 16 * MB)
    assert dict(engine.items()) == model
    engine.close()
    shutil.rmtree(path)


def test_a_record_written_over_a_longer_torn_one_is_read_back(tmp_path: Path) -> None:
    engine = JournalEngine(tmp_path, 16 * MB)
    engine.write([(KEYS[1], b"a")])
    tear(engine, [(KEYS[2], b"x" * 5000)], 4000, flip=False)
    crash(engine)
    engine = JournalEngine(tmp_path, 16 * MB)
    after = (tmp_path / f"journal.{engine._gen}").read_bytes()[engine._at :]
    assert after.count(0) == len(after)  # the torn bytes zeroed, not left for the CRC alone
    engine.write([(KEYS[3], b"b")])  # shorter than the garbage it overwrote
    crash(engine)
    engine = JournalEngine(tmp_path, 16 * MB)
    assert dict(engine.items()) == {KEYS[1]: b"a", KEYS[3]: b"b"}


def test_a_compaction_interrupted_before_its_rename_leaves_the_old_generation(
    tmp_path: Path,
) -> None:
    engine = JournalEngine(tmp_path, 16 * MB, min_journal=MB)
    engine.write([(KEYS[1], b"kept")])
    gen = engine._gen
    crash(engine)
    (tmp_path / f"journal.{gen + 1}").write_bytes(bytes(1000))  # its zeros, half written
    (tmp_path / "table.snap.tmp").write_bytes(b"half a snapshot")
    engine = JournalEngine(tmp_path, 16 * MB)
    assert dict(engine.items()) == {KEYS[1]: b"kept"}
    assert engine._gen == gen
    assert not (tmp_path / f"journal.{gen + 1}").exists()


def test_a_compaction_interrupted_after_its_rename_keeps_the_new_generation(
    tmp_path: Path,
) -> None:
    engine = JournalEngine(tmp_path, 16 * MB, min_journal=MB)
    engine.write([(KEYS[1], b"one")])
    engine._capacity = engine._at + 8  # the next write compacts first
    engine.write([(KEYS[2], b"two")])
    gen = engine._gen
    crash(engine)
    (tmp_path / f"journal.{gen - 1}").write_bytes(bytes(100))  # the old one, not yet removed
    engine = JournalEngine(tmp_path, 16 * MB)
    assert dict(engine.items()) == {KEYS[1]: b"one", KEYS[2]: b"two"}
    assert sorted(p.name for p in tmp_path.glob("journal.*")) == [f"journal.{gen}"]
    engine._compact()  # dies right after this one's rename: nothing written to its journal
    crash(engine)
    os.unlink(tmp_path / f"journal.{gen + 1}")  # and its journal never made it to disk
    engine = JournalEngine(tmp_path, 16 * MB)
    assert dict(engine.items()) == {KEYS[1]: b"one", KEYS[2]: b"two"}
    engine.write([(KEYS[3], b"three")])
    crash(engine)
    assert dict(JournalEngine(tmp_path, 16 * MB).items()) == {
        KEYS[1]: b"one",
        KEYS[2]: b"two",
        KEYS[3]: b"three",
    }


def test_a_table_of_the_lmdb_engine_is_imported_once(tmp_path: Path) -> None:
    old = LmdbEngine(tmp_path, 16 * MB)
    old.write([(KEYS[1], b"from lmdb"), (KEYS[2], b"too")])
    old.close()
    engine = JournalEngine(tmp_path, 16 * MB)
    assert dict(engine.items()) == {KEYS[1]: b"from lmdb", KEYS[2]: b"too"}
    assert not (tmp_path / "data.mdb").exists()
    assert (tmp_path / "data.mdb.imported").exists()
    engine.write([(KEYS[2], None)])
    engine.close()
    assert dict(JournalEngine(tmp_path, 16 * MB).items()) == {KEYS[1]: b"from lmdb"}


def test_an_import_interrupted_before_the_rename_is_not_imported_again(tmp_path: Path) -> None:
    old = LmdbEngine(tmp_path, 16 * MB)
    old.write([(KEYS[1], b"from lmdb")])
    old.close()
    engine = JournalEngine(tmp_path, 16 * MB)
    engine.write([(KEYS[1], b"changed since")])
    crash(engine)
    os.replace(tmp_path / "data.mdb.imported", tmp_path / "data.mdb")  # the rename never made it
    engine = JournalEngine(tmp_path, 16 * MB)
    assert dict(engine.items()) == {KEYS[1]: b"changed since"}  # the snapshot wins
    assert not (tmp_path / "data.mdb").exists()


def test_a_damaged_snapshot_stops_the_start(tmp_path: Path) -> None:
    engine = JournalEngine(tmp_path, 16 * MB)
    engine.write([(KEYS[1], b"x")])
    engine._capacity = 0  # compacts: the value is now in the snapshot
    engine.write([(KEYS[2], b"y")])
    engine.close()
    data = bytearray((tmp_path / "table.snap").read_bytes())
    assert decode_snapshot(bytes(data))[1] == {KEYS[1]: b"x"}
    data[20] ^= 1
    (tmp_path / "table.snap").write_bytes(bytes(data))
    with pytest.raises(StoreError, match="damaged"):
        JournalEngine(tmp_path, 16 * MB)


def test_a_write_past_the_size_limit_changes_nothing(tmp_path: Path) -> None:
    engine = JournalEngine(tmp_path, 10_000)
    engine.write([(KEYS[1], b"a" * 5000)])
    with pytest.raises(StoreError, match="over 10000 bytes"):
        engine.write([(KEYS[2], b"b" * 5000)])
    engine.write([(KEYS[1], b"c" * 9000)])  # replaces: fits
    engine.close()
    assert dict(JournalEngine(tmp_path, 10_000).items()) == {KEYS[1]: b"c" * 9000}


def test_a_second_opener_of_the_directory_is_refused(tmp_path: Path) -> None:
    engine = JournalEngine(tmp_path, MB)
    with pytest.raises(StoreError, match="in use by another process"):
        JournalEngine(tmp_path, MB)
    engine.close()
    JournalEngine(tmp_path, MB).close()


def test_a_batch_that_writes_one_key_twice_is_sized_by_its_last_value(tmp_path: Path) -> None:
    engine = JournalEngine(tmp_path, 10_000)
    engine.write([(KEYS[1], b"a" * 9000), (KEYS[1], None), (KEYS[1], b"b" * 9000)])
    with pytest.raises(StoreError, match="over"):
        engine.write([(KEYS[2], b"c" * 500), (KEYS[2], b"d" * 1500)])
    engine.close()
    assert dict(JournalEngine(tmp_path, 10_000).items()) == {KEYS[1]: b"b" * 9000}


def test_writes_from_several_threads_at_once_are_all_kept(tmp_path: Path) -> None:
    engine = JournalEngine(tmp_path, 16 * MB, min_journal=64 * 1024)  # compactions too

    def writer(t: int) -> None:
        for i in range(150):
            engine.write([(f"t{t}-{i}".encode(), b"v" * 100)])

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    crash(engine)
    kept = dict(JournalEngine(tmp_path, 16 * MB).items())
    assert kept == {f"t{t}-{i}".encode(): b"v" * 100 for t in range(6) for i in range(150)}


def test_a_closed_engine_refuses(tmp_path: Path) -> None:
    engine = JournalEngine(tmp_path, MB)
    engine.close()
    with pytest.raises(StoreError, match="closed"):
        engine.write([(KEYS[1], b"a")])
