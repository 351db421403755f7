"""Webhooks on a real node, against a real HTTP service the test runs: VerneMQ's
``vmq_webhooks`` bodies and answers for auth_on_register, auth_on_publish and
auth_on_subscribe (3.1.1 and the ``_m5`` forms), modifiers, the max-age cache, and a slow
or dead endpoint refusing."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support.clients import Client
from tests.support.node import Node, free_port, make_node, wait_for

pytestmark = pytest.mark.integration
HOOKS = [
    "auth_on_register",
    "auth_on_register_m5",
    "auth_on_publish",
    "auth_on_publish_m5",
    "auth_on_subscribe",
    "auth_on_subscribe_m5",
]
NOTIFY = [
    "on_register",
    "on_register_m5",
    "on_client_wakeup",
    "on_publish",
    "on_publish_m5",
    "on_subscribe",
    "on_subscribe_m5",
    "on_unsubscribe",
    "on_client_offline",
    "on_client_gone",
]


class HookService:
    """The user's webhook service: rules by username and topic, every call recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                hook = self.headers.get("vernemq-hook", "")
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with service.lock:
                    service.calls.append((hook, body))
                answer, headers = service.answer(hook, body)
                raw = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, hook: str, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        ok: dict[str, Any] = {"result": "ok"}
        if hook.startswith("on_"):
            return {}, {}
        if hook.startswith("auth_on_register"):
            user = body.get("username")
            if user == "slow":
                time.sleep(3)  # beyond the node's webhooks.timeout
            if user == "bad":
                return {"result": {"error": "not_allowed"}}, {}
            return (ok, {}) if user == "good" else ({"result": "next"}, {})
        if hook.startswith("auth_on_publish"):
            topic = body["topic"]
            if topic.startswith("forbidden/"):
                return {"result": {"error": "not_allowed"}}, {}
            if topic == "rewrite/me":
                changed = base64.b64encode(b"changed by the hook").decode()
                return {
                    "result": "ok",
                    "modifiers": {"topic": "rewritten/t", "payload": changed},
                }, {}
            if topic.startswith("cached/"):
                return ok, {"cache-control": "max-age=60"}
            return ok, {}
        refused = 135 if hook.endswith("_m5") else 128
        topics = [
            {"topic": t["topic"], "qos": refused if t["topic"].startswith("secret/") else t["qos"]}
            for t in body["topics"]
        ]
        return {"result": "ok", "modifiers": {"topics": topics}}, {}

    def count(self, hook: str, **match: Any) -> int:
        with self.lock:
            return sum(
                1
                for h, b in self.calls
                if h == hook and all(b.get(k) == v for k, v in match.items())
            )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def service() -> Iterator[HookService]:
    s = HookService()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, service: HookService) -> Iterator[Node]:
    settings = {"webhooks.timeout": "1s"}
    for hook in HOOKS + NOTIFY:
        settings[f"webhooks.{hook}.hook"] = hook
        settings[f"webhooks.{hook}.endpoint"] = f"http://127.0.0.1:{service.port}/hooks"
    n = make_node(tmp_path_factory.mktemp("webhooks"), **settings)
    n.start()
    yield n
    assert n.stop() == 0, n.output()


def refused(node: Node, hook: str) -> list[str]:
    return [str(e["reason"]) for e in node.events("webhook.failed") if e.get("hook") == hook]


@pytest.mark.parametrize("version", [4, 5])
def test_register_is_decided_by_the_hook_or_by_the_rules_on_next(
    node: Node, service: HookService, version: int
) -> None:
    good = Client(f"wh-good-{version}", node.mqtt_port, version, username="good", password="x")
    good.connect().disconnect()
    anon = Client(f"wh-next-{version}", node.mqtt_port, version, username="who", password="x")
    anon.connect().disconnect()  # next: allow_anonymous (on) decides
    bad = Client(f"wh-bad-{version}", node.mqtt_port, version, username="bad", password="x")
    bad.reconnect = False
    bad.connect(expect_ok=False)
    bad.paho.loop_stop()
    assert bad.reason_code.is_failure
    assert getattr(bad.reason_code, "value", bad.reason_code) in (5, 0x87)
    hook = "auth_on_register_m5" if version == 5 else "auth_on_register"
    assert service.count(hook, client_id=f"wh-bad-{version}", username="bad", password="x") == 1


def test_a_slow_endpoint_refuses_and_is_logged(node: Node) -> None:
    slow = Client("wh-slow", node.mqtt_port, 5, username="slow", password="x", reconnect=False)
    slow.connect(timeout=15, expect_ok=False)
    slow.paho.loop_stop()
    assert slow.reason_code.is_failure
    wait_for(lambda: refused(node, "auth_on_register_m5"), 10, what="webhook.failed")
    assert "timed out" in refused(node, "auth_on_register_m5")[0]


