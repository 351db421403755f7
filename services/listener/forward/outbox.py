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
    o.take(100) == [(1, "a", 0.0), (2, "b", 0.0)]  # (seq, item, pushed at)
    o.rewind()                                       # the stream broke
    o.take(100) == [(1, "a", 0.0), (2, "b", 0.0)]  # sent again
    o.ack(2) == [(1, "a", 0.0), (2, "b", 0.0)]       # done with (failed or not: the ack says)

``take`` and ``ack`` hand out the entries as they are kept, not new tuples: the link
moves every forwarded copy through both.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
Entry = tuple[int, T, float]  # (seq, item, pushed at)


class OutboxFull(Exception):
    """The peer is too far behind: the copy was not taken."""


class Outbox(Generic[T]):
    """Two queues in ``seq`` order: sent on the current stream and not yet acknowledged,
    then not sent yet. Every operation is O(1) per copy it moves; one queue scanned past
    what was sent made each ``take`` cost the whole in-flight window."""

    __slots__ = ("_sent", "_unsent", "capacity", "next_seq", "resent_upto")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.next_seq = 1
        # The highest seq sent on a stream that broke before it was answered: the peer
        # may have taken it (see ``ForwardBatch.resent_upto``).
        self.resent_upto = 0
        self._sent: deque[Entry[T]] = deque()  # (seq, item, pushed at)
        self._unsent: deque[Entry[T]] = deque()

    def __len__(self) -> int:
        return len(self._sent) + len(self._unsent)

    def push(self, item: T, now: float) -> int:
        if len(self) >= self.capacity:
            raise OutboxFull(f"{len(self)} copies wait for this peer")
        seq = self.next_seq
        self.next_seq += 1
        self._unsent.append((seq, item, now))
        return seq

    def unsent(self) -> int:
        """How many copies ``take`` would hand out now."""
        return len(self._unsent)

    def take(self, limit: int) -> list[Entry[T]]:
        """Up to ``limit`` entries not yet sent on this stream, in ``seq`` order."""
        unsent, sent = self._unsent, self._sent
        if len(unsent) <= limit:
            out = list(unsent)
            sent.extend(out)
            unsent.clear()
            return out
        out = []
        for _ in range(limit):
            entry = unsent.popleft()
            sent.append(entry)
            out.append(entry)
        return out

    def rewind(self) -> None:
        """The stream broke: send every unacknowledged copy again on the next one."""
        sent = self._sent
        if sent:
            self.resent_upto = max(self.resent_upto, sent[-1][0])
        while sent:
            self._unsent.appendleft(sent.pop())

    def ack(self, upto: int) -> list[Entry[T]]:
        """The peer is done with every copy up to ``upto`` (the ones that failed, it
        lists in its acknowledgement). Returns their entries, in ``seq`` order."""
        out: list[Entry[T]] = []
        for items in (self._sent, self._unsent):
            while items and items[0][0] <= upto:
                out.append(items.popleft())
        return out

    def withdraw(self, pick: Callable[[T], bool]) -> list[T]:
        """Take back, in ``seq`` order, the copies ``pick`` chooses among those no stream
        ever carried (not sent, and above ``resent_upto``): the peer cannot have them,
        so they may go elsewhere. Their seqs become a gap, as expired ones do."""
        out: list[T] = []
        kept: deque[tuple[int, T, float]] = deque()
        floor = self.resent_upto
        for entry in self._unsent:
            if entry[0] > floor and pick(entry[1]):
                out.append(entry[1])
            else:
                kept.append(entry)
        if out:
            self._unsent = kept
        return out

    def take_back(self, pick: Callable[[T], bool]) -> list[T]:
        """Take back, in ``seq`` order, every copy ``pick`` chooses, sent or not: copies
        that must go elsewhere though the peer may hold them too (a shared group's copy
        for a member on a node gone down: the group owes it, so a second member may get
        it). Their seqs become a gap."""
        out: list[T] = []
        self._sent = _keep(self._sent, pick, out)  # sent copies precede unsent ones
        self._unsent = _keep(self._unsent, pick, out)
        return out

    def expire(self, now: float, max_age: float) -> list[T]:
        """Give up on copies pushed more than ``max_age`` ago (oldest first)."""
        out: list[T] = []
        for items in (self._sent, self._unsent):
            while items and now - items[0][2] > max_age:
                out.append(items.popleft()[1])
            if items:
                break
        return out


def _keep(
    items: deque[tuple[int, T, float]], pick: Callable[[T], bool], out: list[T]
) -> deque[tuple[int, T, float]]:
    """``items`` without those ``pick`` chooses, which go to ``out``."""
    kept: deque[tuple[int, T, float]] = deque()
    for entry in items:
        if pick(entry[1]):
            out.append(entry[1])
        else:
            kept.append(entry)
    return kept
