"""Where a small durable write runs: on the event loop, or in a worker thread.

Why: on an idle service a write is a record or two and a flush (0.1 to 0.3 ms), and
handing it to a thread and back costs more than that (0.25 to 0.7 ms of wake-ups on the
development VM): "send now if idle". A larger write means the service is busy, and the
thread lets the loop take the next requests while the disk works: "gather while busy".
A slow disk must not stall the loop: one write over ``INLINE_STALL``, or a moving average
of them over ``INLINE_UNDER``, sends every write to the thread for ``INLINE_BACKOFF``
seconds (and for as long as the average stays high). Not a single write over
``INLINE_UNDER``: a flush that meets the other services' on a shared disk takes a few
milliseconds now and then (1 % of them in a sequential CONNECT loop), and backing off for
each kept the registry's commits in the thread nine tenths of the time, at 400 µs a
commit against 250.

Used by the registry's and the msgstore's group commits. The msgstore writes groups of
any size on the loop (``STORE_INLINE_OPS``) and moves them to the thread only after a
stall (its writes of a few milliseconds, hundreds of entries and an fsync, are not a slow
disk): each of its groups is awaited by the streams that sent it, the thread's two
wake-ups cost more than the loop would have done meanwhile on a busy 2-core machine, and
with replication they came twice a message (the primary's commit, then the replica's).
Measured: ``docs/benchmarks.md``, "Replicated queues, group commits on the loop".
"""

from __future__ import annotations

import math

INLINE_OPS = 4  # a write this small is made on the event loop...
INLINE_UNDER = 0.002  # s ...while writes take less than this on average...
INLINE_STALL = 0.02  # s ...and none took this long...
INLINE_BACKOFF = 5.0  # s ...else the worker thread makes them all for this long
INLINE_WEIGHT = 0.1  # of the latest write in the moving average
STORE_INLINE_OPS = 1 << 30  # the msgstore's: any group...
STORE_INLINE_UNDER = math.inf  # ...whatever the mean: only a stall sends them away


class InlinePolicy:
    """Pure bookkeeping: ask :meth:`inline` with a write's size and the time, and report
    each write's duration to :meth:`took`."""

    __slots__ = ("_mean", "_thread_until", "max_ops", "under")

    def __init__(self, max_ops: int = INLINE_OPS, under: float = INLINE_UNDER) -> None:
        self.max_ops = max_ops  # 0: always the thread
        self.under = under  # s, the writes' mean time above which they go to the thread
        self._thread_until = float("-inf")
        self._mean = 0.0  # s, moving average of the writes' times

    def inline(self, ops: int, now: float) -> bool:
        return ops <= self.max_ops and now >= self._thread_until

    def took(self, seconds: float, now: float) -> None:
        self._mean += (seconds - self._mean) * INLINE_WEIGHT
        if seconds > INLINE_STALL or self._mean > self.under:
            self._thread_until = now + INLINE_BACKOFF