def test_publish_modifiers_rewrite_and_a_refusal_is_0x87(node: Node) -> None:
    sub = Client("wh-sub", node.mqtt_port, 5).connect()
    pub = Client("wh-pub", node.mqtt_port, 5).connect()
    try:
        sub.subscribe("rewritten/t", qos=1)
        sub.subscribe("forbidden/x", qos=1)
        pub.publish("rewrite/me", b"original", qos=1, tag=1)
        got = sub.take(1)
        assert [(m.topic, m.payload) for m in got] == [("rewritten/t", b"changed by the hook")]
        pub.publish("forbidden/x", b"no", qos=1, tag=2)
        wait_for(lambda: pub.refused, 10, what="the refused PUBACK")
        assert pub.refused == [(2, 0x87)]
        assert sub.drain(0.5) == []
    finally:
        pub.disconnect()
        sub.disconnect()


def test_an_ok_with_max_age_is_cached(node: Node, service: HookService) -> None:
    pub = Client("wh-cache", node.mqtt_port, 4).connect()
    try:
        for i in range(5):
            pub.publish("cached/t", f"m{i}".encode(), qos=1, tag=i)
        wait_for(lambda: len(pub.acked) == 5, 10, what="5 PUBACKs")
    finally:
        pub.disconnect()
    assert service.count("auth_on_publish", client_id="wh-cache", topic="cached/t") == 1


@pytest.mark.parametrize("version", [4, 5])
def test_a_subscription_the_hook_refuses_gets_nothing(node: Node, version: int) -> None:
    sub = Client(f"wh-subs-{version}", node.mqtt_port, version).connect()
    pub = Client(f"wh-pubs-{version}", node.mqtt_port, version).connect()
    try:
        sub.subscribe("secret/#", qos=1)
        sub.subscribe("open/#", qos=1)
        pub.publish("secret/a", b"hidden", qos=1)
        pub.publish("open/a", b"visible", qos=1)
        got = sub.take(1)
        assert [m.payload for m in got] == [b"visible"]
        assert sub.drain(0.5) == []
    finally:
        pub.disconnect()
        sub.disconnect()


def test_a_dead_endpoint_refuses_every_connect(tmp_path_factory: pytest.TempPathFactory) -> None:
    dead = f"http://127.0.0.1:{free_port()}/nobody"
    n = make_node(
        tmp_path_factory.mktemp("deadhook"),
        **{"webhooks.r.hook": "auth_on_register", "webhooks.r.endpoint": dead},
    )
    n.start()
    try:
        c = Client("wh-dead", n.mqtt_port, 4, username="any", password="x", reconnect=False)
        c.connect(expect_ok=False)
        c.paho.loop_stop()
        assert c.reason_code.is_failure
        wait_for(lambda: refused(n, "auth_on_register"), 10, what="webhook.failed")
        assert "ClientConnectorError" in refused(n, "auth_on_register")[0]
    finally:
        assert n.stop() == 0, n.output()


def test_webhooks_show_lists_them(node: Node, service: HookService) -> None:
    rows = node.get_json("/api/v1/webhooks/show")
    assert isinstance(rows, list)
    got = {(r["hook"], r["endpoint"]) for r in rows}
    url = f"http://127.0.0.1:{service.port}/hooks"
    assert got == {(hook, url) for hook in HOOKS + NOTIFY}


def test_notifications_tell_the_sessions_life(node: Node, service: HookService) -> None:
    c = Client("wh-life", node.mqtt_port, 4, clean=False, username="who", password="x")
    c.connect()
    c.subscribe("life/#", qos=1)
    c.publish("life/a", b"hello", qos=1, tag=1)
    c.take(1)
    c.paho.unsubscribe("life/#")
    wait_for(
        lambda: service.count("on_unsubscribe", client_id="wh-life"), 10, what="on_unsubscribe"
    )
    c.disconnect()
    wait_for(lambda: service.count("on_client_offline", client_id="wh-life"), 10, what="offline")
    again = Client("wh-life", node.mqtt_port, 4, clean=False, username="who", password="x")
    again.connect().disconnect()
    wait_for(lambda: service.count("on_client_wakeup", client_id="wh-life"), 10, what="wakeup")
    gone = Client("wh-gone", node.mqtt_port, 5).connect()
    gone.disconnect()
    wait_for(lambda: service.count("on_client_gone", client_id="wh-gone"), 10, what="gone")
    assert (
        service.count("on_register", client_id="wh-life", username="who", peer_addr="127.0.0.1")
        == 2
    )
    assert service.count("on_register_m5", client_id="wh-gone") == 1
    payload = base64.b64encode(b"hello").decode()
    assert service.count("on_publish", client_id="wh-life", topic="life/a", payload=payload) == 1
    with service.lock:
        subs = [b for h, b in service.calls if h == "on_subscribe" and b["client_id"] == "wh-life"]
        unsubs = [
            b for h, b in service.calls if h == "on_unsubscribe" and b["client_id"] == "wh-life"
        ]
    assert subs[0]["topics"] == [{"topic": "life/#", "qos": 1}]
    assert unsubs[0]["topics"] == ["life/#"]
