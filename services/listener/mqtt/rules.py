"""Which reason codes each packet type may carry (MQTT 5 section 2.4 and per packet).

Theory of operation: the decoder rejects a reason code that is not listed for its
packet type as malformed, and the session can use the same sets to assert that what
it sends is legal. MQTT 3.1/3.1.1 only have CONNACK return codes (0-5) and SUBACK
return codes (0, 1, 2, 0x80 failure).
"""

from __future__ import annotations

from .types import PacketType as T
from .types import ReasonCode as R

__all__ = ["V3_CONNACK_CODES", "V3_SUBACK_CODES", "V5_REASON_CODES"]

V3_CONNACK_CODES = frozenset(range(6))
V3_SUBACK_CODES = frozenset({0, 1, 2, 0x80})

_PUB_ACK = frozenset(
    {
        R.SUCCESS,
        R.NO_MATCHING_SUBSCRIBERS,
        R.UNSPECIFIED_ERROR,
        R.IMPLEMENTATION_SPECIFIC_ERROR,
        R.NOT_AUTHORIZED,
        R.TOPIC_NAME_INVALID,
        R.PACKET_IDENTIFIER_IN_USE,
        R.QUOTA_EXCEEDED,
        R.PAYLOAD_FORMAT_INVALID,
    }
)
_PUB_REL = frozenset({R.SUCCESS, R.PACKET_IDENTIFIER_NOT_FOUND})

V5_REASON_CODES: dict[int, frozenset[int]] = {
    T.CONNACK: frozenset(
        {
            R.SUCCESS,
            R.UNSPECIFIED_ERROR,
            R.MALFORMED_PACKET,
            R.PROTOCOL_ERROR,
            R.IMPLEMENTATION_SPECIFIC_ERROR,
            R.UNSUPPORTED_PROTOCOL_VERSION,
            R.CLIENT_IDENTIFIER_NOT_VALID,
            R.BAD_USER_NAME_OR_PASSWORD,
            R.NOT_AUTHORIZED,
            R.SERVER_UNAVAILABLE,
            R.SERVER_BUSY,
            R.BANNED,
            R.BAD_AUTHENTICATION_METHOD,
            R.TOPIC_NAME_INVALID,
            R.PACKET_TOO_LARGE,
            R.QUOTA_EXCEEDED,
            R.PAYLOAD_FORMAT_INVALID,
            R.RETAIN_NOT_SUPPORTED,
            R.QOS_NOT_SUPPORTED,
            R.USE_ANOTHER_SERVER,
            R.SERVER_MOVED,
            R.CONNECTION_RATE_EXCEEDED,
        }
    ),
    T.PUBACK: _PUB_ACK,
    T.PUBREC: _PUB_ACK,
    T.PUBREL: _PUB_REL,
    T.PUBCOMP: _PUB_REL,
    T.SUBACK: frozenset(
        {
            R.GRANTED_QOS_0,
            R.GRANTED_QOS_1,
            R.GRANTED_QOS_2,
            R.UNSPECIFIED_ERROR,
            R.IMPLEMENTATION_SPECIFIC_ERROR,
            R.NOT_AUTHORIZED,
            R.TOPIC_FILTER_INVALID,
            R.PACKET_IDENTIFIER_IN_USE,
            R.QUOTA_EXCEEDED,
            R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
            R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
            R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
        }
    ),
    T.UNSUBACK: frozenset(
        {
            R.SUCCESS,
            R.NO_SUBSCRIPTION_EXISTED,
            R.UNSPECIFIED_ERROR,
            R.IMPLEMENTATION_SPECIFIC_ERROR,
            R.NOT_AUTHORIZED,
            R.TOPIC_FILTER_INVALID,
            R.PACKET_IDENTIFIER_IN_USE,
        }
    ),
    T.DISCONNECT: frozenset(
        {
            R.NORMAL_DISCONNECTION,
            R.DISCONNECT_WITH_WILL_MESSAGE,
            R.UNSPECIFIED_ERROR,
            R.MALFORMED_PACKET,
            R.PROTOCOL_ERROR,
            R.IMPLEMENTATION_SPECIFIC_ERROR,
            R.NOT_AUTHORIZED,
            R.SERVER_BUSY,
            R.SERVER_SHUTTING_DOWN,
            R.KEEP_ALIVE_TIMEOUT,
            R.SESSION_TAKEN_OVER,
            R.TOPIC_FILTER_INVALID,
            R.TOPIC_NAME_INVALID,
            R.RECEIVE_MAXIMUM_EXCEEDED,
            R.TOPIC_ALIAS_INVALID,
            R.PACKET_TOO_LARGE,
            R.MESSAGE_RATE_TOO_HIGH,
            R.QUOTA_EXCEEDED,
            R.ADMINISTRATIVE_ACTION,
            R.PAYLOAD_FORMAT_INVALID,
            R.RETAIN_NOT_SUPPORTED,
            R.QOS_NOT_SUPPORTED,
            R.USE_ANOTHER_SERVER,
            R.SERVER_MOVED,
            R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
            R.CONNECTION_RATE_EXCEEDED,
            R.MAXIMUM_CONNECT_TIME,
            R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
            R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
        }
    ),
    T.AUTH: frozenset({R.SUCCESS, R.CONTINUE_AUTHENTICATION, R.RE_AUTHENTICATE}),
}
