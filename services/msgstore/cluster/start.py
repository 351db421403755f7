"""Starting and stopping the msgstore's cluster side (replicated queues only).

With ``msgstore.replication_factor = 1`` none of this runs: no port, no gossip call.
Otherwise the inter-node server binds ``cluster.msgstore_listen`` (``Replica``, behind
the cookie check), the bound address goes into gossip under prefix ``msgstores`` so the
other msgstores find it, and the queues this node is the primary of start replicating.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import grpc

from services.common import grpcutil
from services.common.grpcutil import rpc_failed
from services.common.peer import channel as peer_channel
from services.common.peer.book import PeerBook
from services.msgstore.cluster.replicator import ReplicaPeerStub, Replicator
from services.msgstore.cluster.servicer import Failover, ReplicaServicer, add_to_server
from services.msgstore.committer import Committer
from services.msgstore.config import MsgstoreSettings
from services.msgstore.queue import QueueStore
from services.msgstore.replica_reads import replicated_here
from services.pb import gossip_pb2, gossip_pb2_grpc
from services.pb.msgstore_pb2_grpc import ReplicaStub

PREFIX = "msgstores"
STOP_GRACE = 1.0
RPC_TIMEOUT = 5.0


@dataclass
class ClusterSide:
    server: grpc.aio.Server
    peers: PeerBook[ReplicaStub]
    replicator: Replicator
    failover: Failover
    tasks: list[asyncio.Task[None]]
    gossip: grpc.aio.Channel

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.replicator.close()
        await self.server.stop(STOP_GRACE)
        await self.peers.close()
        await self.gossip.close(None)


async def start(settings: MsgstoreSettings, store: QueueStore, committer: Committer) -> ClusterSide:
    server = peer_channel.create_server(settings.cookie)
    host = settings.listen.rpartition(":")[0]
    port = server.add_insecure_port(settings.listen)
    if port == 0:
        raise OSError(f"cannot bind cluster.msgstore_listen {settings.listen}")
    address = f"{host}:{port}"
    peers: PeerBook[ReplicaStub] = PeerBook(
        settings.nodename, settings.cookie, address, PREFIX, ReplicaPeerStub
    )
    replicator = Replicator(
        settings.nodename, store, committer, peers, settings.write_quorum,
        settings.failover_timeout, RPC_TIMEOUT,
    )  # fmt: skip
    failover = Failover(
        settings.nodename, store, committer, peers, replicator, settings.write_quorum, RPC_TIMEOUT
    )
    replica = ReplicaServicer(store, committer, replicator)
    add_to_server(replica, server)
    await server.start()
    gossip_channel = grpcutil.channel(settings.gossip_address)
    gossip = gossip_pb2_grpc.GossipStub(gossip_channel)
    tasks = [
        asyncio.create_task(peers.follow(gossip), name="msgstore-peers"),
        asyncio.create_task(_advertise(gossip, peers.record(time.time_ns())), name="msgstore-ad"),
    ]
    for sid in await asyncio.to_thread(replicated_here, store, settings.nodename):
        await replicator.opened(sid, continuing=False)
    return ClusterSide(server, peers, replicator, failover, tasks, gossip_channel)


async def _advertise(gossip: gossip_pb2_grpc.GossipStub, op: gossip_pb2.MetaOp) -> None:
    """Write this msgstore's record, retrying until gossip takes it."""
    backoff = 0.1
    while True:
        try:
            await gossip.Put(
                gossip_pb2.PutRequest(ops=[op]), timeout=RPC_TIMEOUT, wait_for_ready=True
            )
            return
        except grpc.aio.AioRpcError as exc:
            rpc_failed("gossip", "Put", exc, "info")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)
