"""When the registry deletes the subscriptions of a session its table does not hold.

Two paths do: a connection's end reported after the table let its session go, and the
start-up sweep of clean sessions lost with a restart. In a cluster the table also lets
a session go when it hands it to another node, and a delete then would win over the new
owner's record everywhere (the fault test's long run lost a subscriber for good so).
These tests drive a real ``Registrar`` over an in-memory table; only the gossip and
msgstore calls are recorded instead of made, and the register's answer is a fake.
"""

from __future__ import annotations

import asyncio

from services.common.cluster_view import ClusterView
from services.common.metrics import MetricsRegistry
from services.common.session_key import SessionKey
from services.common.typed_settings import build
from services.node.schema import schema
from services.pb import common_pb2, gossip_pb2, msgstore_pb2
from services.registry.backends import Backends
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.engines.memory import MemoryEngine
from services.registry.recovery import recover, sweep_orphan_subs
from services.registry.registrar import Registrar
from services.registry.sessions import DeleteQueue, Policy, Session, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub

A: SessionKey = ("", "a")
B: SessionKey = ("", "b")
C: SessionKey = ("", "c")


class _Gossip(Backends):
    """The gossip half of the backends, recorded: which subscription records name which
    node, and which deletes were written. No queue exists."""

    def __init__(self, owners: dict[SessionKey, str]) -> None:
        self.owners = owners
        self.deleted: list[SessionKey] = []
        self.queues: list[msgstore_pb2.QueueState] = []
        self.queues_deleted: list[tuple[SessionKey, int]] = []

    async def subs_owners(self) -> dict[bytes, str]:
        return {f"{k[0]}\0{k[1]}".encode(): node for k, node in self.owners.items()}

    async def put_meta(self, ops: list[gossip_pb2.MetaOp]) -> None:
        for op in ops:
            assert op.prefix == "subs" and op.delete, op
            mountpoint, _, client_id = op.key.decode().partition("\0")
            self.deleted.append((mountpoint, client_id))

    async def queue_pages(self):  # type: ignore[no-untyped-def]
        yield self.queues

    async def delete_queue(self, step: DeleteQueue) -> None:
        self.queues_deleted.append((step.key, step.epoch))


class _Register:
    """The cluster side's answer for each id: is it this node's to drop?"""

    def __init__(self, ours: set[SessionKey], unread: int = 0) -> None:
        self.ours = ours
        self.unread = unread  # reads that cannot be made yet (no majority, peers unknown)
        self.asked: list[tuple[SessionKey, int | None]] = []

    def active(self) -> bool:
        return True

    async def subscriptions_ours(self, key: SessionKey, epoch: int | None) -> bool | None:
        self.asked.append((key, epoch))
        if self.unread:
            self.unread -= 1
            return None
        return key in self.ours


def _registrar(gossip: _Gossip, members: int = 1) -> Registrar:
    settings = build(RegistrySettings, schema().empty())
    table = SessionTable(Policy())
    committer = Committer(SessionStore(MemoryEngine()), table.get)
    r = Registrar(settings, table, committer, gossip, WatchHub(), MetricsRegistry())
    node = settings.node
    names = frozenset({node, *(f"other{i}" for i in range(members - 1))})
    view = ClusterView(names, names, True, True)
    r.cluster = lambda: view
    return r


def test_alone_the_start_up_sweep_drops_orphans_at_once() -> None:
    async def run() -> None:
        gossip = _Gossip({})
        r = _registrar(gossip)
        gossip.owners = {A: r.settings.node, B: "elsewhere"}
        assert await recover(r, [], 0) == []
        assert gossip.deleted == [A]

    asyncio.run(run())


def test_a_cluster_member_drops_orphans_only_once_the_register_says_they_are_its_own() -> None:
    async def run() -> None:
        gossip = _Gossip({})
        r = _registrar(gossip, members=3)
        node = r.settings.node
        gossip.owners = {A: node, B: node, C: node}
        deferred = await recover(r, [], 0)
        assert sorted(deferred) == [A, B, C] and gossip.deleted == []
        register = _Register({A, C})
        r.claims = register
        # C registered again meanwhile: its subscriptions are its own now
        r.table.load([Session(C, 7, True, node, "L1", 0, 4, 0)], 0)
        assert await sweep_orphan_subs(r, deferred) == 1
        assert gossip.deleted == [A]  # B moved to another node: kept
        assert sorted(register.asked) == [(A, None), (B, None)]

    asyncio.run(run())


def test_a_late_end_report_drops_nothing_of_a_session_handed_over() -> None:
    async def run() -> None:
        gossip = _Gossip({})
        r = _registrar(gossip, members=3)
        # the handover fenced the id at the new owner's epoch: no register read needed
        r.fence(A, 9)
        assert not await r.disconnected(A, 8, 0)
        assert gossip.deleted == []
        # no fence (evicted, or another path): the register decides
        register = _Register({C})
        r.claims = register
        assert not await r.disconnected(B, 8, 0)
        assert not await r.disconnected(C, 8, 0)
        assert gossip.deleted == [C]
        assert register.asked == [(B, 8), (C, 8)]
        # a report that says the connection never subscribed asks nothing
        assert not await r.disconnected(("", "d"), 8, 0, drop_subs=False)
        assert register.asked == [(B, 8), (C, 8)]

    asyncio.run(run())


def test_an_orphan_queue_is_deleted_at_its_own_epoch_not_the_reserved_one() -> None:
    """The copy's tombstone keeps the delete's epoch. At the reserved epoch (above every
    epoch this node issued) it fenced the primary another node had failed the session
    over to meanwhile, at a lower epoch: that primary stepped down, its queue no longer
    replicated (the fault test's long run, s4 at 15:54:32)."""

    async def run() -> None:
        gossip = _Gossip({})
        r = _registrar(gossip)
        node = r.settings.node

        def queue(client_id: str, epoch: int, *replicas: str) -> msgstore_pb2.QueueState:
            return msgstore_pb2.QueueState(
                key=common_pb2.SessionKey(client_id=client_id),
                exists=True,
                epoch=epoch,
                replicas=list(replicas),
            )

        gossip.queues = [
            queue("a", 46255, node, "other1"),  # this node was its primary
            queue("b", 5000, "other1", node),  # a replica of another's queue: stays
            queue("c", 90000),  # newer than anything reserved (a wiped registry)
        ]
        await recover(r, [], 47279)
        assert gossip.queues_deleted == [(A, 46255), (C, 47279)]

    asyncio.run(run())


def test_the_sweep_tries_again_while_the_register_cannot_be_read() -> None:
    """A node just started may not reach its peers' registries yet: a key it cannot
    check is not given up (a clean session's subscriptions would stay forever, routing
    its topics to nobody), it is checked again until the register answers."""

    async def run() -> None:
        gossip = _Gossip({})
        r = _registrar(gossip, members=3)
        node = r.settings.node
        gossip.owners = {A: node, B: node}
        deferred = await recover(r, [], 0)
        register = _Register({A}, unread=3)
        r.claims = register
        assert await sweep_orphan_subs(r, deferred, patience=10.0) == 1
        assert gossip.deleted == [A]
        assert len(register.asked) == 5  # 3 unanswered, then one answer for each
        # and one that never answers is kept once patience runs out
        gossip.deleted.clear()
        never = _Register({A, B}, unread=10**6)
        r.claims = never
        assert await sweep_orphan_subs(r, [A], patience=0.0) == 0
        assert gossip.deleted == []

    asyncio.run(run())
