"""Which tombstones of deleted queues may go: a queue of graves in deletion order.

Theory of operation. Deleting a queue leaves a tombstone, its record with ``exists``
false, the epoch and the last seq (``ops._delete``). The tombstone fences out an
``Open`` that carries an older epoch, and a queue created again while it stands takes
its seqs from above the old ones. Kept forever, tombstones grew the store by one record
per client id that ever had a queue. That is one record per random id a device fleet or a
fuzzer ever used.

The rule, and why it is safe:

1. **Grace.** A tombstone stays ``msgstore.tombstone_ttl`` (:data:`GRACE_S` by default)
   after the delete is durable.
   That is longer than the deadline of any request that could still arrive with an
   older epoch: the registry's RPC timeout is seconds, and its calls for one client id
   are serial. So no late ``Open`` revives a queue under a fenced-out epoch.
2. **Epochs never repeat.** The registry issues every epoch from one counter, and it
   reserves each block on disk before use (``registry.sessions``). A queue created
   after the collection therefore opens at a higher epoch than the tombstone's. Every
   stale append, ack or mark is refused without the record. Seqs start again at 1.
   Order is by ``(epoch, seq)``, and that pair still only grows: that order is what the
   listener's resume and the replicas' up-to-date rule (DESIGN §4) compare.
3. **Replication, later.** A replicated queue's tombstone must also be durable on every
   replica before it goes. Otherwise a failover that reads a replica which missed the
   delete would revive the queue. With one copy (R = 1) the local commit is all.

Nothing here reads the clock: ``now`` is passed in (monotonic seconds), and a restart
buries every tombstone found on disk again, at load time. A restart only lengthens the
grace, never shortens it.

Worked example: c1's queue is deleted at t=100 with epoch 7. ``due(130)`` is empty,
``due(161)`` returns ``Grave(c1, 7, 100)``. The collect job removes the record only if it
is still that tombstone. A queue created again at t=120 (epoch 9) is left alone.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

GRACE_S = 60.0


@dataclass(frozen=True, slots=True)
class Grave:
    session: bytes  # the queue's key prefix (``keys.session``)
    epoch: int  # the tombstone's epoch: collected only if the record still has it
    at: float  # when the delete was durable (monotonic seconds)


class Graveyard:
    """Tombstones waiting for their grace to pass, oldest first."""

    def __init__(self, grace: float = GRACE_S) -> None:
        self.grace = grace
        self._graves: deque[Grave] = deque()
        self.collected = 0  # tombstones removed so far (for status)

    def __len__(self) -> int:
        return len(self._graves)

    def bury(self, session: bytes, epoch: int, now: float) -> None:
        """A tombstone was written at ``now``. Calls come in time order, so the deque
        stays sorted."""
        self._graves.append(Grave(session, epoch, now))

    def due(self, now: float, limit: int) -> list[Grave]:
        """Remove and return up to ``limit`` graves whose grace has passed."""
        out: list[Grave] = []
        graves = self._graves
        while graves and len(out) < limit and graves[0].at + self.grace <= now:
            out.append(graves.popleft())
        return out

    def retry(self, graves: list[Grave], now: float) -> None:
        """Graves whose collection failed: due again one grace from ``now``."""
        for grave in graves:
            self.bury(grave.session, grave.epoch, now)
