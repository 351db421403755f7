"""A listener's open connections against its ``max_connections`` (0: no limit)."""

from __future__ import annotations


class ConnectionGate:
    """Counts the connections one listener holds; refuses past the limit."""

    __slots__ = ("limit", "open")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def admit(self) -> bool:
        if self.limit and self.open >= self.limit:
            return False
        self.open += 1
        return True
