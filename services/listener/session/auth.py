"""The authentication and authorisation hooks the session calls, as an injected protocol.

Theory of operation: the session asks, it never decides policy. ``authenticate`` runs
once per CONNECT and answers an MQTT 5 reason code (0 = accepted, e.g. 0x86 bad user
name or password, 0x87 not authorised, 0x8A banned); the session maps it to a 3.1.1
return code for older clients. ``authorize_publish`` is asked for every inbound PUBLISH
and for the will at CONNECT; ``authorize_subscribe`` for every topic filter. The calls
are synchronous: a hook that needs I/O keeps a local cache (the listener's ``auth/``
package loads password and ACL files up front), so the state machine stays pure.
"""

from __future__ import annotations

from typing import Protocol


class Authorizer(Protocol):
    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None, peer: str
    ) -> int:
        """MQTT 5 reason code for the CONNECT: 0 accepts it."""
        ...

    def authorize_publish(
        self, client_id: str, username: str | None, mountpoint: str, topic: str
    ) -> bool: ...

    def authorize_subscribe(
        self, client_id: str, username: str | None, mountpoint: str, topic_filter: str
    ) -> bool: ...


class AllowAll:
    """The default when no auth plugin is enabled: every client may do everything."""

    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None, peer: str
    ) -> int:
        return 0

    def authorize_publish(
        self, client_id: str, username: str | None, mountpoint: str, topic: str
    ) -> bool:
        return True

    def authorize_subscribe(
        self, client_id: str, username: str | None, mountpoint: str, topic_filter: str
    ) -> bool:
        return True
