"""All the session timers of a process in one heap, so the host needs one loop timer.

Theory of operation. Every connection holds a keepalive timer that almost never fires;
an event-loop timer per connection costs a uvloop handle, a libuv timer, a bound callback
and its arguments. ``TimerHeap`` keeps every deadline in one binary heap of
``(at, seq, timer)`` entries instead: the host arms a single loop timer for
``next_at()`` and calls ``pop_due(now)`` when it fires. Sans-IO: no clock is read,
``now`` is passed in.

Timers are lazy, which the session allows (a handler re-checks its deadline when a timer
fires): moving a deadline later — the keepalive, on every packet — only stores the new
``due``; the heap entry stays and, when it comes up early, is pushed again at ``due``.
Moving a deadline earlier, or cancelling, leaves the old entry behind as *stale* (its
``seq`` is no longer its timer's ``seq``) and it is skipped when popped. Stale entries are
counted, and the heap is rebuilt without them once they are the majority, so
connection churn cannot make it grow beyond twice the live timers.

Worked example: set(k, 100) pushes (100, 1, k); set(k, 130) only records due=130;
pop_due(100) pops (100, 1, k), finds it due at 130, pushes (130, 2, k) and returns [];
pop_due(130) returns [k].
"""

from __future__ import annotations

import heapq
from typing import Generic, TypeVar

__all__ = ["SLACK", "Timer", "TimerHeap"]

T = TypeVar("T")

SLACK = 0.001
"""A timer is due when its deadline is at most this far ahead (loop timers fire early)."""

_COMPACT_MIN = 64  # below this many stale entries, rebuilding is not worth it


class Timer(Generic[T]):
    """One named timer of ``owner``. ``due`` is None while it is not set; ``seq`` names
    its live heap entry (0 once it fired or was cancelled: entries are matched by their
    number, not identity, which a compiled build does not keep for tuples). A cancelled
    timer lets go of its owner: its stale entry may stay in the heap, but holds nothing
    big."""

    __slots__ = ("at", "due", "name", "owner", "seq")

    def __init__(self, owner: T, name: str) -> None:
        self.owner: T | None = owner
        self.name = name
        self.due: float | None = None
        self.seq = 0
        self.at = 0.0  # when the live entry comes up (meaningful while ``seq``)


class TimerHeap(Generic[T]):
    """The deadlines of many timers; see the module docstring."""

    __slots__ = ("_heap", "_seq", "_stale")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer[T]]] = []
        self._seq = 0
        self._stale = 0

    def __len__(self) -> int:
        """Heap entries, stale ones included (what the heap costs)."""
        return len(self._heap)

    def set(self, timer: Timer[T], at: float) -> None:
        """Fire ``timer`` at ``at`` (replacing any earlier setting)."""
        if timer.owner is None:
            raise ValueError(f"timer {timer.name!r} was cancelled")
        if timer.seq:
            if at >= timer.at:
                timer.due = at  # lazy: the entry re-arms itself when it comes up
                return
            self._stale += 1
        timer.due = at
        self._push(timer, at)
        self._compact()

    def cancel(self, timer: Timer[T]) -> None:
        """Never fire ``timer``; it is done (``owner`` released) and cannot be set again."""
        if timer.seq:
            timer.seq = 0
            self._stale += 1
            self._compact()
        timer.due = None
        timer.owner = None

    def next_at(self) -> float | None:
        """When the earliest entry comes up (maybe stale or lazy: then nothing fires)."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[Timer[T]]:
        """The timers due at ``now``, earliest first; they are no longer set."""
        heap = self._heap
        limit = now + SLACK
        out: list[Timer[T]] = []
        # Bounded: each turn pops an entry at or before ``limit`` and pushes none there.
        while heap and heap[0][0] <= limit:
            _, seq, timer = heapq.heappop(heap)
            if timer.seq != seq:
                self._stale -= 1
                continue
            due = timer.due
            assert due is not None  # a live entry belongs to a set timer
            if due > limit:
                self._push(timer, due)
                continue
            timer.seq = 0
            timer.due = None
            out.append(timer)
        return out

    def _push(self, timer: Timer[T], at: float) -> None:
        self._seq += 1
        timer.seq = self._seq
        timer.at = at
        heapq.heappush(self._heap, (at, self._seq, timer))

    def _compact(self) -> None:
        if self._stale < _COMPACT_MIN or 2 * self._stale < len(self._heap):
            return
        self._heap = [e for e in self._heap if e[2].seq == e[1]]
        heapq.heapify(self._heap)
        self._stale = 0
