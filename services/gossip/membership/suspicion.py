"""Suspicion timeouts that shrink with confirmations, and the local health multiplier.

Theory of operation
-------------------
Both come from Lifeguard (Dadgar et al., 2018), as hashicorp/memberlist implements it.

**Suspicion.** A suspected node is declared dead when its suspicion times out without a
refutation. The timeout starts at ``hi`` and falls towards ``lo`` as *independent*
members report the same suspicion (each suspecter counts once; the first does not count,
it started it)::

    timeout(c) = max(lo, hi - (hi - lo) * log(c + 1) / log(k + 1))

with ``c`` confirmations out of the ``k`` wanted. One slow or lossy node alone waits the
long timeout, which leaves the suspect time to refute; when several members fail to reach
it, it really is gone and the short timeout applies. With ``lo = 0.4``, ``hi = 0.8`` and
``k = 2``: 0.8 s with no confirmation, 0.55 s with one, 0.4 s with two.

**Local health.** A node that misses the answers it should get (a probe that got no ack
and not one nack from the helpers it asked, a suspicion of itself it had to refute, its
own ticks arriving late) is more likely slow itself than surrounded by failures. Its
score rises by one for each such event and falls by one for each probe answered, within
``[0, max_multiplier - 1]``; its probe interval and ack timeout are multiplied by
``score + 1``, so an overloaded node probes more gently and waits longer before
suspecting anyone. (memberlist counts each helper that fails to nack; one nack is enough
here, because a helper cut off by a partition stays silent too, and counting it would
slow the majority side's detection of a netsplit.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def suspicion_timeout(confirmations: int, wanted: int, lo: float, hi: float) -> float:
    """Seconds from the start of a suspicion until the node is declared dead.

    Laws: ``timeout(0) == hi`` when ``wanted >= 1``; non-increasing in ``confirmations``;
    ``timeout(c) == lo`` for ``c >= wanted``; always ``lo`` when ``wanted == 0`` (no other
    member could confirm).
    """
    if wanted <= 0 or confirmations >= wanted:
        return lo
    frac = math.log(confirmations + 1) / math.log(wanted + 1)
    return max(lo, hi - (hi - lo) * frac)


@dataclass(slots=True)
class Suspicion:
    """One running suspicion of one node at one incarnation."""

    started: float
    wanted: int  # independent confirmations that bring the timeout down to ``lo``
    suspecters: set[str] = field(default_factory=set)

    @property
    def confirmations(self) -> int:
        return max(len(self.suspecters) - 1, 0)

    def confirm(self, by: str) -> bool:
        """Count ``by``; True when that is new information worth passing on."""
        if by in self.suspecters or self.confirmations >= self.wanted:
            return False
        self.suspecters.add(by)
        return True

    def deadline(self, lo: float, hi: float) -> float:
        return self.started + suspicion_timeout(self.confirmations, self.wanted, lo, hi)


@dataclass(slots=True)
class Health:
    """Lifeguard's local health score; ``multiplier`` scales this node's probe timing."""

    max_multiplier: int
    score: int = 0

    def apply(self, delta: int) -> None:
        self.score = min(max(self.score + delta, 0), self.max_multiplier - 1)

    @property
    def multiplier(self) -> int:
        return self.score + 1
