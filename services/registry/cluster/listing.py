"""``session show`` across the cluster: every member's sessions, each client id once.

The node asked lists its own sessions and asks every other member that is up for theirs
(``Quorum.Sessions``, in parallel, bounded by ``registry.rpc_timeout``). A client id
listed by two nodes (an old owner that has not yet heard of the move) is shown once, with
the newest epoch, which is the directory's owner. Members down or not answering are
named in ``unreachable``, so a short list is never mistaken for a complete one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc

from services.common.cluster_view import ClusterView
from services.common.grpcutil import rpc_failed
from services.pb import registry_pb2
from services.registry.cluster.peers import Peers


class Listing:
    def __init__(self, peers: Peers, view: Callable[[], ClusterView], timeout: float) -> None:
        self.peers = peers
        self.view = view
        self.timeout = timeout

    async def gather(
        self, request: registry_pb2.SessionsRequest, own: registry_pb2.SessionsReply
    ) -> registry_pb2.SessionsReply:
        view = self.view()
        others = sorted(view.members - {self.peers.node})
        ask = registry_pb2.SessionsRequest(
            client_id=request.client_id, limit=request.limit, local=True
        )
        replies = await asyncio.gather(*(self._ask(node, ask) for node in others))
        newest: dict[tuple[str, str], registry_pb2.SessionInfo] = {}
        unreachable: list[str] = []
        for reply in (own, *replies):
            if isinstance(reply, str):
                unreachable.append(reply)
                continue
            for info in reply.sessions:
                k = (info.key.mountpoint, info.key.client_id)
                held = newest.get(k)
                if held is None or info.epoch > held.epoch:
                    newest[k] = info
        listed = [newest[k] for k in sorted(newest)]
        if request.limit:
            listed = listed[: request.limit]
        return registry_pb2.SessionsReply(sessions=listed, unreachable=unreachable)

    async def _ask(
        self, node: str, request: registry_pb2.SessionsRequest
    ) -> registry_pb2.SessionsReply | str:
        """Its sessions, or its name when it cannot say."""
        stub = self.peers.stub(node)
        if stub is None or node not in self.view().up:
            return node
        try:
            reply: registry_pb2.SessionsReply = await stub.Sessions(
                request, timeout=self.timeout, metadata=self.peers.metadata(), wait_for_ready=True
            )
        except grpc.aio.AioRpcError as exc:
            rpc_failed(f"registry@{node}", "Sessions", exc, "warning")
            return node
        return reply
