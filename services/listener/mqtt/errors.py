"""Errors raised by the MQTT codec, each carrying the reason code the peer is owed.

Theory of operation: an ``MQTTError`` means *the peer* broke the protocol (h11's
"remote protocol error"); the session turns it into a DISCONNECT (MQTT 5), a CONNACK
(while still connecting) or a plain close (3.1/3.1.1) in exactly one place, reading
``reason_code`` for MQTT 5 and ``return_code`` for a 3.1.1 CONNACK. ``EncodeError``
is the other kind: *we* asked the encoder for something the protocol cannot express,
which is a bug in the caller, so it is a ``ValueError`` and not an ``MQTTError``.

The decoder fills two context fields when it can: ``protocol_version`` (known once a
CONNECT's level byte was read, so the session can encode the refusing CONNACK in the
client's own version) and ``preceding`` (packets that were decoded from the same
``feed`` call before the bad frame; they are valid and should be handled first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .types import ConnectReturnCode, ReasonCode

if TYPE_CHECKING:
    from .types import Packet

__all__ = [
    "ClientIdRejected",
    "EncodeError",
    "MQTTError",
    "MalformedPacket",
    "PacketTooLarge",
    "ProtocolError",
    "TopicAliasInvalid",
    "TopicFilterInvalid",
    "TopicNameInvalid",
    "UnsupportedProtocolVersion",
]


class MQTTError(Exception):
    """The peer violated the protocol; ``reason_code`` is the MQTT 5 code to report.

    ``return_code`` is the 3.1/3.1.1 CONNACK return code for errors that have one
    (only meaningful while the connection is still being established); ``None`` means
    3.1.1 has no code for it and the connection is simply closed.
    """

    REASON_CODE: ClassVar[int] = ReasonCode.UNSPECIFIED_ERROR
    RETURN_CODE: ClassVar[int | None] = None

    def __init__(self, message: str, *, reason_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason_code: int = self.REASON_CODE if reason_code is None else reason_code
        self.return_code: int | None = self.RETURN_CODE
        self.protocol_version: int | None = None
        self.preceding: tuple[Packet, ...] = ()


class MalformedPacket(MQTTError):
    """The bytes cannot be parsed as the packet they claim to be."""

    REASON_CODE = ReasonCode.MALFORMED_PACKET


class ProtocolError(MQTTError):
    """The packet parses but contains something the specification forbids."""

    REASON_CODE = ReasonCode.PROTOCOL_ERROR


class PacketTooLarge(MQTTError):
    """The remaining length announces a packet above the configured maximum."""

    REASON_CODE = ReasonCode.PACKET_TOO_LARGE


class UnsupportedProtocolVersion(MQTTError):
    REASON_CODE = ReasonCode.UNSUPPORTED_PROTOCOL_VERSION
    RETURN_CODE = ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION


class ClientIdRejected(MQTTError):
    REASON_CODE = ReasonCode.CLIENT_IDENTIFIER_NOT_VALID
    RETURN_CODE = ConnectReturnCode.IDENTIFIER_REJECTED


class TopicNameInvalid(MQTTError):
    REASON_CODE = ReasonCode.TOPIC_NAME_INVALID


class TopicFilterInvalid(MQTTError):
    REASON_CODE = ReasonCode.TOPIC_FILTER_INVALID


class TopicAliasInvalid(MQTTError):
    REASON_CODE = ReasonCode.TOPIC_ALIAS_INVALID


class EncodeError(ValueError):
    """The caller asked to encode a packet the protocol (or the version) cannot carry."""
