"""The rumours a node has to pass on, each piggybacked a bounded number of times.

As memberlist's ``TransmitLimitedQueue``: a rumour goes out on the next messages, least
sent first, until it has been sent ``limit`` times (about ``λ·log N``, which reaches every
member with high probability in an epidemic); a newer rumour about a node replaces the
older one, which it makes obsolete. What a lost rumour fails to tell, the next probe
tells: every ping to a node believed down carries that belief (see ``detector``).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.gossip.membership.messages import Rumour


@dataclass(slots=True)
class _Queued:
    rumour: Rumour
    sent: int = 0


class RumourQueue:
    def __init__(self) -> None:
        self._items: dict[str, _Queued] = {}

    def __bool__(self) -> bool:
        return bool(self._items)

    def put(self, rumour: Rumour) -> None:
        self._items[rumour.node] = _Queued(rumour)

    def discard(self, node: str) -> None:
        self._items.pop(node, None)

    def take(self, count: int, limit: int) -> list[Rumour]:
        """Up to ``count`` rumours, least sent first; each is dropped after ``limit``."""
        picked = sorted(self._items.items(), key=lambda kv: kv[1].sent)[:count]
        for node, q in picked:
            q.sent += 1
            if q.sent >= limit:
                del self._items[node]
        return [q.rumour for _, q in picked]
