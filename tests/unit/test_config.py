"""Config parsing: every problem reported at once, with file, line and a suggestion."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.config import ConfigError, load, parse_text, render_default_conf
from services.common.typed_settings import build
from services.listener.config import tcp_listeners
from services.msgstore.config import MsgstoreSettings
from services.node.schema import checked, schema

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_cover_every_key() -> None:
    cfg = schema().empty()
    assert cfg["max_inflight_messages"] == 20
    assert cfg["retry_interval"] == 20.0
    assert cfg["persistent_client_expiration"] == -1
    assert cfg["msgstore.fsync"] == "always"
    assert [lst.port for lst in tcp_listeners(cfg)] == [1883]


def test_values_are_typed() -> None:
    cfg = parse_text(
        schema(),
        "max_message_size = 64KB\nretry_interval = 2m\n"
        "allow_anonymous = off\nlistener.tcp.allowed_protocol_versions"
        " = 4,5\n",
    )
    assert cfg["max_message_size"] == 65536
    assert cfg["retry_interval"] == 120.0
    assert cfg["allow_anonymous"] is False
    assert tcp_listeners(cfg)[0].allowed_versions == frozenset({4, 5})


def test_all_errors_reported_with_lines_and_suggestions() -> None:
    text = (
        "# comment\nmax_inflight_mesages = 3\nretry_interval = soon\nnot a line\n"
        "max_qos = 7\nmax_qos = 1\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_text(schema(), text, "x.conf")
    msgs = [str(p) for p in info.value.problems]
    assert msgs[0] == (
        "x.conf:2: unknown key 'max_inflight_mesages' (did you mean 'max_inflight_messages'?)"
    )
    assert msgs[1].startswith("x.conf:3: retry_interval: expected a duration")
    assert msgs[2].startswith("x.conf:4: expected 'key = value'")
    assert msgs[3].startswith("x.conf:5: max_qos: must be at most 2")
    assert msgs[4] == "x.conf:6: max_qos is set twice (first on line 5)"


def test_enum_and_address_checks() -> None:
    with pytest.raises(ConfigError) as info:
        parse_text(schema(), "msgstore.fsync = sometimes\nlistener.tcp.default = nope\n")
    text = str(info.value)
    assert "expected one of always, interval, never" in text
    assert "expected host:port" in text


def test_pattern_listeners_and_options() -> None:
    cfg = parse_text(
        schema(),
        "listener.tcp.default = off\nlistener.tcp.a = 127.0.0.1:2000\n"
        "listener.tcp.a.mountpoint = m\nlistener.mountpoint = g\n"
        "listener.tcp.b = 127.0.0.1:2001\n",
    )
    listeners = {lst.name: lst for lst in tcp_listeners(cfg)}
    assert set(listeners) == {"a", "b"}
    assert listeners["a"].mountpoint == "m"
    assert listeners["b"].mountpoint == "g"


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(schema(), tmp_path / "nope.conf")


def test_overrides_use_the_same_checks(tmp_path: Path) -> None:
    path = tmp_path / "t.conf"
    path.write_text("max_inflight_messages = 5\n")
    cfg = load(schema(), path, {"max_inflight_messages": "7"})
    assert cfg["max_inflight_messages"] == 7
    with pytest.raises(ConfigError, match="<override>"):
        load(schema(), path, {"max_inflight_messages": "x"})


def test_round_trip_of_explicit_values() -> None:
    cfg = parse_text(
        schema(),
        "retry_interval = 2m\nallow_anonymous = off\n"
        "listener.tcp.allowed_protocol_versions = 4,5\n",
    )
    again = parse_text(schema(), "\n".join(cfg.to_lines()))
    assert dict(again.explicit()) == dict(cfg.explicit())


def test_shipped_default_conf_is_fresh() -> None:
    shipped = (ROOT / "deploy" / "ternmq.conf").read_text()
    assert shipped == render_default_conf(schema()), (
        "run: ternmq config defaults > deploy/ternmq.conf"
    )
    parse_text(schema(), shipped)  # all commented: parses to defaults


def test_listener_limits_and_buffer_sizes_reach_the_listener() -> None:
    cfg = parse_text(
        schema(),
        "listener.max_connections = 10\nlistener.tcp.buffer_sizes = 64KB\n"
        "listener.tcp.a = 127.0.0.1:2000\nlistener.tcp.a.max_connections = 2\n"
        "listener.tcp.a.proxy_protocol = on\n",
    )
    listeners = {lst.name: lst for lst in tcp_listeners(cfg)}
    assert listeners["a"].max_connections == 2
    assert listeners["default"].max_connections == 10
    assert {lst.buffer_size for lst in listeners.values()} == {65536}
    assert listeners["a"].proxy_protocol and not listeners["default"].proxy_protocol


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("msgstore.replication_factor = 9", "must be at most 7"),
        ("allow_multiple_sessions = on", "expected one of off"),
    ],
)
def test_features_not_built_cannot_be_switched_on(line: str, reason: str) -> None:
    """Accepting these would promise queue copies or parallel sessions that never exist."""
    with pytest.raises(ConfigError) as info:
        parse_text(schema(), line + "\n", "x.conf")
    assert reason in str(info.value.problems[0])


def test_a_write_quorum_above_the_replication_factor_stops_start_up() -> None:
    """W > R could never be met: every publish would be refused, so start-up is."""
    config = parse_text(
        schema(), "msgstore.replication_factor = 2\nmsgstore.write_quorum = 3\n", "x.conf"
    )
    with pytest.raises(ConfigError) as info:
        checked(config)
    assert "write_quorum = 3 is more than msgstore.replication_factor = 2" in str(info.value)
    ok = parse_text(schema(), "msgstore.replication_factor = 3\n", "x.conf")
    assert checked(ok) is ok
    settings = build(MsgstoreSettings, ok)
    assert settings.write_quorum == 2  # 0 = a majority of R
