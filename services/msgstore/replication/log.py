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
works at the boundary.

Worked example::

    log = ReplicaLog()
    log.append(Append(1, (0, 0), ((1, 1), (1, 2))))   # Appended(1, 2)
    log.append(Append(1, (1, 5), ((1, 6),)))         # Refused: holds up to seq 2
    log.append(Append(2, (1, 1), ((2, 2),)))         # Appended(2, 2): (1, 2) replaced
    log.append(Append(1, (2, 2), ((1, 3),)))         # Refused: epoch 1 < 2
"""

from __future__ import annotations

from dataclasses import dataclass, field

Position = tuple[int, int]  # (epoch, seq)
ORIGIN: Position = (0, 0)


@dataclass(frozen=True, slots=True)
class Append:
    epoch: int  # the sending primary's
    prev: Position  # the position just before ``entries`` (ORIGIN: from the start)
    entries: tuple[Position, ...]  # contiguous seqs, after ``prev``


@dataclass(frozen=True, slots=True)
class Appended:
    epoch: int
    upto: int  # this replica holds the primary's log up to this seq


@dataclass(frozen=True, slots=True)
class Refused:
    epoch: int  # the replica's: higher than the append's when it was fenced
    last_seq: int  # the replica's last seq: the primary resends from at most here
    reason: str


@dataclass(slots=True)
class ReplicaLog:
    epoch: int = 0
    base: Position = ORIGIN  # the last position dropped as garbage
    entries: list[Position] = field(default_factory=list)

    def last(self) -> Position:
        return self.entries[-1] if self.entries else self.base

    def at(self, seq: int) -> Position | None:
        """The position held at ``seq``; None if not held (dropped or not yet written)."""
        if seq == self.base[1]:
            return self.base
        i = seq - self.base[1] - 1
        return self.entries[i] if 0 <= i < len(self.entries) else None

    def fence(self, epoch: int) -> bool:
        """A failover read at ``epoch``: appends from older epochs are refused from now on.
        False if this replica already follows a newer one."""
        if epoch < self.epoch:
            return False
        self.epoch = epoch
        return True

    def append(self, req: Append) -> Appended | Refused:
        if req.epoch < self.epoch:
            return Refused(self.epoch, self.last()[1], f"epoch {req.epoch} < {self.epoch}")
        self.epoch = req.epoch
        prev_seq = req.prev[1]
        if prev_seq < self.base[1]:
            # Garbage here already (acknowledged, so committed and identical): skip it.
            drop = self.base[1] - prev_seq
            if drop >= len(req.entries):
                return Appended(self.epoch, prev_seq + len(req.entries))
            req = Append(req.epoch, req.entries[drop - 1], req.entries[drop:])
            prev_seq = req.prev[1]
        if self.at(prev_seq) != req.prev:
            return Refused(self.epoch, self.last()[1], f"no entry {req.prev}")
        for pos in req.entries:
            held = self.at(pos[1])
            if held == pos:
                continue  # a resend
            if held is not None:
                del self.entries[pos[1] - self.base[1] - 1 :]  # a suffix never committed
            self.entries.append(pos)
        return Appended(self.epoch, prev_seq + len(req.entries))

    def compact(self, upto_seq: int) -> None:
        """Drop the entries at or below ``upto_seq`` (acknowledged by the client)."""
        n = min(upto_seq - self.base[1], len(self.entries))
        if n > 0:
            self.base = self.entries[n - 1]
            del self.entries[:n]
