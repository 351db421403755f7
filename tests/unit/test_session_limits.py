"""SessionLimits.from_config and the constants shared with other services."""

from __future__ import annotations

from services.common.config import parse_text
from services.listener.session.codes import MARK_INBOUND_QOS2, MARK_OUTBOUND_PUBREL
from services.listener.session.limits import SessionLimits
from services.node.schema import schema


def test_defaults_from_the_schema_match_the_dataclass_defaults() -> None:
    """The dataclass defaults (used by tests) are the shipped configuration's."""
    limits = SessionLimits.from_config(schema().empty(), "", frozenset({3, 4, 5}))
    assert limits == SessionLimits()


def test_values_and_sentinels_from_a_conf_file() -> None:
    text = "\n".join(
        [
            "max_inflight_messages = 0",
            "max_online_messages = -1",
            "retry_interval = 1m",
            "max_session_expiry_interval = 1d",
            "max_message_size = 64KB",
            "max_qos = 1",
            "retain_available = off",
            "nodename = n1@10.0.0.1",
            "connect_timeout = 500ms",
        ]
    )
    config = parse_text(schema(), text)
    limits = SessionLimits.from_config(config, "tenant/", frozenset({5}))
    assert limits.inflight_window == 65535  # 0 = unlimited, bounded by packet ids
    assert limits.max_online_messages == -1
    assert limits.retry_interval == 60.0
    assert limits.max_session_expiry_interval == 86400
    assert limits.max_message_size == 65536
    assert (limits.max_qos, limits.retain_available) == (1, False)
    assert (limits.mountpoint, limits.node) == ("tenant/", "n1@10.0.0.1")
    assert limits.allowed_versions == frozenset({5})
    assert limits.connect_timeout == 0.5


def test_never_expiring_sessions_have_no_cap() -> None:
    config = parse_text(schema(), "max_session_expiry_interval = never")
    assert SessionLimits.from_config(config, "", frozenset({4})).max_session_expiry_interval == -1


def test_inflight_window() -> None:
    assert SessionLimits(max_inflight_messages=20).inflight_window == 20
    assert SessionLimits(max_inflight_messages=70000).inflight_window == 65535


def test_mark_kinds_match_msgstore_proto() -> None:
    from services.pb import msgstore_pb2

    assert MARK_INBOUND_QOS2 == msgstore_pb2.MARK_INBOUND_QOS2
    assert MARK_OUTBOUND_PUBREL == msgstore_pb2.MARK_OUTBOUND_PUBREL
