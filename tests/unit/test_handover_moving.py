"""A newer claim's TAKE that arrives while this node's own claim is still moving the
session here waits for the move, then takes the session the move brought.

The S4 race test met the defect now fixed: node A's claim (epoch 45) had copied the
session's queue from its old owner and recorded the move in the register, and was still
waiting on the old owner's RELEASE before putting the session in its table, when node
C's claim (46) asked A for it. A's table held nothing, so C started the session afresh
(session_present = 0), while the messages sat in A's copy; a later CONNECT read that
copy at an older epoch and was refused (0x88) with no other CONNECT racing it.

A real ``Registrar`` and ``Giver`` over an in-memory table; the queue read is a
stand-in (``QueueRead``)."""

from __future__ import annotations

import asyncio

from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.common.typed_settings import build
from services.node.schema import schema
from services.pb import common_pb2, quorum_pb2
from services.registry.cluster.handover import Giver, Taken, adopted
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.engines.memory import MemoryEngine
from services.registry.registrar import Registrar
from services.registry.sessions import Policy, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub
from tests.support.queue_read import QueueRead

K: SessionKey = ("", "s")


def _request(epoch: int, phase: int = quorum_pb2.HANDOVER_TAKE) -> quorum_pb2.HandoverRequest:
    return quorum_pb2.HandoverRequest(
        key=common_pb2.SessionKey(client_id="s"), epoch=epoch, node="c", phase=phase
    )


def _node() -> tuple[Registrar, SessionTable, Giver]:
    settings = build(RegistrySettings, schema().empty())
    table = SessionTable(Policy())
    committer = Committer(SessionStore(MemoryEngine()), table.get)
    registrar = Registrar(settings, table, committer, QueueRead(3), WatchHub(), MetricsRegistry())
    return registrar, table, Giver(registrar)


def test_a_newer_take_waits_for_the_move_and_takes_what_it_brought() -> None:
    async def run() -> None:
        registrar, table, giver = _node()
        giver.claimed(K, 45)
        with giver.moving(K, 45):
            take = asyncio.create_task(giver.handle(_request(46)))
            await asyncio.sleep(0.05)
            assert not take.done()  # nothing in the table yet: it waits, not "absent"
            # the move ends as ``Claims._move_queue_here`` ends it
            taken = Taken(True, True, 3600, 5)
            table.adopt(adopted(K, "a", 44, taken, registrar.clock()))
        reply = await asyncio.wait_for(take, 5)
        assert not reply.error and reply.present and reply.persistent
        assert [e.seq for e in reply.entries] == [1, 2, 3]
        assert table.get(K) is None  # handed over to the newer claim

    asyncio.run(run())


def test_older_takes_and_releases_do_not_wait_for_a_move() -> None:
    async def run() -> None:
        _registrar, table, giver = _node()
        with giver.moving(K, 45):
            # an older claim's TAKE is judged at once (and refused by the newer claim)
            giver.claimed(K, 45)
            older = await asyncio.wait_for(giver.handle(_request(44)), 1)
            assert older.error == "claimed here at epoch 45"
            # a RELEASE of something this node never gave is answered at once
            release = await asyncio.wait_for(
                giver.handle(_request(46, quorum_pb2.HANDOVER_RELEASE)), 1
            )
            assert not release.present
        assert table.get(K) is None

    asyncio.run(run())


def test_without_a_move_a_take_finds_nothing_at_once() -> None:
    async def run() -> None:
        _registrar, _table, giver = _node()
        reply = await asyncio.wait_for(giver.handle(_request(46)), 1)
        assert not reply.error and not reply.present

    asyncio.run(run())
