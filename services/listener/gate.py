"""A listener's connections: counted against its ``max_connections`` (0: no limit), and
held by name, so that ``listener stop --kill_sessions`` ends every one, those still in
their CONNECT handshake too. A connection waiting for the registry's answer is in no
session table yet; ended, its registration is reported gone as soon as it lands."""

from __future__ import annotations


class ConnectionGate:
    """The connections one listener (one address, across its restarts) holds; refuses
    past the limit."""

    __slots__ = ("held", "limit")

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self.held: set[object] = set()

    def admit(self, conn: object) -> bool:
        if self.limit and len(self.held) >= self.limit:
            return False
        self.held.add(conn)
        return True

    def release(self, conn: object) -> None:
        self.held.discard(conn)
