"""A handover whose old connection never confirmed its end hands the queue over as all
sent: the old connection may have written entries to its client whose delivered marks
never reached the queue, and the resume on the new node must replay them with DUP
[MQTT-3.3.1-1] (the fault test saw a QoS 1 copy resent without it).

A real ``Registrar`` and ``Giver`` over an in-memory table; the msgstore read is a fake,
and the old listener has no Watch stream, so the takeover goes unanswered."""

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
from services.registry.sessions import Policy, Session, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub
from tests.support.queue_read import QueueRead

K: SessionKey = ("", "s")


def _take(recovered: bool) -> quorum_pb2.HandoverReply:
    async def run() -> quorum_pb2.HandoverReply:
        settings = build(RegistrySettings, schema().empty())
        table = SessionTable(Policy())
        committer = Committer(SessionStore(MemoryEngine()), table.get)
        r = Registrar(
            settings,
            table,
            committer,
            QueueRead(5, delivered_upto=2),
            WatchHub(),
            MetricsRegistry(),
        )
        session = Session(K, 7, False, "a", "L1", 3600, 4, 0, recovered=recovered, queued=True)
        table.load([session], 0)
        return await Giver(r).handle(
            quorum_pb2.HandoverRequest(
                key=common_pb2.SessionKey(client_id="s"),
                epoch=9,
                node="b",
                phase=quorum_pb2.HANDOVER_TAKE,
            )
        )

    return asyncio.run(run())


def test_an_offline_session_hands_over_its_marks_as_they_are() -> None:
    reply = _take(recovered=False)
    assert reply.present and not reply.unconfirmed
    assert [e.seq for e in reply.entries] == [1, 2, 3, 4, 5]
    assert reply.delivered_upto == 2


def test_a_connection_whose_listener_is_gone_hands_over_every_entry_as_sent() -> None:
    # recovered: online when the registry restarted; its listener has no stream now
    reply = _take(recovered=True)
    assert reply.present and reply.unconfirmed
    assert reply.delivered_upto == 5
