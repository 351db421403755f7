"""The Cluster gRPC servicer: other nodes' calls, handed to the :class:`ClusterNode`.

The cookie was checked before any of these runs (``peer.channel.CookieCheck``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from services.gossip.cluster.node import ClusterNode
from services.gossip.cluster.replicator import Replicator
from services.pb import cluster_pb2, cluster_pb2_grpc


class ClusterServicer(cluster_pb2_grpc.ClusterServicer):  # type: ignore[misc]
    def __init__(self, node: ClusterNode, replicator: Replicator) -> None:
        self.node = node
        self.replicator = replicator

    async def Exchange(
        self, request: cluster_pb2.Digest, context: Any
    ) -> cluster_pb2.ExchangeReply:
        return self.replicator.exchange(request)

    async def Push(self, request: cluster_pb2.MetaBatch, context: Any) -> cluster_pb2.PushReply:
        return await self.replicator.push(request)

    async def Join(self, request: cluster_pb2.JoinRequest, context: Any) -> cluster_pb2.JoinReply:
        return self.node.join_request(request)

    async def Sync(self, request: cluster_pb2.MemberState, context: Any) -> cluster_pb2.MemberState:
        self.node.merge_state(request)
        return self.node.member_state()

    async def Link(
        self, request_iterator: AsyncIterator[cluster_pb2.Envelope], context: Any
    ) -> AsyncIterator[cluster_pb2.Envelope]:
        await context.send_initial_metadata(())  # the caller knows the link is up
        async for envelope in request_iterator:
            self.node.receive(envelope)
        return
        yield  # an async generator: this side sends nothing on the caller's link
