"""``ternmq-admin listener stop|restart|start|delete``: the rows each command leaves,
and what a listener process does to match them (``fronts.plan``), pure."""

from __future__ import annotations

from typing import Any

from services.listener import fronts
from services.listener.config import TcpListener

TCP = TcpListener("default", "127.0.0.1", 1883, "", frozenset({3, 4, 5}), 0, 0)
WS = TcpListener("default", "127.0.0.1", 8080, "", frozenset({4, 5}), 0, 0, transport="ws")
ROWS = [fronts.row_of(TCP), fronts.row_of(WS)]
AT_TCP = {"address": "127.0.0.1", "port": "1883"}


def _ok(rows: Any) -> list[dict[str, Any]]:
    assert isinstance(rows, list), rows
    return rows


def test_stop_restart_delete_and_start_in_vernemqs_way() -> None:
    stopped = _ok(fronts.change(ROWS, "stop", AT_TCP))
    assert stopped[0]["status"] == "stopped" and stopped[0]["kill"] == 0
    assert ROWS[0]["status"] == "running"  # the rows given are not changed
    killed = _ok(fronts.change(stopped, "stop", {**AT_TCP, "kill_sessions": "1"}))
    assert killed[0]["kill"] == 1
    assert "is running: stop it first" in str(fronts.change(ROWS, "delete", AT_TCP))
    assert "is running" in str(fronts.change(ROWS, "restart", AT_TCP))
    assert _ok(fronts.change(stopped, "restart", AT_TCP))[0]["status"] == "running"
    assert [r["port"] for r in _ok(fronts.change(stopped, "delete", AT_TCP))] == [8080]
    started = _ok(
        fronts.change(ROWS, "start", {"address": "127.0.0.1", "port": "1884", "websocket": "1"})
    )
    new = started[-1]
    assert (new["type"], new["port"], new["status"], new["source"]) == (
        "mqttws",
        1884,
        "running",
        "runtime",
    )
    assert "exists already" in str(fronts.change(ROWS, "start", AT_TCP))
    assert "no listener on" in str(fronts.change(ROWS, "stop", {**AT_TCP, "port": "9"}))
    assert "port=1..65535" in str(fronts.change(ROWS, "stop", {"address": "x", "port": "0"}))


def test_a_process_closes_kills_and_opens_to_match_the_rows() -> None:
    running = {fronts.key_of(TCP), fronts.key_of(WS)}
    stopped = _ok(fronts.change(ROWS, "stop", {**AT_TCP, "kill_sessions": "on"}))
    todo = fronts.plan(stopped, running, {})
    assert todo.close == [fronts.key_of(TCP)] and todo.kill == [fronts.key_of(TCP)]
    assert todo.open == []
    # the kill is carried out once: the next look at the same rows only keeps it closed
    again = fronts.plan(stopped, running - {fronts.key_of(TCP)}, {fronts.key_of(TCP): 1})
    assert again == fronts.Plan([], [], [])
    back = _ok(fronts.change(stopped, "restart", AT_TCP))
    assert [fronts.row_key(r) for r in fronts.plan(back, {fronts.key_of(WS)}, {}).open] == [
        fronts.key_of(TCP)
    ]
    # a listener deleted from the rows is closed where it still runs
    gone = [r for r in ROWS if r["port"] != 8080]
    assert fronts.plan(gone, running, {}).close == [fronts.key_of(WS)]


def test_a_configured_listener_keeps_its_own_settings_when_restarted() -> None:
    configured = {fronts.key_of(WS): WS}
    assert fronts.listener_of(fronts.row_of(WS), configured) is WS
    new = fronts.listener_of(
        _ok(fronts.change([], "start", {"address": "127.0.0.1", "port": "1999"}))[0], configured
    )
    assert (new.transport, new.port, new.allowed_versions) == ("tcp", 1999, frozenset({3, 4, 5}))
