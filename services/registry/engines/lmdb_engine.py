"""The LMDB engine: the only module of the registry that imports ``lmdb``.

One environment (``data_dir/registry``) with ``sync`` and ``metasync`` on, so a write
returns after fsync: an epoch reservation or a session record acknowledged to a caller
survives a SIGKILL and a power loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import lmdb

from services.registry.engines.base import Change, Engine, StoreError


class LmdbEngine(Engine):
    def __init__(self, path: Path, map_size: int) -> None:
        try:
            path.mkdir(parents=True, exist_ok=True)
            self._env = lmdb.open(
                str(path),
                map_size=map_size,
                subdir=True,
                sync=True,
                metasync=True,
                max_dbs=0,
                readahead=False,
            )
        except (lmdb.Error, OSError) as exc:
            raise StoreError(f"cannot open {path}: {exc}") from exc

    def items(self) -> list[tuple[bytes, bytes]]:
        try:
            with self._env.begin() as txn:
                return [(bytes(k), bytes(v)) for k, v in txn.cursor()]
        except lmdb.Error as exc:
            raise StoreError(f"cannot read the session table: {exc}") from exc

    def write(self, changes: Sequence[Change]) -> None:
        try:
            with self._env.begin(write=True) as txn:
                for key, value in changes:
                    if value is None:
                        txn.delete(key)
                    else:
                        txn.put(key, value)
        except lmdb.Error as exc:
            raise StoreError(f"cannot write the session table: {exc}") from exc

    def close(self) -> None:
        self._env.close()
