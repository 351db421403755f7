"""Sortable binary keys: every key the message store writes is built here.

Theory of operation. A session (mountpoint, client id) is encoded so that byte order
equals the order of the (mountpoint, client id) pairs and no session's encoding is a
prefix of another's. Each string is written as UTF-8 with ``00`` escaped as ``00 FF``
and ends with the terminator ``00 01``; UTF-8 never contains ``FF``, and ``00`` is
always followed by ``01`` or ``FF``, so the terminator cannot be confused with data or
with the bytes that follow it. A queue's entries and marks hang off that prefix:

* meta   ``S``                          -> the queue's state record
* entry  ``S + seq (8 bytes, big-endian)`` -> the stored message
* mark   ``S + kind (1 byte) + id (8 bytes, big-endian)`` -> b""

Worked example: ``session("", "c1")`` is ``00 01 63 31 00 01``; entry 5 of that queue is
``00 01 63 31 00 01 00 00 00 00 00 00 00 05``. Big-endian sequence numbers make
LMDB's byte order the log order, so a range scan from ``entry(S, acked + 1)`` reads
the queue head first, and ``[S, prefix_end(S))`` covers exactly one queue.
"""

from __future__ import annotations

import struct
from functools import lru_cache

_TERM = b"\x00\x01"
_ESC = b"\x00\xff"
_U64 = struct.Struct(">Q")
_MARK = struct.Struct(">BQ")

SEQ_MAX = 2**64 - 1
# LMDB refuses keys over 511 bytes; a session leaves room for the 9-byte suffixes.
MAX_SESSION_BYTES = 500


class KeyTooLong(ValueError):
    """The session's encoding does not fit in a store key."""


def _enc(text: str) -> bytes:
    return text.encode("utf-8").replace(b"\x00", _ESC) + _TERM


@lru_cache(maxsize=65536)
def session(mountpoint: str, client_id: str) -> bytes:
    """The queue prefix of a session; raises :class:`KeyTooLong` past the store's limit."""
    key = _enc(mountpoint) + _enc(client_id)
    if len(key) > MAX_SESSION_BYTES:
        raise KeyTooLong(f"session key of {len(key)} bytes exceeds {MAX_SESSION_BYTES}")
    return key


def _dec(key: bytes, pos: int) -> tuple[str, int]:
    out = bytearray()
    while True:
        nul = key.index(b"\x00", pos)
        out += key[pos:nul]
        marker = key[nul + 1 : nul + 2]
        if marker == b"\x01":
            return out.decode("utf-8"), nul + 2
        if marker != b"\xff":
            raise ValueError(f"malformed session key {key!r}")
        out.append(0)
        pos = nul + 2


def split_session(key: bytes) -> tuple[str, str]:
    """(mountpoint, client id) of a key that starts with a session prefix."""
    mountpoint, pos = _dec(key, 0)
    client_id, _ = _dec(key, pos)
    return mountpoint, client_id


def entry(sess: bytes, seq: int) -> bytes:
    return sess + _U64.pack(seq)


def seq_of(entry_key: bytes) -> int:
    """The sequence number at the end of an entry key."""
    seq: int = _U64.unpack_from(entry_key, len(entry_key) - 8)[0]
    return seq


def entries_after(sess: bytes, after_seq: int) -> tuple[bytes, bytes]:
    """The key range ``[start, end)`` of entries with ``seq > after_seq``."""
    if after_seq >= SEQ_MAX:
        end = prefix_end(sess)
        return end, end
    return entry(sess, after_seq + 1), prefix_end(sess)


def mark(sess: bytes, kind: int, ident: int) -> bytes:
    return sess + _MARK.pack(kind, ident)


def mark_of(mark_key: bytes) -> tuple[int, int]:
    """(kind, id) at the end of a mark key."""
    kind, ident = _MARK.unpack_from(mark_key, len(mark_key) - _MARK.size)
    return int(kind), int(ident)


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key above every key that starts with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        raise ValueError("no key follows an all-0xFF prefix")
    return stripped[:-1] + bytes([stripped[-1] + 1])
