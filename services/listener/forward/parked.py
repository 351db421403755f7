"""The sending end's shared copies that the peer took and whose member has not answered.

Theory of operation
-------------------
A shared subscription group's copy for a member on another node is owed by the group
until that member acknowledges it: should the member lose it (its session ends first,
its node dies, its listener restarts), another member must get it. The peer's
cumulative acknowledgement only says it delivered the copy, so the link does not forget
such a copy then: it parks it here, by ``seq``, until the copy's outcome arrives in a
later acknowledgement (``settle``: the member has it; ``returned``: give it to another).

Everything parked for a peer goes back to be picked again (``take_all``) when the peer
is seen down, or when it answers as a new run (``peer_run``): the sessions that held
those copies died with it. Parking must not hold memory for ever on a member that never
answers (a stuck client): the oldest copies beyond :attr:`capacity`, and those parked
longer than ``max_age``, are forgotten: the member most likely has them, and only the
redelivery guarantee is lost for them (``forgotten`` counts them).

Outcomes the link took in are confirmed to the peer in its next batch (``heard``), so
the peer stops repeating them; a repeated outcome of a copy no longer parked is only
confirmed again.

Worked example::

    p = Parked(capacity=10, max_age=60.0)
    p.park(1, "a", now=0.0); p.park(2, "b", now=0.0)
    p.settle(1)                          # a's member acknowledged it
    p.returned(2) == "b"                 # b's member lost it: pick another
    p.heard() == [1, 2]                  # confirmed in the next batch
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

T = TypeVar("T")


class Parked(Generic[T]):
    __slots__ = ("_heard", "_items", "capacity", "forgotten", "max_age", "run")

    def __init__(self, capacity: int, max_age: float) -> None:
        self.capacity = capacity
        self.max_age = max_age
        self.forgotten = 0
        self.run = 0  # the peer's incarnation, once it answered
        self._items: OrderedDict[int, tuple[T, float]] = OrderedDict()  # seq order
        self._heard: list[int] = []

    def __len__(self) -> int:
        return len(self._items)

    def park(self, seq: int, item: T, now: float) -> None:
        self._items[seq] = (item, now)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
            self.forgotten += 1

    def settle(self, seq: int) -> None:
        """The copy's member acknowledged it."""
        self._items.pop(seq, None)
        self._heard.append(seq)

    def returned(self, seq: int) -> T | None:
        """The copy's member lost it: the copy, to give to another member (None if it is
        not parked any more: a repeated outcome)."""
        self._heard.append(seq)
        entry = self._items.pop(seq, None)
        return entry[0] if entry is not None else None

    def heard(self) -> list[int]:
        """The outcomes to confirm in the next batch (and forget)."""
        out, self._heard = self._heard, []
        return out

    def take_all(self) -> list[T]:
        """Every parked copy, in ``seq`` order: their peer is gone."""
        out = [item for item, _t in self._items.values()]
        self._items.clear()
        return out

    def peer_run(self, incarnation: int) -> list[T]:
        """The peer answered as run ``incarnation``: if that is a new run, what the old
        one held died with it (returned, to be picked again)."""
        if not incarnation or incarnation == self.run:
            return []
        known, self.run = self.run, incarnation
        self._heard.clear()  # outcomes of the old run: nobody to confirm them to
        return self.take_all() if known else []

    def expire(self, now: float) -> None:
        """Forget copies parked longer than ``max_age`` (their member never answered)."""
        items = self._items
        while items:
            seq, (_item, at) = next(iter(items.items()))
            if now - at <= self.max_age:
                return
            del items[seq]
            self.forgotten += 1
