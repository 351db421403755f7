"""Builders shared by the session tests (no tests here).

A test drives a real ``Session`` (no mocks): ``connected(version)`` runs the CONNECT,
the registry answer and returns the session with the actions of the handshake
dropped, so each test starts from a CONNECTED session and asserts on what comes next.
``Recorder`` is a scriptable ``Authorizer`` that remembers what it was asked.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from services.listener.mqtt.encoder import encode
from services.listener.mqtt.types import NO_PROPERTIES, Connect, Packet, Properties, Will
from services.listener.session.actions import Action, Send, SendPublish
from services.listener.session.core import Session, SessionState
from services.listener.session.limits import SessionLimits
from services.listener.session.messages import Message, OutboundMessage

T = TypeVar("T")

PEER = "127.0.0.1:50000"
VERSIONS = (3, 4, 5)
V3_V4 = (3, 4)


@dataclass
class Recorder:
    """An Authorizer with fixed answers and a log of the questions."""

    connect_code: int = 0
    deny_publish: frozenset[str] = frozenset()
    deny_subscribe: frozenset[str] = frozenset()
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None, peer: str
    ) -> int:
        self.calls.append(("authenticate", client_id, username, password, peer))
        return self.connect_code

    def authorize_publish(
        self, client_id: str, username: str | None, mountpoint: str, topic: str
    ) -> bool:
        self.calls.append(("publish", client_id, username, mountpoint, topic))
        return topic not in self.deny_publish

    def authorize_subscribe(
        self, client_id: str, username: str | None, mountpoint: str, topic_filter: str
    ) -> bool:
        self.calls.append(("subscribe", client_id, username, mountpoint, topic_filter))
        return topic_filter not in self.deny_subscribe


def id_source(prefix: str = "m") -> Any:
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter)}"


def new_session(
    limits: SessionLimits | None = None, auth: Recorder | None = None, now: float = 0.0
) -> Session:
    session = Session(limits or SessionLimits(), auth or Recorder(), PEER, id_source(), now)
    session.start(now)
    return session


def connect_packet(
    version: int = 5,
    client_id: str = "c1",
    clean: bool = True,
    keepalive: int = 60,
    will: Will | None = None,
    username: str | None = None,
    password: bytes | None = None,
    properties: Properties = NO_PROPERTIES,
) -> Connect:
    name = "MQIsdp" if version == 3 else "MQTT"
    return Connect(name, version, clean, keepalive, client_id, will, username, password, properties)


def connected(
    version: int = 5,
    limits: SessionLimits | None = None,
    auth: Recorder | None = None,
    persistent: bool = False,
    now: float = 0.0,
    **connect: Any,
) -> Session:
    """A session past its successful CONNACK."""
    if persistent:
        connect.setdefault("clean", False)
    session = new_session(limits, auth, now)
    session.handle_packet(connect_packet(version, **connect), now)
    assert session.state is SessionState.REGISTERING
    session.handle_registered(True, 1, persistent, persistent, 0, now)
    assert session.connected
    return session


def of(actions: Sequence[Action], kind: type[T]) -> list[T]:
    return [a for a in actions if isinstance(a, kind)]


def packets(actions: Sequence[Action]) -> list[Packet]:
    """What goes to the client, in order (Send and SendPublish)."""
    out: list[Packet] = []
    for action in actions:
        if isinstance(action, Send | SendPublish):
            out.append(action.packet)
    return out


def check_encodable(session: Session, actions: Sequence[Action]) -> None:
    """Everything the session sends must be expressible in the client's version."""
    for packet in packets(actions):
        encode(packet, session.protocol_version)


def message(
    topic: str = "t/1",
    payload: bytes = b"x",
    qos: int = 1,
    msg_id: str = "m",
    expires_at: float | None = None,
    properties: Properties = NO_PROPERTIES,
) -> Message:
    return Message(msg_id, topic, payload, qos, False, "pub", "", 0.0, expires_at, properties)


def outbound(
    topic: str = "t/1",
    qos: int = 1,
    seq: int | None = None,
    dup: bool = False,
    msg_id: str = "m",
    payload: bytes = b"x",
    expires_at: float | None = None,
    sub_ids: tuple[int, ...] = (),
    retain: bool = False,
) -> OutboundMessage:
    msg = message(topic, payload, qos, msg_id, expires_at)
    return OutboundMessage(msg, qos, retain, sub_ids, seq, dup)
