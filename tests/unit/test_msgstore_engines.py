"""The engine contract, run against LMDB and its in-memory twin alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.msgstore.engines.base import Engine, StoreError, StoreFull
from services.msgstore.engines.lmdb_engine import MIN_MAP_SIZE, LmdbEngine
from services.msgstore.engines.memory import MemoryEngine

DBS = ("a", "b")
MakeEngine = Callable[[int], Engine]


@pytest.fixture(params=["memory", "lmdb"])
def make_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeEngine]:
    made: list[Engine] = []

    def make(limit: int = 0) -> Engine:
        if request.param == "memory":
            engine: Engine = MemoryEngine(DBS, limit_bytes=limit)
        else:
            path = tmp_path / f"env{len(made)}"
            engine = LmdbEngine(path, DBS, map_size=limit or 64 * 1024 * 1024, ordered_sync=True)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


@pytest.fixture
def engine(make_engine: MakeEngine) -> Engine:
    return make_engine(0)


def _fill(engine: Engine, db: str, keys: list[bytes]) -> None:
    with engine.write() as txn:
        for k in keys:
            txn.put(db, k, b"v" + k)


def test_scan_is_in_key_order_and_half_open(engine: Engine) -> None:
    _fill(engine, "a", [b"c", b"a", b"b2", b"b1", b"d"])
    with engine.read() as txn:
        assert [k for k, _ in txn.scan("a", b"b", b"d")] == [b"b1", b"b2", b"c"]
        assert [k for k, _ in txn.scan("a", b"")] == [b"a", b"b1", b"b2", b"c", b"d"]
        assert [k for k, _ in txn.scan("a", b"b", b"d", reverse=True)] == [b"c", b"b2", b"b1"]
        assert [k for k, _ in txn.scan("a", b"", None, reverse=True)] == [
            b"d", b"c", b"b2", b"b1", b"a",
        ]  # fmt: skip
        assert [k for k, _ in txn.scan("a", b"x")] == []
        assert txn.first("a", b"b") == (b"b1", b"vb1")
        assert txn.last("a", b"a", b"c") == (b"b2", b"vb2")
        assert txn.first("a", b"e") is None
        assert txn.get("a", b"c") == b"vc"
        assert txn.get("b", b"c") is None  # sub-databases are separate


def test_reverse_scan_from_the_end_key_past_the_last(engine: Engine) -> None:
    _fill(engine, "a", [b"a", b"b"])
    with engine.read() as txn:
        assert [k for k, _ in txn.scan("a", b"a", b"zz", reverse=True)] == [b"b", b"a"]
        assert list(txn.scan("a", b"c", b"d", reverse=True)) == []


def test_pop_and_delete_range(engine: Engine) -> None:
    _fill(engine, "a", [b"k1", b"k2", b"k3", b"k4", b"z"])
    with engine.write() as txn:
        assert txn.pop("a", b"k1") == b"vk1"
        assert txn.pop("a", b"k1") is None
        assert txn.delete_range("a", b"k2", b"k4") == 2
        assert txn.delete_range("a", b"q", b"r") == 0
        assert txn.delete_range("a", b"k", b"zz") == 2  # runs off the end of the table
    with engine.read() as txn:
        assert list(txn.scan("a", b"")) == []


def test_aborted_write_leaves_no_trace(engine: Engine) -> None:
    _fill(engine, "a", [b"keep"])
    with pytest.raises(RuntimeError), engine.write() as txn:
        txn.put("a", b"new", b"1")
        txn.put("a", b"keep", b"changed")
        txn.pop("a", b"keep")
        raise RuntimeError("boom")
    with engine.read() as txn:
        assert list(txn.scan("a", b"")) == [(b"keep", b"vkeep")]


def test_a_full_store_raises_store_full_and_keeps_earlier_commits(
    make_engine: MakeEngine,
) -> None:
    engine = make_engine(1024 * 1024)
    committed = 0
    with pytest.raises(StoreFull, match="full"):
        for i in range(1000):
            with engine.write() as txn:
                txn.put("a", i.to_bytes(4, "big"), b"x" * 4000)
            committed += 1
    assert 0 < committed < 1000
    with engine.read() as reader:
        assert len(list(reader.scan("a", b""))) == committed
    txn = engine.begin_write()
    assert txn.fill() > 0.8
    txn.abort()


def test_fill_follows_live_data(make_engine: MakeEngine) -> None:
    engine = make_engine(1024 * 1024)
    with engine.write() as txn:
        empty = txn.fill()
        for i in range(100):
            txn.put("a", i.to_bytes(4, "big"), b"x" * 2000)
        grown = txn.fill()
        txn.delete_range("a", b"", b"\xff")
        assert txn.fill() < grown
    assert 0 <= empty < 0.05 < 0.15 < grown < 0.5
    txn = engine.begin_write()
    assert txn.fill() < 0.05
    txn.abort()


def test_sync_and_closed_engine(engine: Engine) -> None:
    _fill(engine, "a", [b"k"])
    engine.sync()
    engine.close()
    with pytest.raises(StoreError):
        engine.begin_write()
    with pytest.raises(StoreError):
        engine.sync()


def test_lmdb_data_survives_reopen(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path / "env", DBS, map_size=1 << 20, ordered_sync=False)
    _fill(engine, "b", [b"x"])
    engine.close()
    engine = LmdbEngine(tmp_path / "env", DBS, map_size=1 << 20, ordered_sync=False)
    with engine.read() as txn:
        assert txn.get("b", b"x") == b"vx"
    assert engine.info().limit_bytes == 1 << 20
    assert engine.info().used_bytes > 0
    engine.close()


def test_lmdb_map_size_has_a_floor(tmp_path: Path) -> None:
    engine = LmdbEngine(tmp_path / "env", DBS, map_size=4096, ordered_sync=True)
    assert engine.info().limit_bytes == MIN_MAP_SIZE
    engine.close()
