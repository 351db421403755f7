"""Running the CONNECT's password check off the event loop.

Password hashes (argon2id) cost tens of milliseconds by design; run on the event loop
they would stall every other client. The session calls its authorizer synchronously
(it is pure), so the connection checks the password in a worker thread *before* it
hands the CONNECT to the session, and gives the session this per-connection view,
which answers ``authenticate`` with the result already computed.
"""

from __future__ import annotations

from services.listener.session.auth import Authorizer


class _Wrapper:
    """An authorizer that decides ``authenticate`` itself and passes the ACL checks on."""

    def __init__(self, inner: Authorizer) -> None:
        self.inner = inner

    def authorize_publish(
        self, client_id: str, username: str | None, mountpoint: str, topic: str
    ) -> bool:
        return self.inner.authorize_publish(client_id, username, mountpoint, topic)

    def authorize_subscribe(
        self, client_id: str, username: str | None, mountpoint: str, topic_filter: str
    ) -> bool:
        return self.inner.authorize_subscribe(client_id, username, mountpoint, topic_filter)


class ConnectionAuth(_Wrapper):
    def __init__(self, inner: Authorizer) -> None:
        super().__init__(inner)
        self.answer: int | None = None

    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None, peer: str
    ) -> int:
        if self.answer is not None:
            return self.answer
        return self.inner.authenticate(client_id, username, password, peer)


class CertifiedAuth(_Wrapper):
    """A TLS client whose certificate named it (``use_identity_as_username``): its CN
    is its username and the certificate its authentication, so the password file is
    not consulted (Mosquitto's rule). ACLs still apply, to that username."""

    def __init__(self, inner: Authorizer, identity: str) -> None:
        super().__init__(inner)
        self.identity = identity

    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None, peer: str
    ) -> int:
        if username == self.identity:
            return 0
        return self.inner.authenticate(client_id, username, password, peer)
