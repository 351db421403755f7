"""The session's states (a module of its own so handlers can import it without cycles)."""

from __future__ import annotations

from enum import Enum


class SessionState(Enum):
    """CONNECTING -> REGISTERING -> CONNECTED -> CLOSED; any of them -> CLOSED."""

    CONNECTING = "connecting"
    REGISTERING = "registering"
    CONNECTED = "connected"
    CLOSED = "closed"
