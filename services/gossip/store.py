"""The metadata store core: versioned records per prefix, staged in transactions.

Theory of operation
-------------------
The prefixes (``subs``, ``retain``, ``sessions``; ``listeners``, ``registries`` and
``msgstores``: where each node's services take other nodes' calls; ``admins``: where its
admin API listens) map opaque byte keys to opaque byte values. Each
key's state is a :class:`Record`: a DVV set (``crdt.dvv``) of :class:`Stamped`
envelopes. A local write is ``dvv.update`` with this node's whole
context for the key, so it overwrites everything this node has seen; a delete is the
same write with a tombstone (``value=None``). Siblings only appear when another node
wrote concurrently (``merge_remote``, fed by ``cluster.replicator``); readers see one value,
chosen by the prefix's deterministic resolver (LWW by ``(ts_us, node)``).

Changes go through a :class:`Txn`: ``store.begin(now_us)`` opens an overlay on the
committed state, ``txn.apply(ops)`` / ``txn.merge_remote(records)`` /
``txn.collect_garbage(...)`` stage new records, the caller makes ``txn.writes()`` and
``txn.removals()`` durable, and only then ``store.commit(txn)`` installs them and
returns the visible changes (:class:`Update`) for watchers. Until ``commit`` readers
see only durable data, and a failed disk write leaves the store untouched. Staging is
sequential, so several Put requests grouped in one transaction see each other in order
and never hand out the same dot twice. Transactions are serial: committing one that
was opened before another commit is an error.

Tombstones are garbage collected after ``min_age_us``. A collected key's dots must not
be reused (a peer that saw the tombstone's dot would take a new value with that dot for
the old one), so the store keeps ``dot_floor``: the highest own counter of any collected
record. A key written with no record starts its counter above the floor, which is a
legal DVV state ("own dots up to the floor seen"). In a cluster, collection must also
wait until every member has seen the tombstone (``stable``), or a late copy of the old
value would come back.

Worked example (node ``a``)::

    txn = store.begin(now_us=100)
    txn.apply([Op("retain", b"\\0t", b"m1")])
    persist(txn.writes()); store.commit(txn)  # -> [Update("retain", b"\\0t", b"m1")]
    store.get("retain", b"\\0t") == b"m1"
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from services.gossip.crdt import dvv, lww
from services.gossip.crdt.dvv import DVVSet
from services.gossip.crdt.lww import Resolver, Stamped

PREFIXES: tuple[str, ...] = (
    "subs",
    "retain",
    "sessions",
    "listeners",
    "registries",
    "msgstores",
    "admins",
)
RESOLVERS: Mapping[str, Resolver] = {prefix: lww.winner for prefix in PREFIXES}


class UnknownPrefix(ValueError):
    """An operation named a prefix the store does not hold."""


class StaleTxn(RuntimeError):
    """A transaction was committed after another one (API misuse: commits are serial)."""


@dataclass(frozen=True, slots=True)
class Op:
    """A local write; ``value is None`` deletes the key."""

    prefix: str
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Update:
    """A visible change, as watchers see it; ``value is None``: the key was deleted."""

    prefix: str
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    """One key's full versioned state."""

    prefix: str
    key: bytes
    clock: DVVSet[Stamped]

    def siblings(self) -> list[Stamped]:
        return dvv.values(self.clock)


Key = tuple[str, bytes]


class MetaStore:
    """Committed state of this node's metadata replica; see the module docstring."""

    def __init__(self, node: str, resolvers: Mapping[str, Resolver] = RESOLVERS) -> None:
        self.node = node
        self.resolvers = dict(resolvers)
        self.dot_floor = 0
        self._records: dict[str, dict[bytes, Record]] = {p: {} for p in self.resolvers}
        self._view: dict[str, dict[bytes, bytes]] = {p: {} for p in self.resolvers}
        self._tombstones: dict[Key, int] = {}  # deleted keys -> newest sibling's ts_us
        self._generation = 0

    # -- loading --------------------------------------------------------------------
    def load(self, records: Iterable[Record], dot_floor: int = 0) -> None:
        """Install records read from disk at start-up (no notifications)."""
        self.dot_floor = max(self.dot_floor, dot_floor)
        for rec in records:
            self.check_prefix(rec.prefix)
            self._install(rec)
        self._generation += 1

    # -- reading --------------------------------------------------------------------
    def check_prefix(self, prefix: str) -> None:
        if prefix not in self._records:
            raise UnknownPrefix(f"unknown prefix {prefix!r}; expected one of {PREFIXES}")

    def get(self, prefix: str, key: bytes) -> bytes | None:
        """The visible value, or None when absent or deleted."""
        self.check_prefix(prefix)
        return self._view[prefix].get(key)

    def record(self, prefix: str, key: bytes) -> Record | None:
        """The full versioned state (tombstones included), for anti-entropy."""
        self.check_prefix(prefix)
        return self._records[prefix].get(key)

    def records(self, prefix: str) -> Iterator[Record]:
        self.check_prefix(prefix)
        return iter(list(self._records[prefix].values()))

    def items(self, prefix: str) -> list[tuple[bytes, bytes]]:
        """A copy of the visible ``(key, value)`` pairs: a snapshot later commits won't touch."""
        self.check_prefix(prefix)
        return list(self._view[prefix].items())

    def count(self, prefix: str) -> int:
        """Visible (not deleted) keys under ``prefix``."""
        return len(self._view[prefix])

    def tombstone_count(self) -> int:
        return len(self._tombstones)

    def resolve(self, rec: Record) -> bytes | None:
        """The value readers see: the prefix resolver's pick among siblings."""
        siblings = rec.siblings()
        if not siblings:
            return None
        return self.resolvers[rec.prefix](siblings).value

    # -- writing --------------------------------------------------------------------
    def begin(self, now_us: int) -> Txn:
        return Txn(self, now_us)

    def commit(self, txn: Txn) -> list[Update]:
        """Install a transaction made durable by the caller; return the visible changes."""
        if txn.generation != self._generation:
            raise StaleTxn("another transaction was committed since this one began")
        updates: list[Update] = []
        for (prefix, key), rec in txn.staged.items():
            before = self._view[prefix].get(key)
            if rec is None:
                self._remove(prefix, key)
                after = None
            else:
                after = self._install(rec)
            if after != before:
                updates.append(Update(prefix, key, after))
        self.dot_floor = txn.dot_floor
        self._generation += 1
        return updates

    def _install(self, rec: Record) -> bytes | None:
        self._records[rec.prefix][rec.key] = rec
        value = self.resolve(rec)
        k = (rec.prefix, rec.key)
        if value is None:
            self._view[rec.prefix].pop(rec.key, None)
            siblings = rec.siblings()
            self._tombstones[k] = max((s.ts_us for s in siblings), default=0)
        else:
            self._view[rec.prefix][rec.key] = value
            self._tombstones.pop(k, None)
        return value

    def _remove(self, prefix: str, key: bytes) -> None:
        self._records[prefix].pop(key, None)
        self._view[prefix].pop(key, None)
        self._tombstones.pop((prefix, key), None)

    def tombstones(self) -> list[tuple[Key, int]]:
        return list(self._tombstones.items())


