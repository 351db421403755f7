"""A resume of a replicated persistent session is served from its queue's copies, not
afresh, when the register names this node as the queue's first holder while the owner
(down) is another node, and when the retry of such a claim finds its own refused
attempt (a lost attempt).

Found by a 120-fault run (seed 1293): the first claim was refused because only the
holders after the first one were looked at (the owner, down), and the retry's
``lost_attempt`` path served a fresh session (session_present 0) while this node's own
copy held 230 acknowledged messages.

A real ``Registrar`` over an in-memory table; the msgstore's failover and the calls to
other nodes are stand-ins that record what was asked."""

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
from services.pb import msgstore_pb2
from services.registry.backends import Backends
from services.registry.cluster.claims import Claims, Unreachable
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.engines.memory import MemoryEngine
from services.registry.quorum.register import ONLINE, Claim, Entry
from services.registry.registrar import Registrar
from services.registry.sessions import Policy, Session, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub

K: SessionKey = ("", "s3")
B = "b@h"  # the owner, killed


class _Copies(Backends):
    """The msgstore's failover: records the copies it was asked to read and answers
    whether any of them held the queue."""

    def __init__(self, held: bool) -> None:
        self.held = held
        self.asked: list[tuple[int, tuple[str, ...]]] = []

    async def failover(
        self,
        key: SessionKey,
        epoch: int,
        copies: tuple[str, ...],
        limits: tuple[int, int],
        uncertain: bool = True,
    ) -> msgstore_pb2.QueueState:
        self.asked.append((epoch, copies))
        return msgstore_pb2.QueueState(exists=True, epoch=epoch, held=self.held)

    def replica_set(self, key: SessionKey) -> tuple[str, ...]:
        return ()


def _claims(held: bool = True, r_factor: int = 2) -> tuple[Registrar, Claims, _Copies]:
    settings = build(RegistrySettings, schema().empty())
    settings = replace(settings, replication_factor=r_factor)
    table = SessionTable(Policy())
    committer = Committer(SessionStore(MemoryEngine()), table.get)
    copies = _Copies(held)
    r = Registrar(settings, table, committer, copies, WatchHub(), MetricsRegistry())
    members = frozenset({settings.node, B, "c@h"})
    r.cluster = lambda: ClusterView(members, members - {B}, True, True)
    claims = Claims(r, cast(Any, None), cast(Any, None), cast(Any, None))
    fakes = cast(Any, claims)

    async def evict_others(*_: object) -> None:
        pass

    async def handover(*_: object, **__: object) -> object:
        raise Unreachable(f"{B} did not answer")

    fakes._evict_others = evict_others
    fakes._handover = handover
    claims.owe = lambda node, key, epoch: None
    return r, claims, copies


def _connect(clean_start: bool = False) -> Any:
    return SimpleNamespace(
        key=K, clean_start=clean_start, route="", proto_ver=4, session_expiry=0xFFFFFFFF
    )


def test_a_resume_while_the_owner_is_down_fails_over_from_this_nodes_copy() -> None:
    """The register names this node as the queue's first holder and B (down) as the
    owner: B's handover took the session and its record of the queue's new place did
    not land before B died. This node's own copy is up, so the queue fails over."""

    async def run() -> None:
        r, claims, copies = _claims()
        node = r.settings.node
        previous = Entry(B, 4134, (node, B), ONLINE, True)
        value = Claim(node, (node,), persistent=True, resume=True).apply(previous)
        assert value is not None and value.replicas == (node, B)
        path = await claims._bring_here(_connect(), previous, value)
        assert path == "failover"
        assert copies.asked == [(value.epoch, (node, B))]
        session = r.table.get(K)
        assert session is not None and session.queued and session.epoch == value.epoch - 1

    asyncio.run(run())


def _lost_attempt(node: str) -> tuple[Entry, Entry]:
    """The refused claim's entry (it took effect), and the retry's value over it."""
    before = Entry(B, 4134, (node, B), ONLINE, True)
    attempt = Claim(node, (node,), persistent=True, resume=True).apply(before)
    assert attempt is not None
    value = Claim(node, (node,), persistent=True, resume=True).apply(attempt)
    assert value is not None
    return attempt, value


def test_a_lost_attempts_retry_resumes_the_session_its_copies_hold() -> None:
    async def run() -> None:
        r, claims, copies = _claims(held=True)
        node = r.settings.node
        attempt, value = _lost_attempt(node)
        path = await claims._bring_here(_connect(), attempt, value)
        assert path == "lost_attempt_failover"
        assert copies.asked == [(value.epoch, (node, B))]
        session = r.table.get(K)
        assert session is not None and session.queued  # session_present 1

    asyncio.run(run())


def test_a_lost_attempt_whose_copies_hold_nothing_starts_afresh() -> None:
    """The attempt's entry alone does not say whether a session existed: the copies
    answer, and none holding the queue, the session is new."""

    async def run() -> None:
        r, claims, copies = _claims(held=False)
        attempt, value = _lost_attempt(r.settings.node)
        assert await claims._bring_here(_connect(), attempt, value) == "lost_attempt"
        assert len(copies.asked) == 1
        assert r.table.get(K) is None

    asyncio.run(run())


def test_a_lost_attempt_starts_afresh_without_reading_copies_when_nothing_resumes() -> None:
    """A clean start, or R = 1 (no copies to read): the old path, no failover."""

    async def run(clean_start: bool, r_factor: int) -> None:
        r, claims, copies = _claims(r_factor=r_factor)
        attempt, value = _lost_attempt(r.settings.node)
        path = await claims._bring_here(_connect(clean_start), attempt, value)
        assert path == "lost_attempt"
        assert copies.asked == []

    asyncio.run(run(True, 2))
    asyncio.run(run(False, 1))


def test_a_lost_attempt_made_over_the_local_session_resumes_it_in_place() -> None:
    """The attempt superseded the session this node's table holds: it is still the
    id's, and its queue is the primary here; nothing to fail over."""

    async def run() -> None:
        r, claims, copies = _claims()
        node = r.settings.node
        mine = Entry(node, 8, (node, B), ONLINE, True)
        r.table.adopt(Session(K, 8, False, node, "", 3600, 4, 0, queued=True))
        attempt = Claim(node, (node,), persistent=True, resume=True, floor=12).apply(mine)
        assert attempt is not None
        value = Claim(node, (node,), persistent=True, resume=True).apply(attempt)
        assert value is not None
        assert await claims._bring_here(_connect(), attempt, value) == "lost_attempt"
        assert copies.asked == []
        session = r.table.get(K)
        assert session is not None and session.epoch == 8

    asyncio.run(run())
