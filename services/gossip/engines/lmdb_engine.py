"""The LMDB engine: the only module that imports ``lmdb``.

Theory of operation
-------------------
One environment in ``data_dir/gossip/`` with two named databases: ``records`` (engine
key -> encoded record, see ``codec``) and ``meta`` (small values such as the dot
floor). Each :meth:`LmdbEngine.write` is one write transaction; the environment is
opened with ``sync`` and ``metasync`` on, so the commit returns after ``fsync`` — a
SIGKILL or power loss after ``write`` returns loses nothing. Grouping many Puts into one
batch is what keeps that affordable (one fsync per group, not per Put).

A full map (``map_size``) raises :class:`StoreFull` and leaves the store as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lmdb

from services.gossip.engines.base import StoreFull, WriteBatch


class LmdbEngine:
    def __init__(self, path: Path, map_size: int) -> None:
        """Open (or create) the store; :class:`OSError` with the path if that fails."""
        self.path = path
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._env = lmdb.open(
                str(path),
                map_size=map_size,
                max_dbs=2,
                subdir=True,
                sync=True,
                metasync=True,
                readahead=False,
                max_readers=16,
            )
            self._records = self._env.open_db(b"records")
            self._meta = self._env.open_db(b"meta")
        except lmdb.Error as exc:
            raise OSError(f"cannot open the metadata store in {path}: {exc}") from exc

    def records(self) -> Iterator[bytes]:
        with self._env.begin(db=self._records, buffers=False) as txn:
            # Materialised inside the transaction: values must not outlive it.
            values = [bytes(v) for _, v in txn.cursor()]
        return iter(values)

    def meta(self, key: bytes) -> bytes | None:
        with self._env.begin(db=self._meta) as txn:
            value = txn.get(key)
        return None if value is None else bytes(value)

    def write(self, batch: WriteBatch) -> None:
        try:
            with self._env.begin(write=True) as txn:
                for k, v in batch.puts:
                    txn.put(k, v, db=self._records)
                for k in batch.deletes:
                    txn.delete(k, db=self._records)
                for k, v in batch.meta.items():
                    txn.put(k, v, db=self._meta)
        except lmdb.MapFullError as exc:
            raise StoreFull(f"metadata store is full (gossip.map_size): {exc}") from exc

    def close(self) -> None:
        self._env.close()