class Txn:
    """Staged changes over a store's committed state; see :class:`MetaStore`."""

    def __init__(self, store: MetaStore, now_us: int) -> None:
        self.store = store
        self.now_us = now_us
        self.generation = store._generation
        self.dot_floor = store.dot_floor
        self.staged: dict[Key, Record | None] = {}  # None: remove (garbage collected)
        self.local: set[Key] = set()  # keys a local write staged (what peers must hear)

    def record(self, prefix: str, key: bytes) -> Record | None:
        k = (prefix, key)
        if k in self.staged:
            return self.staged[k]
        return self.store.record(prefix, key)

    def validate(self, ops: Sequence[Op]) -> None:
        """Raise :class:`UnknownPrefix` before anything is staged (a Put is atomic)."""
        for op in ops:
            self.store.check_prefix(op.prefix)

    def apply(self, ops: Sequence[Op]) -> None:
        """Stage local writes in order; all or nothing on an unknown prefix."""
        self.validate(ops)
        for op in ops:
            self._write(op)

    def _write(self, op: Op) -> None:
        node = self.store.node
        cur = self.record(op.prefix, op.key)
        siblings = cur.siblings() if cur is not None else []
        if op.value is None and all(s.deleted for s in siblings):
            return  # nothing visible to delete; a tombstone would only be garbage
        if cur is None:
            clock: DVVSet[Stamped] = dvv.from_context({node: self.dot_floor})
        else:
            clock = cur.clock
        # Never older than what it overwrites, so LWW agrees with causality seen here.
        ts = max([self.now_us, *(s.ts_us + 1 for s in siblings)])
        new = dvv.update(clock, dvv.join(clock), node, Stamped(ts, node, op.value))
        self.staged[(op.prefix, op.key)] = Record(op.prefix, op.key, new)
        self.local.add((op.prefix, op.key))

    def merge_remote(self, records: Iterable[Record]) -> None:
        """Stage remote states (anti-entropy): each is ``dvv.sync``-ed into ours.

        All or nothing on an unknown prefix, like :meth:`apply`.
        """
        incoming = list(records)
        for rec in incoming:
            self.store.check_prefix(rec.prefix)
        for rec in incoming:
            cur = self.record(rec.prefix, rec.key)
            clock = rec.clock if cur is None else dvv.sync(cur.clock, rec.clock)
            if cur is None or clock != cur.clock:
                self.staged[(rec.prefix, rec.key)] = Record(rec.prefix, rec.key, clock)

    def collect_garbage(
        self, min_age_us: int, stable: Callable[[Record], bool] = lambda rec: True
    ) -> int:
        """Stage removal of tombstones older than ``min_age_us`` that ``stable`` allows.

        Returns how many. Raises ``dot_floor`` to the removed records' own counters.
        """
        horizon = self.now_us - min_age_us
        removed = 0
        for (prefix, key), ts in self.store.tombstones():
            if ts > horizon or (prefix, key) in self.staged:
                continue
            rec = self.store.record(prefix, key)
            if rec is None or not stable(rec):
                continue
            own = dvv.join(rec.clock).get(self.store.node, 0)
            self.dot_floor = max(self.dot_floor, own)
            self.staged[(prefix, key)] = None
            removed += 1
        return removed

    def writes(self) -> list[Record]:
        return [rec for rec in self.staged.values() if rec is not None]

    def local_writes(self) -> list[Record]:
        """The staged records that local writes changed: what to broadcast to peers
        (records merged from a peer are not sent on; anti-entropy covers a lost one)."""
        out = []
        for k in self.local:
            rec = self.staged.get(k)
            if rec is not None:
                out.append(rec)
        return out

    def removals(self) -> list[Key]:
        return [k for k, rec in self.staged.items() if rec is None]

    def dot_floor_changed(self) -> bool:
        return self.dot_floor != self.store.dot_floor
