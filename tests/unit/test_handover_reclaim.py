"""A session handed over (TAKE) but never released comes back to the node that still
holds its queue (``Giver.reclaim``): the claim that took it failed after the TAKE, and
the next CONNECT resumes it here instead of starting afresh (the S4 race test's lost
session_present).

A real ``Registrar`` and ``Giver`` over an in-memory table; the msgstore read is a fake."""

from __future__ import annotations

import asyncio

from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.common.typed_settings import build
from services.node.schema import schema
from services.pb import common_pb2, quorum_pb2
from services.registry.cluster.handover import Giver
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.engines.memory import MemoryEngine
from services.registry.registrar import Registrar
from services.registry.sessions import Connect, Policy, Session, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub
from tests.support.queue_read import QueueRead

K: SessionKey = ("", "s")


def _request(phase: int, epoch: int) -> quorum_pb2.HandoverRequest:
    return quorum_pb2.HandoverRequest(
        key=common_pb2.SessionKey(client_id="s"), epoch=epoch, node="b", phase=phase
    )


def _giver() -> tuple[Registrar, Giver]:
    settings = build(RegistrySettings, schema().empty())
    table = SessionTable(Policy())
    committer = Committer(SessionStore(MemoryEngine()), table.get)
    r = Registrar(settings, table, committer, QueueRead(3), WatchHub(), MetricsRegistry())
    table.load([Session(K, 7, False, "a", "", 3600, 5, 0, queued=True)], 0)
    return r, Giver(r)


def test_a_session_given_but_not_released_is_resumed_here() -> None:
    async def run() -> None:
        r, giver = _giver()
        taken = await giver.handle(_request(quorum_pb2.HANDOVER_TAKE, 9))
        assert taken.present and r.table.get(K) is None
        back = await giver.reclaim(K)
        assert back is not None and r.table.get(K) == back
        assert (back.epoch, back.online, back.queued, back.session_expiry) == (7, False, True, 3600)
        # the registration under way here resumes it at its claim's epoch
        c = Connect(K, "a", "L2", clean_start=False, session_expiry=3600, proto_ver=5)
        plan = r.table.plan_register(c, r.clock(), 10)
        assert plan.session_present
        assert await giver.reclaim(K) is None  # once only

    asyncio.run(run())


def test_a_released_session_is_not_reclaimed() -> None:
    async def run() -> None:
        r, giver = _giver()
        await giver.handle(_request(quorum_pb2.HANDOVER_TAKE, 9))
        r.queues.delete = _no_delete  # type: ignore[method-assign]
        await giver.handle(_request(quorum_pb2.HANDOVER_RELEASE, 9))
        assert await giver.reclaim(K) is None
        assert r.table.get(K) is None

    asyncio.run(run())


def test_nothing_is_reclaimed_over_a_session_the_table_holds_again() -> None:
    async def run() -> None:
        r, giver = _giver()
        await giver.handle(_request(quorum_pb2.HANDOVER_TAKE, 9))
        newer = Session(K, 11, True, "a", "L3", 0, 5, 0)
        r.table.adopt(newer)
        assert await giver.reclaim(K) is None
        assert r.table.get(K) == newer

    asyncio.run(run())


async def _no_delete(*_: object) -> None:
    return None


def test_a_take_below_this_nodes_own_winning_claim_is_refused() -> None:
    # B's claim at 9 lost to this node's at 10, whose registration will resume the
    # session here: B's late TAKE must not carry it off
    async def run() -> None:
        r, giver = _giver()
        giver.claimed(K, 10)
        refused = await giver.handle(_request(quorum_pb2.HANDOVER_TAKE, 9))
        assert refused.error == "claimed here at epoch 10"
        assert r.table.get(K) is not None
        taken = await giver.handle(_request(quorum_pb2.HANDOVER_TAKE, 11))  # a newer claim
        assert taken.present and r.table.get(K) is None

    asyncio.run(run())
