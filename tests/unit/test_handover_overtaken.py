"""A TAKE that waits for the old connection to go must not carry off what this node's own,
newer claim put in the table meanwhile.

The fault test lost a session so: node f2 held it online when f1's claim (epoch 45187)
asked for it; f2's giver told the old connection to go and waited (the id's lock held,
the claim lock not). f1 died, the client came back to f2, whose claim (45188) failed the
queue over and adopted the session, offline, at 45187. The giver then woke, read the
table again, and forgot the adopted session as the one it had taken: f2's registration
found nothing and answered session_present = 0.

A real ``Registrar`` and ``Giver`` over an in-memory table, and a listener's watch stream
that receives the takeover and never answers it."""

from __future__ import annotations

import asyncio

from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.common.typed_settings import build
from services.node.schema import schema
from services.pb import common_pb2, quorum_pb2, registry_pb2
from services.registry.cluster.handover import Giver, Taken, adopted
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.engines.memory import MemoryEngine
from services.registry.registrar import Registrar
from services.registry.sessions import Policy, Session, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub
from tests.support.queue_read import QueueRead

K: SessionKey = ("", "s")


def _take_request(epoch: int) -> quorum_pb2.HandoverRequest:
    return quorum_pb2.HandoverRequest(
        key=common_pb2.SessionKey(client_id="s"), epoch=epoch, node="b",
        phase=quorum_pb2.HANDOVER_TAKE,
    )  # fmt: skip


class _Node:
    """A registrar holding ``K`` online (epoch 7, listener L1) and that listener's watch
    stream, which takes commands and answers none."""

    def __init__(self) -> None:
        settings = build(RegistrySettings, schema().empty())
        self.table = SessionTable(Policy())
        committer = Committer(SessionStore(MemoryEngine()), self.table.get)
        hub = WatchHub()
        metrics = MetricsRegistry()
        self.registrar = Registrar(settings, self.table, committer, QueueRead(1), hub, metrics)
        self.table.load([Session(K, 7, True, "a", "L1", 3600, 4, 0, queued=True)], 0)
        self.giver = Giver(self.registrar)
        self.told: list[registry_pb2.RegistryCommand] = []

        async def listener() -> None:
            async for command in hub.stream("L1", "a"):
                self.told.append(command)

        self.watching = asyncio.create_task(listener())

    async def take(self, epoch: int) -> asyncio.Task[quorum_pb2.HandoverReply]:
        """Start a TAKE; return once the old connection has been told to go."""
        await asyncio.sleep(0)  # the watch stream is open
        task = asyncio.create_task(self.giver.handle(_take_request(epoch)))
        while not self.told:
            await asyncio.sleep(0.01)
        return task


def test_a_take_overtaken_by_this_nodes_own_claim_is_refused_and_leaves_its_session() -> None:
    async def run() -> None:
        n = _Node()
        take = await n.take(9)
        # Meanwhile this node's own claim (epoch 10) fails the queue over and adopts the
        # session, offline, one below its epoch (``Claims._fail_over``).
        n.giver.claimed(K, 10)
        n.table.demote(K)
        n.table.adopt(adopted(K, "a", 9, Taken(True, True, 3600, 4), n.registrar.clock()))
        n.registrar.takeovers.ended(K, 7)  # the wait ends
        reply = await take
        assert reply.error == "claimed here at epoch 10", reply
        kept = n.table.get(K)
        assert kept is not None and kept.epoch == 9 and not kept.online and kept.queued
        n.watching.cancel()

    asyncio.run(run())


def test_a_take_whose_session_stayed_takes_it() -> None:
    async def run() -> None:
        n = _Node()
        take = await n.take(9)
        n.registrar.takeovers.ended(K, 7)
        reply = await take
        assert not reply.error and reply.present and reply.persistent
        assert [e.seq for e in reply.entries] == [1]
        assert n.table.get(K) is None  # handed over
        n.watching.cancel()

    asyncio.run(run())
