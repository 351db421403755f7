"""The registry's inter-node service: acceptor votes and session handovers.

It listens on ``cluster.registry_listen`` behind the cookie check of
:mod:`services.common.peer.channel`, so a node with the wrong cookie changes no vote.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from services.pb import quorum_pb2, quorum_pb2_grpc, registry_pb2
from services.registry.cluster import codec
from services.registry.cluster.acceptor_store import AcceptorShell
from services.registry.cluster.handover import Giver
from services.registry.quorum.messages import AcceptReply, PrepareReply
from services.registry.registrar import ClaimRefused

Context = grpc.aio.ServicerContext[Any, Any]


class QuorumServicer(quorum_pb2_grpc.QuorumServicer):  # type: ignore[misc]
    def __init__(
        self,
        acceptor: AcceptorShell,
        giver: Giver,
        sessions: Callable[[registry_pb2.SessionsRequest], registry_pb2.SessionsReply],
    ) -> None:
        self.acceptor = acceptor
        self.giver = giver
        self.sessions = sessions
        # Passes an eviction on to ``relay_to`` (``Claims.relay``; start.py sets it once
        # the claims exist). Raises when that node cannot be reached.
        self.relay: Callable[[quorum_pb2.HandoverRequest], Awaitable[quorum_pb2.HandoverReply]]
        self.relay = _no_relay

    async def Prepare(
        self, request: quorum_pb2.PrepareRequest, context: Context
    ) -> quorum_pb2.PrepareReply:
        reply = await self.acceptor.step(codec.prepare_of(request))
        assert isinstance(reply, PrepareReply)
        return codec.prepare_reply_pb(reply)

    async def Accept(
        self, request: quorum_pb2.AcceptRequest, context: Context
    ) -> quorum_pb2.AcceptReply:
        reply = await self.acceptor.step(codec.accept_of(request))
        assert isinstance(reply, AcceptReply)
        return codec.accept_reply_pb(reply)

    async def Handover(
        self, request: quorum_pb2.HandoverRequest, context: Context
    ) -> quorum_pb2.HandoverReply:
        if request.relay_to:
            try:
                return await self.relay(request)
            except ClaimRefused as exc:  # not reached: the asker tries another member
                await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return await self.giver.handle(request)

    async def Merge(
        self, request: quorum_pb2.MergeRequest, context: Context
    ) -> quorum_pb2.MergeReply:
        return await self.giver.merge(request)

    async def Sessions(
        self, request: registry_pb2.SessionsRequest, context: Context
    ) -> registry_pb2.SessionsReply:
        return self.sessions(request)

    async def Keys(self, request: quorum_pb2.KeysRequest, context: Context) -> quorum_pb2.KeysReply:
        acceptor = self.acceptor.store.acceptor
        keys = acceptor.known_keys()
        limit = request.limit or len(keys)
        page = keys[request.after : request.after + limit]
        following = request.after + len(page)
        return quorum_pb2.KeysReply(
            keys=[codec.key_pb(k) for k in page],
            next=following if following < len(keys) else 0,
            catching_up=acceptor.catching_up,
        )


async def _no_relay(request: quorum_pb2.HandoverRequest) -> quorum_pb2.HandoverReply:
    raise ClaimRefused("this node relays nothing yet")
