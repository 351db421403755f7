"""A claim that adopted the session from its queue's copies, whose registration a newer
claim elsewhere then overtook, forgets what it adopted (``Claims.settled``): the newer
claim read the copies and serves the session, and the stale copy in the table was
listed beside the owner's (S7).

A real ``Registrar`` over an in-memory table; the claim's cluster parts are not used."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

from services.common.cluster_view import ClusterView
from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.common.typed_settings import build
from services.node.schema import schema
from services.registry.backends import Backends
from services.registry.cluster.claims import Claims
from services.registry.cluster.handover import Taken
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.engines.memory import MemoryEngine
from services.registry.quorum.register import ONLINE, Entry
from services.registry.registrar import Registrar
from services.registry.sessions import Policy, Session, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub

K: SessionKey = ("", "s")


class _NoBackends(Backends):
    def __init__(self) -> None:  # nothing here calls the msgstore or gossip
        pass


def _claims(online: bool = False, node: str = "") -> tuple[Registrar, Claims]:
    settings = build(RegistrySettings, schema().empty())
    table = SessionTable(Policy())
    committer = Committer(SessionStore(MemoryEngine()), table.get)
    r = Registrar(settings, table, committer, _NoBackends(), WatchHub(), MetricsRegistry())
    here = node or settings.node
    table.adopt(Session(K, 8, online, here, "", 3600, 5, 0, queued=True))
    claims = Claims(r, cast(Any, None), cast(Any, None), cast(Any, None))
    return r, claims


def test_an_overtaken_claim_forgets_the_session_it_adopted() -> None:
    async def run() -> None:
        r, claims = _claims()
        claims._adopted[K] = 9  # adopted at 8 by the claim of epoch 9
        claims.settled(K, 9, won=False)
        assert r.table.get(K) is None
        assert K not in claims._adopted

    asyncio.run(run())


def test_a_claim_that_won_or_adopted_nothing_leaves_the_table_alone() -> None:
    async def run() -> None:
        r, claims = _claims()
        claims._adopted[K] = 9
        claims.settled(K, 9, won=True)
        assert r.table.get(K) is not None and K not in claims._adopted
        claims.settled(K, 9, won=False)  # nothing adopted by this claim
        assert r.table.get(K) is not None

    asyncio.run(run())


def test_only_the_adopted_session_itself_is_forgotten() -> None:
    """Another epoch, another node's record, or an online session is not what the claim
    adopted (a registration here replaced it meanwhile)."""

    async def run() -> None:
        for online, node, adopted_by in ((False, "", 10), (True, "", 9), (False, "x", 9)):
            r, claims = _claims(online, node)
            claims._adopted[K] = adopted_by
            claims.settled(K, adopted_by, won=False)
            assert r.table.get(K) is not None, (online, node, adopted_by)

    asyncio.run(run())


def test_a_resume_of_a_replicated_queue_keeps_its_holders_copies() -> None:
    """The evictions a claim sends before its failover leave the holders' copies in
    place (``keep_queue``): the failover reads them, and a copy deleted first counted
    towards its read quorum as one without entries (2 messages lost in a fault run)."""

    async def run() -> None:
        r, claims = _claims()
        r.settings = replace(r.settings, replication_factor=3)
        entry = Entry("b", 7, ("b", "c", "d"), ONLINE, True)
        resume = cast(Any, SimpleNamespace(clean_start=False))
        clean = cast(Any, SimpleNamespace(clean_start=True))
        assert claims._kept(resume, entry) == {"b", "c", "d"}
        assert claims._kept(clean, entry) == frozenset()
        r.settings = replace(r.settings, replication_factor=1)
        assert claims._kept(resume, entry) == frozenset()

    asyncio.run(run())


def test_a_resume_of_a_queue_with_one_recorded_holder_fails_over_when_replicated() -> None:
    """With R > 1, a live entry that names one holder (what ``Adopt`` records) still
    moves by failover from the copies, which fences the old primary. Copied by the
    R = 1 path instead, what reached the old copy after the TAKE was appended behind
    what the session had already received."""

    async def run(r_factor: int) -> list[str]:
        r, claims = _claims()
        r.settings = replace(r.settings, replication_factor=r_factor)
        node = r.settings.node
        members = frozenset({node, "b", "c"})
        r.cluster = lambda: ClusterView(members, members, True, True)
        calls: list[str] = []

        async def evict_others(*_: object) -> None:
            calls.append("evict_others")

        async def handover(*_: object, **__: object) -> Taken:
            calls.append("handover")
            return Taken(present=True, persistent=True)

        async def take_replicated(*_: object) -> None:
            calls.append("take_replicated")

        async def move_queue(*_: object) -> None:
            calls.append("move_queue")

        fakes = cast(Any, claims)
        fakes._evict_others = evict_others
        fakes._handover = handover
        fakes._take_replicated = take_replicated
        fakes._move_queue = move_queue
        resume = cast(Any, SimpleNamespace(key=K, clean_start=False, route=""))
        previous = Entry("b", 9, ("b",), ONLINE, True)
        path = await claims._bring_here(resume, previous, replace(previous, owner=node, epoch=10))
        return [path, *calls]

    assert asyncio.run(run(2)) == [
        "handover_replicated",
        "evict_others",
        "handover",
        "take_replicated",
    ]
    assert asyncio.run(run(1)) == ["handover", "evict_others", "handover", "move_queue"]
