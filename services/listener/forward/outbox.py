"""The sending end of a forwarding link: sequence numbers, resend, acknowledgements.

Theory of operation
-------------------
Every copy forwarded to one peer gets the next ``seq`` of this link (1, 2, ...) and
waits in the outbox until the peer acknowledges it. The peer's acknowledgements are
cumulative (``upto``: every copy up to there is done) with the failed ones listed, so
one small message answers a whole batch. ``take`` hands out what was not sent on the
current stream yet; after the stream breaks, ``rewind`` makes everything unacknowledged
go again, in order, on the next one (the receiver drops what it already has, by
``seq``: see ``inbox``). So a copy is delivered once and in order across reconnects,
and its waiter hears exactly one outcome.

A peer that stays unreachable must not make the outbox grow without bound or hold
publishers forever: ``expire`` gives up on copies older than a deadline (their waiters
hear a failure), and ``push`` refuses when :attr:`capacity` copies wait. Expiring makes
a gap in the sequence; the receiver accepts any ``seq`` above the last one it took.

Worked example::

    o = Outbox(capacity=10)
    o.push("a", now=0.0); o.push("b", now=0.0)     # seq 1, 2
    o.take(100) == [(1, "a"), (2, "b")]
    o.rewind()                                       # the stream broke
    o.take(100) == [(1, "a"), (2, "b")]              # sent again
    o.ack(2, {2}) == [("a", True), ("b", False)]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection
from typing import Generic, TypeVar

T = TypeVar("T")


class OutboxFull(Exception):
    """The peer is too far behind: the copy was not taken."""


class Outbox(Generic[T]):
    __slots__ = ("_items", "_sent_upto", "capacity", "next_seq")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.next_seq = 1
        self._items: deque[tuple[int, T, float]] = deque()  # (seq, item, pushed at)
        self._sent_upto = 0  # highest seq handed out on the current stream

    def __len__(self) -> int:
        return len(self._items)

    def push(self, item: T, now: float) -> int:
        if len(self._items) >= self.capacity:
            raise OutboxFull(f"{len(self._items)} copies wait for this peer")
        seq = self.next_seq
        self.next_seq += 1
        self._items.append((seq, item, now))
        return seq

    def unsent(self) -> int:
        """How many copies ``take`` would hand out now."""
        if not self._items or self._items[-1][0] <= self._sent_upto:
            return 0
        return sum(1 for seq, _i, _t in self._items if seq > self._sent_upto)

    def take(self, limit: int) -> list[tuple[int, T]]:
        """Up to ``limit`` copies not yet sent on this stream, in ``seq`` order."""
        out: list[tuple[int, T]] = []
        for seq, item, _t in self._items:
            if seq <= self._sent_upto:
                continue
            if len(out) >= limit:
                break
            out.append((seq, item))
        if out:
            self._sent_upto = out[-1][0]
        return out

    def rewind(self) -> None:
        """The stream broke: send every unacknowledged copy again on the next one."""
        self._sent_upto = self._items[0][0] - 1 if self._items else self.next_seq - 1

    def ack(self, upto: int, failed: Collection[int]) -> list[tuple[T, bool]]:
        """The peer is done with every copy up to ``upto``; ``failed`` did not make it.
        Returns each acknowledged copy with its outcome, in ``seq`` order."""
        out: list[tuple[T, bool]] = []
        items = self._items
        while items and items[0][0] <= upto:
            seq, item, _t = items.popleft()
            out.append((item, seq not in failed))
        return out

    def expire(self, now: float, max_age: float) -> list[T]:
        """Give up on copies pushed more than ``max_age`` ago (oldest first)."""
        out: list[T] = []
        items = self._items
        while items and now - items[0][2] > max_age:
            out.append(items.popleft()[1])
        if items:
            self._sent_upto = max(self._sent_upto, items[0][0] - 1)
        return out
