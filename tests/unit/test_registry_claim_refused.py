"""A claim the cluster refuses answers the CONNECT with 0x88, whatever kind of refusal
the cluster side raised: ``Unreachable`` is the cluster side's own subclass of the
registrar's ``ClaimRefused`` (and the registrar is compiled: a subclass from interpreted
code must still be caught as one).

A real ``Registrar`` over an in-memory table; the claims are a stand-in."""

from __future__ import annotations

import asyncio

from services.common.metrics import MetricsRegistry
from services.common.typed_settings import build
from services.node.schema import schema
from services.registry.backends import Backends
from services.registry.cluster.claims import Unreachable
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.engines.memory import MemoryEngine
from services.registry.registrar import RC_SERVER_UNAVAILABLE, ClaimRefused, Registrar
from services.registry.sessions import Connect, Policy, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub


class _NoBackends(Backends):
    def __init__(self) -> None:  # a refused claim calls neither the msgstore nor gossip
        pass


class _RefusingClaims:
    """The cluster side, refusing every claim with ``error``."""

    def __init__(self, error: ClaimRefused) -> None:
        self.error = error
        self.claimed = 0

    def active(self) -> bool:
        return True

    async def claim(self, c: Connect) -> int:
        self.claimed += 1
        raise self.error


def _register(error: ClaimRefused) -> tuple[bool, int, int]:
    async def run() -> tuple[bool, int, int]:
        settings = build(RegistrySettings, schema().empty())
        table = SessionTable(Policy())
        committer = Committer(SessionStore(MemoryEngine()), table.get)
        r = Registrar(settings, table, committer, _NoBackends(), WatchHub(), MetricsRegistry())
        claims = _RefusingClaims(error)
        r.claims = claims  # type: ignore[assignment]
        connect = Connect(("", "c1"), settings.node, "L1", False, 0xFFFFFFFF, 4)
        result = await r.register(connect, shield=False)
        assert table.get(("", "c1")) is None  # nothing registered
        return result.ok, result.reason_code, claims.claimed

    return asyncio.run(run())


def test_an_unreachable_directory_refuses_the_connect_with_0x88() -> None:
    ok, code, claimed = _register(Unreachable("the other registry did not answer"))
    assert (ok, code, claimed) == (False, RC_SERVER_UNAVAILABLE, 1)


def test_a_plain_refusal_refuses_the_connect_with_0x88() -> None:
    ok, code, claimed = _register(ClaimRefused("a newer claim holds the id"))
    assert (ok, code, claimed) == (False, RC_SERVER_UNAVAILABLE, 1)
