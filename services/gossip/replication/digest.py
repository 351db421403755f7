"""A bucketed digest of a metadata replica, for anti-entropy between nodes.

Theory of operation
-------------------
Every record is identified by its ``(prefix, key)`` and fingerprinted by a 64-bit hash
of its encoded state (``codec.encode_record``, which holds the prefix and key and is
canonical: DVV entries are sorted by node, values sit in dot order). Keys fall into
:data:`BUCKETS` buckets by a hash of ``(prefix, key)``; a bucket's digest is the XOR of its
records' fingerprints. XOR makes the digest incremental (a record that changes is
XORed out with its old fingerprint and in with its new one, O(1) per write) and
independent of insertion order, so two replicas with the same records have the same
digest whatever path brought them there.

Two nodes compare digests (``differing``); for each bucket that differs they send each
other every record of it, and each merges what it receives (``dvv.sync`` is a join, so
sending a record that is already known costs bandwidth, never correctness). After one
exchange in both directions the two replicas agree on those buckets, unless a write
came in meanwhile, which the next round picks up.

A collision (two different states with the same bucket digest) would hide a difference
until either record changes again: with 64-bit fingerprints it takes about 2**32 records
in one bucket before that is likely.

Worked example::

    d = Digest()
    d.put(("subs", b"k"), b"state-1")
    e = Digest()
    differing(d.buckets, e.buckets) == [bucket_of(("subs", b"k"))]
    e.put(("subs", b"k"), b"state-1")
    differing(d.buckets, e.buckets) == []
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

BUCKETS = 1024

Key = tuple[str, bytes]  # (prefix, key), as the store names a record


def bucket_of(key: Key) -> int:
    h = hashlib.blake2b(key[0].encode(), digest_size=8)
    h.update(b"\x00")
    h.update(key[1])
    return int.from_bytes(h.digest(), "little") % BUCKETS


def fingerprint(encoded: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(encoded, digest_size=8).digest(), "little")


class Digest:
    """The bucket digests of one replica, and which keys each bucket holds."""

    __slots__ = ("_keys", "_prints", "buckets")

    def __init__(self) -> None:
        self.buckets: list[int] = [0] * BUCKETS
        self._prints: dict[Key, int] = {}
        self._keys: list[set[Key]] = [set() for _ in range(BUCKETS)]

    def __len__(self) -> int:
        return len(self._prints)

    def put(self, key: Key, encoded: bytes) -> None:
        """The record of ``key`` is now ``encoded`` (new or changed)."""
        b = bucket_of(key)
        old = self._prints.get(key)
        new = fingerprint(encoded)
        if old is not None:
            self.buckets[b] ^= old
        else:
            self._keys[b].add(key)
        self.buckets[b] ^= new
        self._prints[key] = new

    def remove(self, key: Key) -> None:
        """The record of ``key`` was removed (a collected tombstone)."""
        old = self._prints.pop(key, None)
        if old is None:
            return
        b = bucket_of(key)
        self.buckets[b] ^= old
        self._keys[b].discard(key)

    def keys_in(self, buckets: Iterable[int]) -> list[Key]:
        """The keys held in these buckets, in a stable order."""
        out: list[Key] = []
        for b in buckets:
            if 0 <= b < BUCKETS:
                out.extend(sorted(self._keys[b]))
        return out


def differing(ours: Sequence[int], theirs: Sequence[int]) -> list[int]:
    """The buckets whose digests differ; a digest of the wrong length differs in all."""
    if len(theirs) != BUCKETS or len(ours) != BUCKETS:
        return list(range(BUCKETS))
    return [b for b in range(BUCKETS) if ours[b] != theirs[b]]
