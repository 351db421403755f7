"""CONNECT: validate, authenticate, ask the registry; later, CONNACK (``accept``).

Theory of operation: checks run in the order a client can fix them, each refusing
through ``Session.fail`` with the reason code the spec names (CONNACK 0x84 / return code
1 for a version this listener does not speak, 0x85 / 2 for a client id, 0x8C for an
enhanced authentication method, 0x86 / 4 and 0x87 / 5 from the authenticator, 0x9A /
0x9B / 0x95 for a will this server cannot carry). A CONNECT naming an Authentication
Method first goes through ``handle_auth`` (an AUTH exchange with the host's
authenticator, 0x8C when none speaks the method), which calls ``admit`` once it
succeeds. A CONNECT that passes becomes a
``Register`` action; the registry's answer comes back as ``handle_registered``, which
sends the CONNACK built by ``accept`` with the v5 properties that tell the client this
server's limits.

3.1/3.1.1 clients cannot be told about limits, so where v5 refuses, older versions are
accommodated when that is harmless: a will above ``max_qos`` is downgraded, a retained
will on a server without retain is published unretained, a keepalive above
``max_keepalive`` is kept (the client would ping too rarely for a smaller one).

Worked example: a v5 CONNECT with an empty client id and Session Expiry 10 days on a
server with ``max_session_expiry_interval = 1d`` registers id "ternmq-<msg id>" with
expiry 86400, and the CONNACK carries Assigned Client Identifier and Session Expiry
Interval 86400.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from services.listener.mqtt.errors import (
    ClientIdRejected,
    MQTTError,
    PacketTooLarge,
    ProtocolError,
    TopicNameInvalid,
    UnsupportedProtocolVersion,
)
from services.listener.mqtt.topics import validate_topic_name
from services.listener.mqtt.types import NO_PROPERTIES, Connack, Connect, Properties, Will
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import (
    Action,
    CancelTimer,
    Close,
    LogEvent,
    Register,
    Send,
    SetTimer,
)
from services.listener.session.codes import NEVER_EXPIRES, connack_code, v3_connack_code
from services.listener.session.state import SessionState

if TYPE_CHECKING:
    from services.listener.session.core import Session

ASSIGNED_ID_PREFIX = "ternmq-"
_PROTOCOL_MAX_PACKET = 268435460  # fixed header (5) + the largest Remaining Length


def refusal(message: str, reason_code: int) -> MQTTError:
    """A CONNECT refusal that both v5 (reason code) and 3.1.1 (return code) can say."""
    err = MQTTError(message, reason_code=reason_code)
    err.return_code = v3_connack_code(reason_code)
    return err


def handle_connect(s: Session, pkt: Connect, now: float) -> list[Action]:
    version = pkt.protocol_version
    if version in (3, 4, 5):
        s.protocol_version, s.version_known = version, True
    if version not in s.limits.allowed_versions or version not in (3, 4, 5):
        raise UnsupportedProtocolVersion(
            f"protocol level {version} not accepted on this listener [MQTT-3.1.2-2]"
        )
    s.username = pkt.username
    if version == 5:
        _check_v5_properties(pkt.properties)
        if pkt.properties.authentication_method is not None:
            return s.begin_auth(pkt, now)  # handle_auth: admitted once the exchange succeeds
    return admit(s, pkt, now)


def admit(s: Session, pkt: Connect, now: float) -> list[Action]:
    """The CONNECT, authenticated by its method if it named one: the checks that follow,
    then Register. (After an AUTH exchange, with what ``auth_on_register`` rewrote.)"""
    version = pkt.protocol_version
    s.connect_expiry = pkt.properties.session_expiry_interval or 0
    s.username = pkt.username
    s.clean_start = pkt.clean_start
    s.client_id = _client_id(s, pkt)
    s.keepalive = _keepalive(s, pkt)
    s.session_expiry = _session_expiry(s, pkt)
    if pkt.will is not None:
        s.will = _will(s, pkt.will)
    code = s.authorizer.authenticate(s.client_id, pkt.username, pkt.password, s.peer)
    if code != R.SUCCESS:
        reason = "authentication failed"
        log = auth_failed(s, "connect", "", reason)
        return s.fail(refusal(reason, code), now, before=[log])
    if s.will is not None and not s.authorizer.authorize_publish(
        s.client_id, s.username, s.mountpoint, s.will.topic
    ):
        reason = "will not authorized"
        log = auth_failed(s, "publish", s.will.topic, reason)
        return s.fail(refusal(reason, R.NOT_AUTHORIZED), now, before=[log])
    s.outbound.configure(version, pkt.properties)
    s.state = SessionState.REGISTERING
    s.register_sent = True
    return [Register(pkt, s.client_id, s.mountpoint, s.clean_start, s.session_expiry)]


def refuse(s: Session, reason_code: int) -> list[Action]:
    """The registry refused (e.g. 0x88 on the minority side of a partition, I3)."""
    code = reason_code or R.UNSPECIFIED_ERROR
    s.state = SessionState.CLOSED
    s.ended = True  # the registry knows: there is no session to end
    s.will = None
    connack = Connack(False, connack_code(s.protocol_version, code))
    return [Send(connack), Close("registration refused", code)]


def _check_v5_properties(props: Properties) -> None:
    if props.receive_maximum == 0:
        raise ProtocolError("Receive Maximum 0")
    if props.maximum_packet_size == 0:
        raise ProtocolError("Maximum Packet Size 0")


def _client_id(s: Session, pkt: Connect) -> str:
    client_id = pkt.client_id
    if not client_id:
        if pkt.protocol_version == 3:
            raise ClientIdRejected("empty client identifier (MQTT 3.1 needs 1-23 characters)")
        if pkt.protocol_version == 4 and not pkt.clean_start:
            raise ClientIdRejected("empty client identifier without clean session [MQTT-3.1.3-8]")
        if not s.limits.allow_empty_client_id:
            raise ClientIdRejected("empty client identifier not allowed [MQTT-3.1.3-9]")
        # [MQTT-3.1.3-6]: assign a unique id; v5 returns it in the CONNACK [MQTT-3.1.3-7].
        s.assigned_client_id = True
        return ASSIGNED_ID_PREFIX + s.msg_ids()
    if len(client_id.encode("utf-8", "surrogatepass")) > s.limits.max_client_id_size:
        raise ClientIdRejected(f"client identifier longer than {s.limits.max_client_id_size} bytes")
    return client_id


def _keepalive(s: Session, pkt: Connect) -> int:
    """The keepalive this server enforces. Only v5 can be told a smaller one
    (Server Keep Alive [MQTT-3.2.2-21]); ``max_keepalive`` 0 means no cap."""
    cap = s.limits.max_keepalive
    keepalive = pkt.keepalive
    if pkt.protocol_version != 5 or cap <= 0 or cap >= 65535:
        return keepalive
    if keepalive == 0 or keepalive > cap:
        s.server_keepalive = True
        return cap
    return keepalive


def _session_expiry(s: Session, pkt: Connect) -> int:
    if pkt.protocol_version != 5:
        return 0 if pkt.clean_start else NEVER_EXPIRES
    expiry = pkt.properties.session_expiry_interval or 0
    cap = s.limits.max_session_expiry_interval
    if 0 <= cap < expiry:
        s.expiry_capped = True
        return cap
    return expiry


def _will(s: Session, will: Will) -> Will:
    """Validate the will now, so a client learns at CONNECT that it cannot be published."""
    v5 = s.protocol_version == 5
    try:
        validate_topic_name(will.topic)
    except TopicNameInvalid as err:
        raise TopicNameInvalid(f"will topic: {err.message}") from None
    limit = s.limits.max_message_size
    if limit and len(will.payload) > limit:
        raise PacketTooLarge(f"will payload of {len(will.payload)} bytes over {limit}")
    if will.qos > s.limits.max_qos:
        if v5:
            raise refusal(f"will QoS {will.qos} not supported", R.QOS_NOT_SUPPORTED)
        will = replace(will, qos=s.limits.max_qos)
    if will.retain and not s.limits.retain_available:
        if v5:
            # [MQTT-3.2.2-13]: refuse a retained will when retain is not available.
            raise refusal("retained will not supported", R.RETAIN_NOT_SUPPORTED)
        will = replace(will, retain=False)
    return will


def auth_failed(s: Session, action: str, topic: str, reason: str) -> LogEvent:
    return LogEvent(
        "auth.failed",
        (
            ("client_id", s.client_id),
            ("peer", s.peer),
            ("username", s.username or ""),
            ("action", action),
            ("topic", topic),
            ("reason", reason),
        ),
    )


def accept(
    s: Session, epoch: int, session_present: bool, persistent: bool, now: float
) -> list[Action]:
    """The registry made this connection the live session: send the CONNACK."""
    s.state = SessionState.CONNECTED
    s.epoch = epoch
    s.persistent = persistent
    s.last_seen = now
    s.outbound.start(persistent)
    # Clean start never resumes a session [MQTT-3.2.2-1] (3.1.1) / [MQTT-3.2.2-2] (5.0).
    present = session_present and not s.clean_start
    props = _connack_properties(s) if s.protocol_version == 5 else NO_PROPERTIES
    out: list[Action] = [CancelTimer("connect"), Send(Connack(present, R.SUCCESS, props))]
    if s.keepalive:
        out.append(SetTimer("keepalive", now + s.keepalive * s.limits.keepalive_factor))
    return out


def _connack_properties(s: Session) -> Properties:
    limits = s.limits
    return Properties(
        session_expiry_interval=s.session_expiry if s.expiry_capped else None,
        assigned_client_identifier=s.client_id if s.assigned_client_id else None,
        server_keep_alive=s.keepalive if s.server_keepalive else None,
        receive_maximum=limits.receive_max_broker,
        topic_alias_maximum=limits.topic_alias_max_client or None,
        maximum_qos=limits.max_qos if limits.max_qos < 2 else None,
        retain_available=int(limits.retain_available),
        maximum_packet_size=min(limits.max_packet_size, _PROTOCOL_MAX_PACKET),
        wildcard_subscription_available=int(limits.wildcard_subscription_available),
        subscription_identifier_available=1,
        shared_subscription_available=int(limits.shared_subscription_available),
        # enhanced authentication: the CONNECT's method, the last answer's data [MQTT-4.12.0-5]
        authentication_method=None if s.auth is None else s.auth.method,
        authentication_data=None if s.auth is None else s.auth.reply,
    )
