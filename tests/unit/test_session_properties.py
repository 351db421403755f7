"""State-machine properties of the session (STYLE.md §10).

Two layers: an exhaustive table of (state, inbound packet type) -> next state for every
protocol version, and a Hypothesis search over random sequences of everything the host
can do to a session (packets, registry answers, routing answers, deliveries, timers,
congestion, takeover, errors) checking the invariants that must hold after every step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_session_support import VERSIONS, Recorder, connect_packet, connected, new_session

from services.listener.mqtt.encoder import encode
from services.listener.mqtt.errors import MalformedPacket, MQTTError, ProtocolError
from services.listener.mqtt.types import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Subscription,
    Unsuback,
    Unsubscribe,
    Will,
)
from services.listener.session.actions import (
    Action,
    Close,
    Dropped,
    Ended,
    Register,
    Route,
    Send,
    SendPublish,
    SubscribeRequest,
    UnsubscribeRequest,
)
from services.listener.session.core import Session, SessionState
from services.listener.session.limits import SessionLimits
from services.listener.session.messages import Message, OutboundMessage

S = SessionState

SAMPLES: dict[str, Packet] = {
    "connect": connect_packet(4),
    "connack": Connack(False, 0),
    "publish0": Publish("a", b"x", 0),
    "publish1": Publish("a", b"x", 1, packet_id=1),
    "publish2": Publish("a", b"x", 2, packet_id=2),
    "puback": Puback(1),
    "pubrec": Pubrec(1),
    "pubrel": Pubrel(1),
    "pubcomp": Pubcomp(1),
    "subscribe": Subscribe(1, (Subscription("a/#", 1),)),
    "suback": Suback(1, (0,)),
    "unsubscribe": Unsubscribe(1, ("a",)),
    "unsuback": Unsuback(1),
    "pingreq": Pingreq(),
    "pingresp": Pingresp(),
    "disconnect": Disconnect(),
    "auth": Auth(),
}

ACCEPTED_WHEN_CONNECTED = {
    "publish0", "publish1", "publish2", "puback", "pubrec", "pubrel", "pubcomp",
    "subscribe", "unsubscribe", "pingreq",
}  # fmt: skip


def expected_next(state: S, name: str) -> S:
    """The transition table: what each inbound packet does to each state."""
    if state is S.CONNECTING:
        return S.REGISTERING if name == "connect" else S.CLOSED  # [MQTT-3.1.0-1]
    if state is S.REGISTERING:
        return S.CLOSED if name == "connect" else S.REGISTERING  # [MQTT-3.1.0-2]; buffered
    if state is S.CONNECTED:
        return S.CONNECTED if name in ACCEPTED_WHEN_CONNECTED else S.CLOSED
    return S.CLOSED


def in_state(state: S, version: int) -> Session:
    if state is S.CONNECTING:
        return new_session()
    if state is S.REGISTERING:
        session = new_session()
        session.handle_packet(connect_packet(version), 0.0)
        return session
    session = connected(version)
    if state is S.CLOSED:
        session.handle_connection_lost(0.5)
    return session


@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.parametrize("state", list(S))
@pytest.mark.parametrize("version", VERSIONS)
def test_transition_table(version: int, state: S, name: str) -> None:
    session = in_state(state, version)
    pkt = SAMPLES[name]
    if name == "connect":
        pkt = connect_packet(version)
    actions = session.handle_packet(pkt, 1.0)
    assert session.state is expected_next(state, name)
    if state is S.CLOSED:
        assert actions == []
    if session.state is S.CLOSED and state is not S.CLOSED:
        assert [a for a in actions if isinstance(a, Close)], "every way to CLOSED closes"
    for action in actions:
        if isinstance(action, Send | SendPublish):
            encode(action.packet, session.protocol_version)


# -- random sequences ------------------------------------------------------------------------

TOPICS = st.sampled_from(["a", "a/b", "$SYS/x", "", "a/+", "#"])
FILTERS = st.sampled_from(["a", "a/#", "+/b", "$share/g/a", "a/#/b", "$share//x", "#"])
PIDS = st.integers(1, 4)


@st.composite
def properties(draw: st.DrawFn) -> Properties:
    return Properties(
        topic_alias=draw(st.none() | st.integers(0, 3)),
        message_expiry_interval=draw(st.none() | st.integers(0, 5)),
        subscription_identifiers=draw(st.sampled_from([(), (), (1,)])),
        session_expiry_interval=draw(st.none() | st.sampled_from([0, 10, 0xFFFFFFFF])),
        receive_maximum=draw(st.none() | st.integers(1, 3)),
        topic_alias_maximum=draw(st.none() | st.integers(0, 3)),
        maximum_packet_size=draw(st.none() | st.sampled_from([30, 1000])),
    )


@st.composite
def publishes(draw: st.DrawFn) -> Publish:
    qos = draw(st.integers(0, 2))
    pid = draw(PIDS) if qos else None
    dup = draw(st.booleans()) if qos else False
    props = draw(properties())
    props = Properties(
        topic_alias=props.topic_alias,
        message_expiry_interval=props.message_expiry_interval,
        subscription_identifiers=props.subscription_identifiers,
    )
    payload = draw(st.binary(max_size=40))
    return Publish(draw(TOPICS), payload, qos, draw(st.booleans()), dup, pid, props)


@st.composite
def connects(draw: st.DrawFn) -> Connect:
    version = draw(st.sampled_from(VERSIONS))
    will_topics = st.sampled_from(["w", "w/1", "a", "w/#"])
    will = draw(st.none() | st.builds(Will, will_topics, st.binary(max_size=8), st.integers(0, 2)))
    props = draw(properties()) if version == 5 else Properties()
    if version == 5:
        props = Properties(
            session_expiry_interval=props.session_expiry_interval,
            receive_maximum=props.receive_maximum,
            topic_alias_maximum=props.topic_alias_maximum,
            maximum_packet_size=props.maximum_packet_size,
        )
    return connect_packet(
        version,
        client_id=draw(st.sampled_from(["c1", "c1", "c1", "", "x" * 200])),
        clean=draw(st.booleans()),
        keepalive=draw(st.sampled_from([0, 5, 60])),
        will=will,
        properties=props,
    )


def packets_strategy() -> st.SearchStrategy[Packet]:
    subs = st.lists(st.builds(Subscription, FILTERS, st.integers(0, 2)), min_size=1, max_size=3)
    return st.one_of(
        publishes(),
        st.builds(Puback, PIDS),
        st.builds(Pubrec, PIDS, st.sampled_from([0, 0x80])),
        st.builds(Pubrel, PIDS),
        st.builds(Pubcomp, PIDS),
        st.builds(Subscribe, PIDS, subs.map(tuple)),
        st.builds(Unsubscribe, PIDS, st.lists(FILTERS, min_size=1, max_size=2).map(tuple)),
        st.just(Pingreq()),
        st.builds(Disconnect, st.sampled_from([0, 4]), st.builds(Properties)),
        connects(),
        st.sampled_from([Connack(False, 0), Auth(), Pingresp()]),
    )


def deliveries() -> st.SearchStrategy[OutboundMessage]:
    def build(qos: int, seq: int | None, dup: bool, size: int, expires: float | None) -> Any:
        msg = Message("m", "t", b"x" * size, qos, False, "p", "", 0.0, expires)
        return OutboundMessage(msg, qos, False, (), seq, dup)

    return st.builds(
        build,
        st.integers(0, 2),
        st.none() | st.integers(1, 70000),
        st.booleans(),
        st.sampled_from([0, 100]),
        st.none() | st.floats(0, 50),
    )


STEP = st.one_of(
    st.tuples(st.just("packet"), packets_strategy()),
    st.tuples(st.just("registered"), st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("routed"), st.integers(0, 5), st.sampled_from([0, 0x10, 0x80, 0x97])),
    st.tuples(st.just("answer"), st.integers(0, 5)),
    st.tuples(st.just("deliver"), deliveries()),
    st.tuples(st.just("congested"), st.booleans()),
    st.tuples(st.just("timeout"), st.sampled_from(["connect", "keepalive", "retry"])),
    st.tuples(st.just("resume"), st.lists(deliveries(), max_size=3), st.lists(PIDS, max_size=2)),
    st.tuples(st.sampled_from(["takeover", "lost", "shutdown"])),
    st.tuples(st.just("error"), st.sampled_from([MalformedPacket("m"), ProtocolError("p")])),
)

LIMITS = st.builds(
    SessionLimits,
    max_inflight_messages=st.integers(0, 3),
    max_online_messages=st.sampled_from([-1, 0, 2]),
    retry_interval=st.sampled_from([0.0, 5.0]),
    max_client_id_size=st.just(100),
    max_message_size=st.sampled_from([0, 20]),
    receive_max_broker=st.integers(1, 3),
    topic_alias_max_client=st.integers(0, 2),
    topic_alias_max_broker=st.integers(0, 2),
    max_qos=st.integers(0, 2),
    retain_available=st.booleans(),
    wildcard_subscription_available=st.booleans(),
    shared_subscription_available=st.booleans(),
    max_session_expiry_interval=st.sampled_from([-1, 5]),
    allowed_versions=st.sampled_from(
        [frozenset({3, 4, 5}), frozenset({3, 4, 5}), frozenset({4}), frozenset({5})]
    ),
)

ORDER = {S.CONNECTING: 0, S.REGISTERING: 1, S.CONNECTED: 2, S.CLOSED: 3}


def pubrel_seqs(queued: list[OutboundMessage]) -> list[int]:
    return [m.seq for m in queued if m.seq is not None and m.qos == 2 and m.dup]


class Checker:
    """Runs steps against one session and checks every invariant after each."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.now = 0.0
        self.connacks: list[Connack] = []
        self.registered = False
        self.refused_by_registry = False
        self.ended = 0
        self.tokens: list[int] = []
        self.requests: list[SubscribeRequest | UnsubscribeRequest] = []
        self.congested = False

    def step(self, step: tuple[Any, ...]) -> None:
        s = self.s
        self.now += 1.0
        before = s.state
        kind = step[0]
        calls: dict[str, Callable[[], list[Action]]] = {
            "packet": lambda: s.handle_packet(step[1], self.now),
            "registered": lambda: self._registered(step[1], step[2], step[3]),
            "routed": lambda: self._routed(step[1], step[2]),
            "answer": lambda: self._answer(step[1]),
            "deliver": lambda: s.deliver(step[1], self.now),
            "congested": lambda: self._congested(step[1]),
            "timeout": lambda: s.handle_timeout(step[1], self.now),
            "resume": lambda: s.resume(step[1], step[2], pubrel_seqs(step[1]), self.now),
            "takeover": lambda: s.handle_takeover(self.now),
            "lost": lambda: s.handle_connection_lost(self.now),
            "shutdown": lambda: s.handle_shutdown(self.now),
            "error": lambda: s.handle_protocol_error(step[1], self.now),
        }
        actions = calls[kind]()
        self.check(before, kind, step, actions)

    def _registered(self, ok: bool, present: bool, persistent: bool) -> list[Action]:
        if self.s.state is S.REGISTERING and not ok:
            self.refused_by_registry = True
        return self.s.handle_registered(ok, 1, present, persistent, 0 if ok else 0x88, self.now)

    def _routed(self, index: int, code: int) -> list[Action]:
        token = self.tokens.pop(index % len(self.tokens)) if self.tokens else index
        return self.s.handle_routed(token, code, self.now)

    def _answer(self, index: int) -> list[Action]:
        if not self.requests:
            return []
        request = self.requests.pop(index % len(self.requests))
        if isinstance(request, SubscribeRequest):
            codes = [sub.qos for sub in request.subscriptions]
            return self.s.handle_subscribed(request.packet_id, codes, self.now)
        codes = [0] * len(request.topic_filters)
        return self.s.handle_unsubscribed(request.packet_id, codes, self.now)

    def _congested(self, flag: bool) -> list[Action]:
        self.congested = flag
        return self.s.set_congested(flag, self.now)

    def check(self, before: S, kind: str, step: tuple[Any, ...], actions: list[Action]) -> None:
        s = self.s
        after = s.state
        assert ORDER[after] >= ORDER[before], f"{before} -> {after} goes back"
        if after is S.REGISTERING and before is not S.REGISTERING:
            assert kind == "packet" and isinstance(step[1], Connect)
        if after is S.CONNECTED and before is not S.CONNECTED:
            assert kind == "registered"
        if before is S.CLOSED:
            assert all(isinstance(a, Dropped) for a in actions) and (
                actions == [] or kind == "deliver"
            )
        for action in actions:
            self.check_action(action, before)
        if after is S.CLOSED and before is not S.CLOSED and kind != "lost":
            assert any(isinstance(a, Close) for a in actions)
        outbound = s.outbound
        if any(isinstance(a, SendPublish) and a.packet.qos and not a.packet.dup for a in actions):
            # PUBRELs resent on resume may hold more slots, but no new PUBLISH then.
            assert len(outbound.inflight) <= outbound.window, "[MQTT-3.3.4-9]"
        if after is S.CLOSED and self.registered and not self.refused_by_registry:
            assert self.ended == 1, "a registered connection must end exactly once"

    def check_action(self, action: Action, before: S) -> None:
        s = self.s
        version = s.protocol_version
        if isinstance(action, Register):
            assert not self.registered
            self.registered = True
        elif isinstance(action, Ended):
            self.ended += 1
            assert self.registered and self.ended == 1
        elif isinstance(action, Route) and action.token is not None:
            self.tokens.append(action.token)
        elif isinstance(action, SubscribeRequest | UnsubscribeRequest):
            self.requests.append(action)
        elif isinstance(action, Send | SendPublish):
            self.check_sent(action, version)

    def check_sent(self, action: Send | SendPublish, version: int) -> None:
        packet = action.packet
        wire = encode(packet, version)  # never an EncodeError
        accepted = bool(self.connacks) and self.connacks[0].reason_code == 0
        if isinstance(packet, Connack):
            assert not self.connacks, "at most one CONNACK [MQTT-3.2.0-2]"
            self.connacks.append(packet)
            return
        assert accepted, f"{type(packet).__name__} before a successful CONNACK [MQTT-3.2.0-1]"
        if isinstance(packet, Disconnect):
            assert version == 5, "no DISCONNECT from a 3.1.1 server"
        if isinstance(action, SendPublish):
            assert not self.congested, "no PUBLISH while the socket is congested"
            assert (action.packet.packet_id is None) == (action.packet.qos == 0)
            limit = self.s.outbound.max_packet_size
            assert limit is None or len(wire) <= limit, "[MQTT-3.1.2-24]"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    limits=LIMITS,
    deny=st.sets(st.sampled_from(["a", "a/#", "t"])),
    first=connects(),
    accept=st.tuples(st.just("registered"), st.just(True), st.booleans(), st.booleans()),
    steps=st.lists(STEP, max_size=30),
)
def test_random_sequences_keep_invariants(
    limits: SessionLimits,
    deny: set[str],
    first: Connect,
    accept: tuple[Any, ...],
    steps: list[tuple[Any, ...]],
) -> None:
    """Starts with a CONNECT and (mostly) its acceptance, then anything at all."""
    auth = Recorder(deny_publish=frozenset(deny), deny_subscribe=frozenset(deny))
    session = Session(limits, auth, "peer", iter(f"id{i}" for i in range(10_000)).__next__, 0.0)
    checker = Checker(session)
    checker.step(("packet", first))
    checker.step(accept)
    for step in steps:
        checker.step(step)


def test_checker_catches_a_broken_invariant() -> None:
    """The property test can fail: a second CONNACK is reported."""
    checker = Checker(connected(5))
    checker.connacks.append(Connack(False, 0))
    with pytest.raises(AssertionError, match="at most one CONNACK"):
        checker.check_sent(Send(Connack(False, 0)), 5)


def test_error_kinds_used_above_are_mqtt_errors() -> None:
    assert issubclass(MalformedPacket, MQTTError) and issubclass(ProtocolError, MQTTError)
