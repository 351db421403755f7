"""In-memory twin of the LMDB engine, for tests of the layers above: same interface,
same all-or-nothing batches, nothing survives the process."""

from __future__ import annotations

from collections.abc import Iterator

from services.gossip.engines.base import StoreFull, WriteBatch


class MemoryEngine:
    def __init__(self, max_bytes: int = 0) -> None:
        self._records: dict[bytes, bytes] = {}
        self._meta: dict[bytes, bytes] = {}
        self.max_bytes = max_bytes  # 0: unlimited; else refuse batches past it (disk full)
        self.writes = 0

    def records(self) -> Iterator[bytes]:
        return iter([self._records[k] for k in sorted(self._records)])

    def meta(self, key: bytes) -> bytes | None:
        return self._meta.get(key)

    def write(self, batch: WriteBatch) -> None:
        records = dict(self._records)
        for k, v in batch.puts:
            records[k] = v
        for k in batch.deletes:
            records.pop(k, None)
        if self.max_bytes and sum(len(k) + len(v) for k, v in records.items()) > self.max_bytes:
            raise StoreFull(f"store would exceed {self.max_bytes} bytes")
        self._records = records
        self._meta.update(batch.meta)
        self.writes += 1

    def close(self) -> None:
        pass
