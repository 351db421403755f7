"""The in-memory twin of the LMDB engine: same contract, nothing on disk.

``limit_bytes`` plays LMDB's map size (keys plus values): a batch that would pass it
raises :class:`StoreError` and changes nothing, as a full map does. Passing one
``MemoryTable`` to several engines plays a reopened store.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from services.registry.engines.base import Change, Engine, StoreError

MemoryTable = dict[bytes, bytes]


class MemoryEngine(Engine):
    def __init__(self, table: MemoryTable | None = None, limit_bytes: int = 0) -> None:
        self.table: MemoryTable = {} if table is None else table
        self.limit_bytes = limit_bytes  # 0: unlimited
        self._closed = False
        self._writing = threading.Lock()  # the contract: writes from several threads

    def items(self) -> list[tuple[bytes, bytes]]:
        self._check()
        return sorted(self.table.items())

    def write(self, changes: Sequence[Change]) -> None:
        with self._writing:
            self._write(changes)

    def _write(self, changes: Sequence[Change]) -> None:
        self._check()
        after = dict(self.table)
        for key, value in changes:
            if value is None:
                after.pop(key, None)
            else:
                after[key] = value
        if self.limit_bytes and sum(len(k) + len(v) for k, v in after.items()) > self.limit_bytes:
            raise StoreError(f"cannot write the session table: over {self.limit_bytes} bytes")
        self.table.clear()
        self.table.update(after)

    def close(self) -> None:
        self._closed = True

    def _check(self) -> None:
        if self._closed:
            raise StoreError("the session table is closed")
