"""One replica's copy of a queue: the positions it holds, and whether to take an append.

Theory of operation
-------------------
A queue's entries are numbered by its primary: ``seq`` 1, 2, … with no gap, each stamped
with the ``epoch`` of the primary that wrote it, so a position is ``(epoch, seq)`` and
positions compare as tuples. A replica keeps the positions in ``seq`` order (the shell
keeps the messages, keyed by position) and ``epoch``, the highest epoch it has heard of:

* an append from an older epoch is refused, which fences a primary that was replaced;
* :meth:`ReplicaLog.fence` raises ``epoch`` without appending: a new primary's failover
  read, after which the old primary can no longer reach a write quorum through it.

An append names the position just before its entries (``prev``). The replica takes it
only if it holds that position (Raft's log-matching check); otherwise it refuses and
says how far it is, and the primary sends from further back. An entry at a ``seq`` the
replica holds with another epoch replaces it and everything after it: that suffix was
never committed (a committed entry is on a write quorum, and the failover rule keeps
it), so dropping it loses nothing anyone was told is safe.

Entries at or below the queue's acknowledged index are garbage: :meth:`ReplicaLog.compact`
drops them and keeps the last one's position as ``base``, so the matching check still
works at the boundary. The check is made at the first position both copies hold; where
an append ends at or below the replica's base, it is taken as held. That is sound
because garbage is committed, so the same on every copy of one log; hence only committed
entries may be dropped. A primary that starts a new log (a clean start, or a copy whose
seqs are behind the replica's) is told apart by its positions there: one at the base
that differs, or one of an epoch newer than the base's. Its append is refused and its
install replaces the copy (``tests/unit/test_msgstore_replication.py`` shows an entry
counted on a copy that never held it otherwise).

A primary that no longer holds what a replica needs (it compacted past it, or took over
a copy whose base is above the replica's last) sends an **install** (Raft's
InstallSnapshot): ``prev`` is its base. Where the matching check fails, the replica drops
its whole copy and takes ``prev`` as its base, so it then holds exactly the primary's
log from there on. Where the check passes, the install is an ordinary append (one
delivered late must not drop entries the replica has acknowledged since) and the
replica drops its entries up to ``prev``, as the primary did.

A primary writes many entries of its epoch, and an entry never follows one of a newer
epoch (a primary writes at its own epoch, after what it took over), so the positions
are kept as **runs**: ``(epoch, first seq)`` where each stretch of one epoch starts,
ascending in both, up to ``last_seq``. A log of millions of entries is a few runs; an
append costs its length plus a binary search.

Worked example::

    log = ReplicaLog()
    log.append(Append(1, (0, 0), ((1, 1), (1, 2))))   # Appended(1, 2)
    log.append(Append(1, (1, 5), ((1, 6),)))         # Refused: holds up to seq 2
    log.append(Append(2, (1, 1), ((2, 2),)))         # Appended(2, 2): (1, 2) replaced
    log.append(Append(1, (2, 2), ((1, 3),)))         # Refused: epoch 1 < 2
    log.append(Append(2, (2, 7), ((2, 8),), True))   # Appended(2, 8): base (2, 7)
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise

Position = tuple[int, int]  # (epoch, seq)
ORIGIN: Position = (0, 0)


@dataclass(frozen=True, slots=True)
class Append:
    epoch: int  # the sending primary's
    prev: Position  # the position just before ``entries`` (ORIGIN: from the start)
    entries: tuple[Position, ...]  # contiguous seqs, after ``prev``
    install: bool = False  # ``prev`` is the primary's base: a copy without it restarts there


@dataclass(frozen=True, slots=True)
class Appended:
    epoch: int
    upto: int  # this replica holds the primary's log up to this seq


@dataclass(frozen=True, slots=True)
class Refused:
    epoch: int  # the replica's: higher than the append's when it was fenced
    last_seq: int  # the replica's last seq: the primary resends from at most here
    reason: str


def _first(run: Position) -> int:
    return run[1]


@dataclass(slots=True)
class ReplicaLog:
    epoch: int = 0
    base: Position = ORIGIN  # the last position dropped as garbage
    # (epoch, first seq) of each stretch of one epoch after ``base``; both ascending
    runs: list[Position] = field(default_factory=list)
    last_seq: int = 0  # entries are base[1] + 1 .. last_seq

    def __post_init__(self) -> None:
        runs = self.runs
        assert bool(runs) == (self.last_seq > self.base[1]), (self.base, runs, self.last_seq)
        assert not runs or runs[0][1] == self.base[1] + 1, (self.base, runs)
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in pairwise(runs)), runs
        assert not runs or (runs[0][0] >= self.base[0] and runs[-1][1] <= self.last_seq)

    @classmethod
    def of(cls, entries: Iterable[Position], epoch: int = 0, base: Position = ORIGIN) -> ReplicaLog:
        """A log holding ``entries`` (contiguous after ``base``)."""
        log = cls(epoch, base, [], base[1])
        for pos in entries:
            log._push(pos)
        return log

    @property
    def entries(self) -> list[Position]:
        """Every position held, one by one: for tests and small logs."""
        return list(self.span(self.base[1] + 1, self.last_seq))

    def last(self) -> Position:
        return (self.runs[-1][0], self.last_seq) if self.runs else self.base

    def at(self, seq: int) -> Position | None:
        """The position held at ``seq``; None if not held (dropped or not yet written)."""
        if seq == self.base[1]:
            return self.base
        if not self.base[1] < seq <= self.last_seq:
            return None
        return (self.runs[self._run(seq)][0], seq)

    def first_from(self, epoch: int) -> int:
        """The first ``seq`` held whose epoch is ``epoch`` or newer; ``last_seq + 1`` if
        none is (epochs only grow along the log, so every later entry is too)."""
        i = bisect.bisect_left(self.runs, (epoch, 0))
        return self.runs[i][1] if i < len(self.runs) else self.last_seq + 1

    def span(self, first: int, upto: int) -> tuple[Position, ...]:
        """The positions held from ``first`` to ``upto`` (above the base)."""
        seq, upto = max(first, self.base[1] + 1), min(upto, self.last_seq)
        out: list[Position] = []
        i = self._run(seq) if seq <= upto else len(self.runs)
        while seq <= upto:
            end = self.runs[i + 1][1] - 1 if i + 1 < len(self.runs) else self.last_seq
            epoch, stop = self.runs[i][0], min(end, upto)
            out.extend((epoch, s) for s in range(seq, stop + 1))
            seq, i = stop + 1, i + 1
        return tuple(out)

    def fence(self, epoch: int) -> bool:
        """A failover read at ``epoch``: appends from older epochs are refused from now on.
        False if this replica already follows a newer one."""
        if epoch < self.epoch:
            return False
        self.epoch = epoch
        return True

    def write(self, epoch: int) -> Position:
        """Append the next entry, of ``epoch`` (the primary's own writes)."""
        pos = (epoch, self.last_seq + 1)
        self._push(pos)
        return pos

    def write_many(self, epoch: int, n: int) -> Position:
        """``write`` ``n`` times (n >= 1): a store's group commit hands the primary its
        appends to a queue together."""
        assert n >= 1 and epoch >= self.last()[0], f"{n} entries of epoch {epoch}"
        if not self.runs or self.runs[-1][0] != epoch:
            self.runs.append((epoch, self.last_seq + 1))
        self.last_seq += n
        return (epoch, self.last_seq)

    def append(self, req: Append) -> Appended | Refused:
        if req.epoch < self.epoch:
            return Refused(self.epoch, self.last_seq, f"epoch {req.epoch} < {self.epoch}")
        self.epoch = req.epoch
        upto = req.prev[1] + len(req.entries)
        prev, entries = req.prev, req.entries
        drop = self.base[1] - prev[1]
        diverged = False
        if drop > 0:
            # Garbage here already (acknowledged, so committed and identical): skip it,
            # unless the append shows another history at or below this base: its
            # position at the base differs, or a position it names there is of an epoch
            # newer than the base's (a primary that started a new log, e.g. a clean
            # start, with its base below this one). Such an append is refused, and the
            # install that follows starts the copy over.
            mine = entries[drop - 1] if drop <= len(entries) else None
            newer = any(e[0] > self.base[0] for e in (prev, *entries[:drop]))
            diverged = newer or (mine is not None and mine != self.base)
            if not diverged:
                if drop >= len(entries):
                    return Appended(self.epoch, upto)
                prev, entries = entries[drop - 1], entries[drop:]
        if diverged or self.at(prev[1]) != prev:
            if not req.install:
                return Refused(self.epoch, self.last_seq, f"no entry {prev}")
            # Nothing here matches the primary's log: start again from its base.
            self.base, self.runs, self.last_seq = req.prev, [], req.prev[1]
            prev, entries = req.prev, req.entries
        elif req.install:
            self.compact(prev[1])  # garbage at the primary: committed
        self._take(entries)
        return Appended(self.epoch, upto)

    def compact(self, upto_seq: int) -> None:
        """Drop the entries at or below ``upto_seq`` (acknowledged by the client)."""
        seq = min(upto_seq, self.last_seq)
        if seq <= self.base[1]:
            return
        i = self._run(seq)
        self.base = (self.runs[i][0], seq)
        if seq == self.last_seq:
            self.runs = []
        elif i + 1 < len(self.runs) and self.runs[i + 1][1] == seq + 1:
            del self.runs[: i + 1]
        else:
            self.runs[: i + 1] = [(self.runs[i][0], seq + 1)]

    def _run(self, seq: int) -> int:
        """The index of the run holding ``seq`` (above the base, at most ``last_seq``)."""
        return bisect.bisect_right(self.runs, seq, key=_first) - 1

    def _take(self, entries: tuple[Position, ...]) -> None:
        """Merge ``entries`` (just after a position held): skip those held already, and
        from the first held with another epoch on, replace the rest."""
        held = min(self.last_seq - entries[0][1] + 1, len(entries)) if entries else 0
        n, i = 0, self._run(entries[0][1]) if held > 0 else 0
        while n < held:
            epoch, seq = entries[n]
            while i + 1 < len(self.runs) and self.runs[i + 1][1] <= seq:
                i += 1
            if self.runs[i][0] != epoch:
                del self.runs[i if self.runs[i][1] == seq else i + 1 :]  # never committed
                self.last_seq = seq - 1
                break
            n += 1
        for pos in entries[n:]:
            self._push(pos)

    def _push(self, pos: Position) -> None:
        epoch, seq = pos
        assert seq == self.last_seq + 1, f"{pos} does not follow seq {self.last_seq}"
        assert epoch >= self.last()[0], f"{pos} follows {self.last()}: epochs never go back"
        if not self.runs or self.runs[-1][0] != epoch:
            self.runs.append(pos)
        self.last_seq = seq
