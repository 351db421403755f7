"""Reading a replicated queue's copy with its positions (the shell's side of
:mod:`services.msgstore.replicated`)."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.session_key import SessionKey
from services.msgstore import keys
from services.msgstore.model import QueueMeta
from services.msgstore.queue import QueueStore
from services.msgstore.replicated import META, REPL, ReplRecord, as_log
from services.msgstore.replication.log import ReplicaLog

READ_PAGE = 512


@dataclass(frozen=True, slots=True)
class Copy:
    """A replicated queue's copy as a read sees it (``read_copy``)."""

    log: ReplicaLog
    replicas: tuple[str, ...]
    max_len: int
    follows: bool = False  # fenced by a newer primary (a replica's copy until an Open here)


def read_copy(store: QueueStore, sid: SessionKey) -> Copy | None:
    """This node's copy of ``sid``'s queue with its positions; None if it is not
    replicated here. The base is the queue's ``acked`` index."""
    try:
        sess = keys.session(*sid)
    except keys.KeyTooLong:
        return None
    with store.engine.read() as txn:
        raw = txn.get(META, sess)
        rec_raw = txn.get(REPL, sess)
    if raw is None or rec_raw is None:
        return None
    meta = QueueMeta.decode(raw)
    if not meta.exists:
        return None
    rec = ReplRecord.decode(rec_raw)
    return Copy(as_log(meta, rec, meta.acked), rec.replicas, meta.max_len, meta.replica)


def read_entries(
    store: QueueStore, sid: SessionKey, first: int, last: int
) -> tuple[dict[int, bytes], int]:
    """The messages held at seqs ``first..last`` (an acknowledged one is missing) and
    the queue's ``acked`` index."""
    got: dict[int, bytes] = {}
    after = first - 1
    while after < last:
        found = store.read(sid, 0, after, min(last - after, READ_PAGE))
        for seq, data in found.entries:
            if seq > last:
                return got, found.state.acked
            got[seq] = data
        if not found.entries:
            return got, found.state.acked
        after = found.entries[-1][0]
    return got, store.state(sid).acked


def replicated_here(store: QueueStore, node: str) -> list[SessionKey]:
    """The replicated queues whose primary is ``node`` (their senders start again)."""
    found: list[SessionKey] = []
    with store.engine.read() as txn:
        for key, raw in txn.scan(REPL, b""):
            if ReplRecord.decode(raw).replicas[:1] == (node,):
                found.append(keys.split_session(key))
    return found


def copies_of(store: QueueStore, primary: str, replica: str = "") -> list[tuple[SessionKey, Copy]]:
    """The replicated queues held here whose primary is ``primary`` (and whose replica
    set names ``replica``, if given)."""
    found: list[tuple[SessionKey, Copy]] = []
    with store.engine.read() as txn:
        for key, raw in txn.scan(REPL, b""):
            rec = ReplRecord.decode(raw)
            if rec.replicas[:1] != (primary,) or (replica and replica not in rec.replicas):
                continue
            meta_raw = txn.get(META, key)
            if meta_raw is None:
                continue
            meta = QueueMeta.decode(meta_raw)
            if meta.exists:
                found.append(
                    (keys.split_session(key), Copy(as_log(meta, rec), rec.replicas, meta.max_len))
                )
    return found


def replica_sets(store: QueueStore, sids: list[SessionKey]) -> dict[SessionKey, tuple[str, ...]]:
    """The replica sets (primary first) of those of ``sids`` that are replicated here."""
    found: dict[SessionKey, tuple[str, ...]] = {}
    with store.engine.read() as txn:
        for sid in sids:
            try:
                raw = txn.get(REPL, keys.session(*sid))
            except keys.KeyTooLong:
                continue
            if raw is not None:
                found[sid] = ReplRecord.decode(raw).replicas
    return found
