"""A queue's primary: numbers entries, feeds each replica, decides what is committed.

Theory of operation
-------------------
The primary of epoch ``e`` appends to its own :class:`~.log.ReplicaLog` and sends each
replica the entries it lacks, from ``next[replica]``; a refusal moves ``next`` back to
where that replica's copy ends (the matching check there tells whether it agrees), and
an acknowledgement moves ``match`` forward. Each refusal moves ``next`` back by one at
least, to the primary's base at worst, and from there the primary sends an **install**
(its base and what follows), which a replica not fenced by a newer epoch never refuses:
so the walk back ends. That is also how a replica gets what this primary no longer
holds (it dropped garbage, or took over a copy whose base is above the replica's last).

An entry is **committed** once ``w`` copies hold it (the primary's own included), and
only then is its publisher acknowledged or its message delivered. As in Raft, only an
entry of the primary's own epoch is committed by counting copies; earlier entries are
committed with it, because every copy that holds it holds what comes before. Counting
copies of an older epoch's entry is unsafe: a later failover may choose a copy without
it (Raft's figure 8; ``tests/unit/test_msgstore_replication.py`` plays it out). So a new
primary first writes a **barrier** (an entry of its epoch that carries no message):
once the barrier is committed, so is everything the failover chose to keep.

The exception is ``floor``: a node that stays the primary while its session's epoch
moves on (the client reconnected to it: an Open, no failover) wrote the entries of its
earlier epochs itself, and no other primary came between, or it would have been fenced
and replaced. Entries from ``floor`` on are counted as its own. Without it, an append
that reached the store just before such an Open waited for a later append to commit it,
and its result was held (failing after ``msgstore.failover_timeout`` when none came).

Only committed entries may be dropped from the primary's copy (:mod:`.log`: garbage is
the same on every copy). A primary restarted at its own epoch is constructed again from
its copy: it knows nothing of its replicas (nor what it committed) and finds out as a
new primary does.

Worked example (three replicas, w = 2)::

    p = Primary("a", 1, ReplicaLog(), ["b", "c"], w=2)
    p.write()                            # (1, 1)
    p.to_send("b")                       # Append(1, (0, 0), ((1, 1),))
    p.on_reply("b", Appended(1, 1))      # committed: 1
"""

from __future__ import annotations

from collections.abc import Iterable

from services.msgstore.replication.log import Append, Appended, Position, Refused, ReplicaLog

MAX_BATCH = 512  # entries per append


class Primary:
    def __init__(
        self,
        node: str,
        epoch: int,
        log: ReplicaLog,
        replicas: Iterable[str],
        w: int,
        floor: int | None = None,
    ) -> None:
        if not log.fence(epoch):
            raise ValueError(f"epoch {epoch} is older than the log's {log.epoch}")
        self.node = node
        self.epoch = epoch
        # The first epoch of this node's unbroken tenure as the queue's primary.
        self.floor = epoch if floor is None else min(floor, epoch)
        self.log = log
        self.w = w
        self.replicas = [r for r in replicas if r != node]
        last = log.last()[1]
        self.next = {r: last + 1 for r in self.replicas}
        self.match = {r: 0 for r in self.replicas}
        self.committed = 0

    def serves(self) -> int:
        """The highest ``seq`` a read may hand to a subscriber now.

        What this tenure wrote (epochs from ``floor`` on) is served once committed: an
        entry on fewer than ``w`` copies may be lost to a failover after the subscriber
        had it. What earlier tenures wrote is served as it is held: this primary took it
        over (a failover's choice, which keeps every committed entry) or wrote it before a
        restart, and cannot count its copies until an entry of its own commits; holding
        it back until then would starve a resume while fewer than ``w`` copies are up."""
        return max(self.committed, self.log.first_from(self.floor) - 1)

    @property
    def replaced(self) -> bool:
        """A failover at a newer epoch fenced this primary's own copy: it must stop."""
        return self.log.epoch > self.epoch

    def write(self) -> Position | None:
        """Append the next entry (its message is the shell's); its position, or None
        when this primary was replaced."""
        if self.replaced:
            return None
        pos = self.log.write(self.epoch)
        self._advance()
        return pos

    def write_many(self, n: int) -> Position | None:
        """``write`` ``n`` times (n >= 1), the commit index moved once; the last
        position, or None when this primary was replaced."""
        if self.replaced:
            return None
        pos = self.log.write_many(self.epoch, n)
        self._advance()
        return pos

    def barrier(self) -> Position | None:
        """A new primary's first entry: committing it commits what it took over."""
        return self.write()

    def to_send(self, replica: str) -> Append | None:
        """What ``replica`` needs next (None: nothing, or replaced): an install when it
        needs what this primary no longer holds, its base and the entries after it."""
        if self.replaced:
            return None
        base, nxt = self.log.base, self.next[replica]
        if nxt <= base[1]:
            entries = self.log.span(base[1] + 1, base[1] + MAX_BATCH)
            return Append(self.epoch, base, entries, install=True)
        if nxt > self.log.last_seq:
            return None
        prev = self.log.at(nxt - 1)
        assert prev is not None
        return Append(self.epoch, prev, self.log.span(nxt, nxt + MAX_BATCH - 1))

    def on_reply(self, replica: str, reply: Appended | Refused) -> bool:
        """Take a replica's answer; False when it names a newer epoch (this primary is
        replaced and must stop)."""
        if reply.epoch > self.epoch:
            return False
        if isinstance(reply, Appended):
            if reply.epoch == self.epoch and reply.upto > self.match[replica]:
                self.match[replica] = reply.upto
                self.next[replica] = max(self.next[replica], reply.upto + 1)
                self._advance()
        else:
            # Resend from where its copy ends, or one further back when it holds that
            # seq with another epoch (the check fails there too, and again below it);
            # at the base, the next send is an install, which is not refused.
            base = self.log.base[1]
            if self.next[replica] - 1 <= base:
                # Refused at the base itself: the copy is of another history (its own
                # base is above ours, or it never held ours). Only an install matches,
                # and nothing it holds counts for this log.
                self.next[replica] = base
                self.match[replica] = 0
            else:
                back = min(self.next[replica] - 1, reply.last_seq + 1)
                self.next[replica] = max(back, self.match[replica] + 1, base)
        return True

    def _advance(self) -> None:
        if self.replaced:
            return
        seqs = sorted([self.log.last()[1], *self.match.values()], reverse=True)
        if len(seqs) < self.w:
            return
        candidate = seqs[self.w - 1]
        held = self.log.at(candidate)
        if candidate > self.committed and held is not None and held[0] >= self.floor:
            self.committed = candidate
