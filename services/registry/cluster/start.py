"""Starting and stopping the registry's cluster side.

The inter-node server binds ``cluster.registry_listen`` and the registrar gets its
:class:`~services.registry.cluster.claims.Claims`. Once the view has other members, the
bound address goes into gossip (prefix ``registries``) so the other registries find it.
On a node that never joins a cluster all of it is idle: no claim, no gossip call.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from services.common.cluster_view import ClusterView
from services.common.peer import channel as peer_channel
from services.pb import gossip_pb2, quorum_pb2, quorum_pb2_grpc
from services.registry.backends import BackendError, Backends
from services.registry.cluster import catchup
from services.registry.cluster.acceptor_store import AcceptorShell, AcceptorStore
from services.registry.cluster.claims import Claims
from services.registry.cluster.handover import Giver
from services.registry.cluster.listing import Listing
from services.registry.cluster.orphans import Orphans
from services.registry.cluster.peers import PREFIX, Peers, record_key
from services.registry.cluster.quorum_client import QuorumClient
from services.registry.cluster.reconcile import Reconciler
from services.registry.cluster.servicer import QuorumServicer
from services.registry.config import RegistrySettings
from services.registry.engines.journal_engine import JournalEngine
from services.registry.registrar import Registrar
from services.registry.servicer import local_sessions

STOP_GRACE = 1.0


@dataclass
class ClusterSide:
    store: AcceptorStore
    server: object
    peers: Peers
    quorum: QuorumClient
    claims: Claims
    reconciler: Reconciler
    tasks: list[asyncio.Task[None]]
    backends: Backends
    record: gossip_pb2.MetaOp  # this registry's entry under gossip prefix ``registries``
    gossiping: bool = False

    def on_view(self, view: ClusterView) -> None:
        """The view changed. Only once the node has other members does its registry
        say where it listens and follow where the others do: a node alone makes no
        gossip call for the cluster side."""
        self.reconciler.on_view(view)
        if len(view.members) > 1 and not self.gossiping:
            self.gossiping = True
            self.tasks.append(
                asyncio.create_task(self.peers.follow(self.backends.gossip), name="registry-peers")
            )
            self.tasks.append(
                asyncio.create_task(_advertise(self.backends, self.record), name="registry-ad")
            )

    def ready(self) -> bool:
        """Not while the acceptor catches up with the others (it cannot vote yet); a
        node alone has nobody to catch up with."""
        return (
            not self.store.acceptor.catching_up or len(self.claims.registrar.cluster().members) < 2
        )

    async def close(self) -> None:
        await self.reconciler.close()
        await self.claims.close()
        await self.quorum.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.server.stop(STOP_GRACE)  # type: ignore[attr-defined]
        await self.peers.close()
        self.store.close()


async def start(
    settings: RegistrySettings,
    registrar: Registrar,
    backends: Backends,
    members: Callable[[], Iterable[str]],
) -> ClusterSide:
    store = AcceptorStore(JournalEngine(settings.quorum_path, settings.map_size), settings.node)
    acceptor = AcceptorShell(store)
    server = peer_channel.create_server(settings.cookie)
    giver = Giver(registrar)

    servicer = QuorumServicer(acceptor, giver, functools.partial(local_sessions, registrar))
    quorum_pb2_grpc.add_QuorumServicer_to_server(servicer, server)
    host = settings.registry_listen.rpartition(":")[0]
    port = server.add_insecure_port(settings.registry_listen)
    if port == 0:
        raise OSError(f"cannot bind cluster.registry_listen {settings.registry_listen}")
    await server.start()
    address = f"{host}:{port}"
    peers = Peers(settings.node, settings.cookie, address)
    quorum = QuorumClient(
        settings.node,
        acceptor,
        peers,
        members,
        settings.quorum_timeout,
        settings.rpc_timeout,
    )
    claims = Claims(registrar, quorum, peers, giver)
    reconciler = Reconciler(registrar, quorum, giver, claims.evict, claims.merge)
    claims.owe = reconciler.owe
    servicer.relay = claims.relay
    registrar.listing = Listing(peers, registrar.cluster, settings.rpc_timeout)
    record = quorum_pb2.RegistryRecord(
        node=settings.node, address=address, incarnation=store.incarnation
    )
    op = gossip_pb2.MetaOp(
        prefix=PREFIX, key=record_key(settings.node), value=record.SerializeToString()
    )
    tasks = [
        asyncio.create_task(
            catchup.run(acceptor, quorum, peers, registrar.cluster, settings.rpc_timeout),
            name="registry-catch-up",
        ),
        asyncio.create_task(reconciler.run(registrar.cluster), name="registry-owed"),
        asyncio.create_task(Orphans(claims).run(), name="registry-orphans"),
    ]
    registrar.claims = claims
    return ClusterSide(store, server, peers, quorum, claims, reconciler, tasks, backends, op)


async def _advertise(backends: Backends, op: gossip_pb2.MetaOp) -> None:
    """Write this registry's record, retrying until gossip takes it."""
    backoff = 0.1
    while True:
        try:
            await backends.put_meta([op])
            return
        except BackendError:
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
