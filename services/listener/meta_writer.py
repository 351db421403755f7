"""The listener's writes to gossip's metadata: subscriptions and retained messages.

A session's subscriptions are written whole, under its session key, after each
SUBSCRIBE or UNSUBSCRIBE (the local routing table already has them: see ``Broker``).
Two things about those writes matter to the session's end, which the registry decides
(``lifecycle``):

- ``subscribed``: the sessions that wrote subscriptions since they last started fresh.
  The registry drops an ended clean session's subscriptions only if it has some, so a
  session that never subscribed costs the metadata nothing.
- ``pending``: a session's end is reported only after its subscription writes are in,
  or the registry's clean-up could race an older write and lose.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from services.common import log
from services.common.grpcutil import CallFailed, rpc_failed
from services.common.lane_client import LaneClient, call_or_grpc
from services.common.session_key import SessionKey
from services.listener import convert
from services.listener.routing.model import SubOptions
from services.listener.session.messages import Message
from services.pb import gossip_pb2, gossip_pb2_grpc

PUT_TIMEOUT = 10.0


class MetaWriter:
    __slots__ = ("gossip", "lane", "node", "pending", "subscribed")

    def __init__(self, gossip: gossip_pb2_grpc.GossipStub, node: str) -> None:
        self.gossip = gossip
        # gossip's call lane (``services.common.lane``), set when it listens on a unix
        # socket: a Put per SUBSCRIBE costs far less there than over gRPC.
        self.lane: LaneClient | None = None
        self.node = node
        self.subscribed: set[SessionKey] = set()
        self.pending: dict[SessionKey, list[asyncio.Future[None]]] = {}

    def put_subscriptions(self, key: SessionKey, subs: dict[str, SubOptions]) -> Awaitable[bool]:
        """Write ``key``'s whole subscription set (deleted when empty); False on failure.

        The write is registered now (``pending``, ``subscribed``), not when the returned
        coroutine first runs, so a session that ends right after its SUBSCRIBE reports its
        end only after the write."""
        meta_key = convert.meta_key(*key)
        op = (
            gossip_pb2.MetaOp(
                prefix="subs", key=meta_key, value=convert.subs_to_pb(self.node, subs)
            )
            if subs
            else gossip_pb2.MetaOp(prefix="subs", key=meta_key, delete=True)
        )
        self.subscribed.add(key)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        writes = self.pending.setdefault(key, [])
        writes.append(done)
        return self._put(key, op, done, writes)

    async def _put(
        self,
        key: SessionKey,
        op: gossip_pb2.MetaOp,
        done: asyncio.Future[None],
        writes: list[asyncio.Future[None]],
    ) -> bool:
        try:
            await self._send(gossip_pb2.PutRequest(ops=[op]))
        except CallFailed as exc:
            rpc_failed("gossip", "Put", exc, "error")
            return False
        finally:
            done.set_result(None)
            writes.remove(done)
            if not writes and self.pending.get(key) is writes:
                del self.pending[key]
        return True

    def put_retained(self, msg: Message) -> asyncio.Future[Any]:
        """Replicate ``msg`` as its topic's retained message (cleared if empty)."""
        key = convert.meta_key(msg.mountpoint, msg.topic)
        if msg.payload:
            value = convert.message_bytes(msg, self.node)
            op = gossip_pb2.MetaOp(prefix="retain", key=key, value=value)
        else:
            op = gossip_pb2.MetaOp(prefix="retain", key=key, delete=True)
        log.emit("retain.updated", topic=msg.topic, size=len(msg.payload), cleared=not msg.payload)
        return asyncio.ensure_future(self._send(gossip_pb2.PutRequest(ops=[op])))

    async def _send(self, request: gossip_pb2.PutRequest) -> None:
        put = self.gossip.Put
        await call_or_grpc(
            self.lane, "Put", request, PUT_TIMEOUT, lambda: put(request, timeout=PUT_TIMEOUT)
        )


def log_put_failure(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        return
    exc = fut.exception()
    if isinstance(exc, CallFailed):
        rpc_failed("gossip", "Put", exc, "error")
    elif exc is not None:
        raise exc
