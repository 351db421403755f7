"""``ternmq-admin set KEY=VALUE`` on a running node, as VerneMQ's ``vmq-admin set``: the
new value reaches every service process (``show`` tells it, new connections take it),
a key that cannot change while the node runs is refused with the reason and nothing is
applied, and a restart brings ``ternmq.conf`` back."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.admin import admin
from tests.support.clients import Client
from tests.support.node import Node, wait_for

pytestmark = [pytest.mark.integration]


def shown(node: Node, key: str) -> object:
    done = admin(node.http_port, "--json", "show", key)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[key]


def accepted(node: Node, client_id: str) -> bool:
    c = Client(client_id, node.mqtt_port)
    c.connect(expect_ok=False)
    ok = not c.reason_code.is_failure
    c.disconnect()
    return ok


def test_a_limit_set_applies_to_the_next_connection(fresh_node: Node) -> None:
    fresh_node.start()
    assert accepted(fresh_node, "abcdefgh")  # the default allows 100 bytes
    done = admin(fresh_node.http_port, "set", "max_client_id_size=5")
    assert done.returncode == 0, done.stderr
    assert "max_client_id_size" in done.stdout and "5" in done.stdout
    assert shown(fresh_node, "max_client_id_size") == 5
    assert not accepted(fresh_node, "abcdef")  # 0x85 / return code 2
    assert accepted(fresh_node, "abcde")
    # until the node stops: ternmq.conf applies again at the next start
    assert fresh_node.stop() == 0
    fresh_node.start()
    assert shown(fresh_node, "max_client_id_size") == 100
    assert accepted(fresh_node, "abcdef")


def test_what_cannot_change_is_refused_and_nothing_is_applied(node: Node) -> None:
    before = shown(node, "max_inflight_messages")
    done = admin(
        node.http_port, "set", "max_inflight_messages=7", "listener.tcp.default=127.0.0.1:1"
    )
    assert done.returncode == 1
    assert "listener.tcp.default cannot be changed while the node runs" in done.stderr
    assert shown(node, "max_inflight_messages") == before
    typo = admin(node.http_port, "set", "max_inflight_mesages=7")
    assert typo.returncode == 1 and "did you mean 'max_inflight_messages'" in typo.stderr
    bad = admin(node.http_port, "set", "retry_interval=soon")
    assert bad.returncode == 1 and "retry_interval" in bad.stderr


def test_log_settings_reach_every_service_at_once(node: Node) -> None:
    """With ``log.level = warning`` a new connection's info events are no longer written
    (a connection made before the change is the control)."""
    before, after = f"lvl-{uuid.uuid4().hex[:8]}", f"lvl-{uuid.uuid4().hex[:8]}"

    def connected(client_id: str) -> bool:
        return any(e.get("client_id") == client_id for e in node.events("client.connected"))

    try:
        assert accepted(node, before)
        wait_for(lambda: connected(before), 10, what="the control's client.connected")
        assert admin(node.http_port, "set", "log.level=warning").returncode == 0
        assert accepted(node, after)
        node.settle_logs()
        assert not connected(after)
        assert shown(node, "log.level") == "warning"
    finally:
        assert admin(node.http_port, "set", "log.level=info").returncode == 0
