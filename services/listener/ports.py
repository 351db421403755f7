"""How a client connection and the broker see each other: two small Protocols.

The connection (``connection``, ``executor``) knows the broker only as a
:class:`BrokerPort`, and the broker and what it drives (``lifecycle``, ``publish_ack``,
``wills``) know a connection only as a :class:`ClientPort`. Neither module imports the
other, so a new kind of client (a forwarded session, a test double) or a new broker
front (another listener process) plugs in without touching either side.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from services.common.metrics import Child
from services.common.session_key import SessionKey
from services.listener.flow import FlowLimits
from services.listener.mqtt.types import Will
from services.listener.session.actions import (
    Ended,
    Register,
    SubscribeRequest,
    UnsubscribeRequest,
)
from services.listener.session.messages import Message, OutboundMessage
from services.listener.store_client import StoreClient
from services.listener.trace import Trace
from services.pb import msgstore_pb2


class ClientPort(Protocol):
    """A client connection as the broker drives it."""

    sid: SessionKey | None
    epoch: int
    persistent: bool
    closed: bool
    peer: str
    resuming: bool
    appending: int
    """Queue appends for this session that the store has not answered yet."""
    tracing: list[Trace] | None
    """The ``trace client`` runs of this client id, attached to the connection."""

    def deliver(self, out: OutboundMessage) -> None: ...

    def backlog(self) -> int: ...

    def hold_back(self, publisher: ClientPort) -> None: ...

    def registered(
        self, ok: bool, epoch: int, session_present: bool, persistent: bool, reason_code: int
    ) -> None: ...

    def resume(
        self, queued: Sequence[OutboundMessage], inbound: Sequence[int], pubrel: Sequence[int]
    ) -> None: ...

    def routed(self, token: int, reason_code: int, reason: str = ...) -> None:
        """The outcome of a QoS >= 1 publish; ``reason``: why, when it failed (logged)."""
        ...

    def subscribed(self, packet_id: int, codes: Sequence[int]) -> None: ...

    def unsubscribed(self, packet_id: int, codes: Sequence[int]) -> None: ...

    def takeover(self) -> None: ...

    def shutdown(self) -> None: ...

    def fail(self, reason_code: int, reason: str) -> None: ...


class QueueStore(Protocol):
    """The msgstore as a session's lifecycle uses it (``store_client.StoreClient``)."""

    def settled(self) -> bool: ...

    def flush(self) -> asyncio.Future[None]: ...

    async def read(
        self, mountpoint: str, client_id: str, epoch: int, after_seq: int, max_entries: int = ...
    ) -> msgstore_pb2.ReadReply: ...


class BrokerPort(Protocol):
    """The broker as a client connection uses it."""

    store: StoreClient
    flow: FlowLimits
    msg_id_source: Callable[[], str]
    delivered_qos: list[Child]

    def register(self, client: ClientPort, req: Register) -> None: ...

    def ended(self, client: ClientPort, action: Ended) -> None: ...

    def route(self, msg: Message, client: ClientPort | None, token: int | None) -> None: ...

    def subscribe(self, client: ClientPort, req: SubscribeRequest) -> None: ...

    def unsubscribe(self, client: ClientPort, req: UnsubscribeRequest) -> None: ...

    def publish_will(self, client: ClientPort, will: Will, delay: int) -> None: ...

    def dropped(self, client_id: str, out: OutboundMessage, reason: str) -> None: ...

    def shared_acked(self, out: OutboundMessage) -> None: ...
