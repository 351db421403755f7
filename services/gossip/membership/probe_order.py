"""The order in which a node probes its peers: one random cycle, kept.

SWIM picks probe targets at random; memberlist walks a shuffled list and reshuffles it
after each round, which can leave a member unprobed for almost two rounds. Here the
order is a random permutation fixed at start and walked round and round, so each peer is
probed exactly once every ``len(order)`` periods: that is what gives the detection bound
its ``(N - 1)·T`` term (see ``timing``). A peer that joins is inserted at a random place
(random insertion builds a uniform permutation), one that leaves is taken out; neither
disturbs where the walk is.
"""

from __future__ import annotations

import random


class ProbeOrder:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._order: list[str] = []
        self._pos = 0

    def add(self, node: str) -> None:
        i = self._rng.randrange(len(self._order) + 1)
        self._order.insert(i, node)
        self._pos += i < self._pos

    def remove(self, node: str) -> None:
        i = self._order.index(node)
        self._order.pop(i)
        self._pos -= i < self._pos

    def next(self) -> str | None:
        """The next peer to probe, or None when there is nobody."""
        if not self._order:
            return None
        self._pos %= len(self._order)
        node = self._order[self._pos]
        self._pos += 1
        return node
