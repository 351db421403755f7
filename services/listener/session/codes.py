"""Reason codes as each protocol version can say them, and the store mark kinds.

Theory of operation: the session decides in MQTT 5 reason codes everywhere (the richest
vocabulary) and narrows them here at the edge, when a packet is built for a client.
3.1/3.1.1 CONNACK has six return codes, so 0x86 becomes 4 (bad user name or password),
0x87 becomes 5 (not authorised), and anything without an equivalent becomes 3 (server
unavailable), the code a client retries on. A 3.1.1 SUBACK failure is always 0x80.
A v5 code that a packet type may not carry (per ``mqtt.rules``) is replaced by 0x80
(unspecified error) rather than sent illegally.
"""

from __future__ import annotations

from typing import Final

from services.listener.mqtt.rules import V5_REASON_CODES
from services.listener.mqtt.types import ConnectReturnCode as RC
from services.listener.mqtt.types import PacketType
from services.listener.mqtt.types import ReasonCode as R

# Kinds of ``StoreMark`` (values of msgstore.proto ``MarkKind``; a unit test keeps them
# equal to the generated enum, so this pure package need not import protobuf).
MARK_INBOUND_QOS2: Final = 0
MARK_OUTBOUND_PUBREL: Final = 1

NEVER_EXPIRES: Final = 0xFFFFFFFF
"""Session expiry of a 3.1/3.1.1 persistent session (the registry applies its own cap)."""

_V3_CONNACK: Final[dict[int, int]] = {
    R.SUCCESS: RC.ACCEPTED,
    R.UNSUPPORTED_PROTOCOL_VERSION: RC.UNACCEPTABLE_PROTOCOL_VERSION,
    R.CLIENT_IDENTIFIER_NOT_VALID: RC.IDENTIFIER_REJECTED,
    R.BAD_USER_NAME_OR_PASSWORD: RC.BAD_USERNAME_OR_PASSWORD,
    R.NOT_AUTHORIZED: RC.NOT_AUTHORIZED,
    R.BANNED: RC.NOT_AUTHORIZED,
    R.BAD_AUTHENTICATION_METHOD: RC.NOT_AUTHORIZED,
    R.SERVER_UNAVAILABLE: RC.SERVER_UNAVAILABLE,
    R.SERVER_BUSY: RC.SERVER_UNAVAILABLE,
}


def v3_connack_code(reason_code: int) -> int:
    """The 3.1/3.1.1 CONNACK return code that best says ``reason_code``."""
    return _V3_CONNACK.get(reason_code, RC.SERVER_UNAVAILABLE)


def v5_code(ptype: PacketType, reason_code: int) -> int:
    """``reason_code`` if ``ptype`` may carry it, else 0x80 unspecified error."""
    if reason_code in V5_REASON_CODES[ptype]:
        return reason_code
    return R.UNSPECIFIED_ERROR


def connack_code(protocol_version: int, reason_code: int) -> int:
    if protocol_version == 5:
        return v5_code(PacketType.CONNACK, reason_code)
    return v3_connack_code(reason_code)


def suback_code(protocol_version: int, code: int) -> int:
    """A SUBACK entry: granted QoS 0-2, or a failure the version can express."""
    if protocol_version == 5:
        return v5_code(PacketType.SUBACK, code)
    return code if code in (0, 1, 2) else 0x80
