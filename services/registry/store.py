"""The registry's durable session table: session records and the epoch reservation.

Why: epochs must never go backwards, across a SIGKILL too, and persistent sessions must
outlive the process. Every change to a durable session (``Session.durable``: persistent, or
holding a queue) is written through before the RPC that caused it answers; the
:class:`services.registry.committer.Committer` groups those writes. A clean session is
never written: it cannot outlive a registry restart anyway (the listeners drop their
connections when the registry comes back), so a plain CONNECT costs no fsync.

Layout (items of the engine, :mod:`services.registry.engines`):
  ``s`` + BLAKE2b-128(mountpoint \\0 client_id) -> ``SessionInfo`` (the key is inside;
  hashing keeps keys under LMDB's 511-byte limit whatever the client id's length)
  ``m:epoch`` -> the epoch reservation, 8 bytes big-endian: every epoch issued is at or
  below it, so a restart continues above it without a write per registration.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from services.common.session_key import SessionKey
from services.pb import registry_pb2
from services.registry.engines.base import Change, Engine
from services.registry.leadership import key_bytes
from services.registry.records import from_info, to_info
from services.registry.sessions import Session

_EPOCH_KEY = b"m:epoch"


@dataclass(frozen=True, slots=True)
class Put:
    session: Session


@dataclass(frozen=True, slots=True)
class Delete:
    key: SessionKey


@dataclass(frozen=True, slots=True)
class Reserve:
    epoch: int


Op = Put | Delete | Reserve


def _db_key(key: SessionKey) -> bytes:
    return b"s" + hashlib.blake2b(key_bytes(key), digest_size=16).digest()


def _change(op: Op) -> Change:
    if isinstance(op, Put):
        return _db_key(op.session.key), to_info(op.session).SerializeToString()
    if isinstance(op, Delete):
        return _db_key(op.key), None
    return _EPOCH_KEY, op.epoch.to_bytes(8, "big")


class SessionStore:
    """Sessions over an engine; call :meth:`apply` from one thread at a time."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def load(self) -> tuple[list[Session], int]:
        """Every stored session and the epoch reservation."""
        sessions = []
        reserved = 0
        for k, v in self.engine.items():
            if k == _EPOCH_KEY:
                reserved = int.from_bytes(v, "big")
            elif k[:1] == b"s":
                sessions.append(from_info(registry_pb2.SessionInfo.FromString(v)))
        return sessions, reserved

    def apply(self, ops: Sequence[Op]) -> None:
        """Write ``ops`` in order in one durable transaction."""
        self.engine.write([_change(op) for op in ops])

    def close(self) -> None:
        self.engine.close()
