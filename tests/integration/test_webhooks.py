"""Webhooks on a real node, against a real HTTP service the test runs: VerneMQ's
``vmq_webhooks`` bodies and answers for auth_on_register, auth_on_publish and
auth_on_subscribe (3.1.1 and the ``_m5`` forms), on_auth_m5, on_deliver,
on_offline_message and the notifications, modifiers, the max-age cache, a slow or dead
endpoint refusing, and ``ternmq-admin webhooks register|deregister`` at run time."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.support.clients import Client, until_routed
from tests.support.hook_server import HookServer
from tests.support.node import Node, free_port, make_node, wait_for

pytestmark = pytest.mark.integration
HOOKS = [
    "auth_on_register",
    "auth_on_register_m5",
    "auth_on_publish",
    "auth_on_publish_m5",
    "auth_on_subscribe",
    "auth_on_subscribe_m5",
    "on_auth_m5",
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
    "on_offline_message",
    "on_deliver",
    "on_deliver_m5",
]
ADMIN = str(Path(sys.executable).parent / "ternmq-admin")


class HookService(HookServer):
    """The user's webhook service: rules by username and topic, every call recorded."""

    def answer(self, hook: str, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        ok: dict[str, Any] = {"result": "ok"}
        if hook == "on_auth_m5":
            return self.auth(body), {}
        if hook == "on_deliver_m5" and body["topic"] == "props/in":
            mods = {
                "properties": {
                    "p_response_topic": "reply/here",
                    "p_correlation_data": "xyz",
                    "p_topic_alias": 3,  # not a message's: ignored, said once
                }
            }
            return {"result": "ok", "modifiers": mods}, {}
        if hook.startswith("on_deliver"):
            if body["topic"] != "deliver/rewrite":
                return ok, {}
            payload = base64.b64encode(f"for {body['client_id']}".encode()).decode()
            return {"result": "ok", "modifiers": {"topic": "delivered/t", "payload": payload}}, {}
        if hook.startswith("on_"):
            return {}, {}
        if hook.startswith("auth_on_register"):
            user = body.get("username")
            if user == "slow":
                time.sleep(3)  # beyond the node's webhooks.timeout
            if user == "bad":
                return {"result": {"error": "not_allowed"}}, {}
            if user == "limited":  # VerneMQ's register modifiers, one ternmq ignores
                mods = {"max_message_size": 16, "username": "renamed", "upgrade_qos": True}
                return {"result": "ok", "modifiers": mods}, {}
            return (ok, {}) if user == "good" else ({"result": "next"}, {})
        if hook.startswith("auth_on_publish"):
            topic = body["topic"]
            if topic.startswith("forbidden/"):
                return {"result": {"error": "not_allowed"}}, {}
            if topic.startswith("qos0/"):
                return {"result": "ok", "modifiers": {"qos": 0}}, {}
            if topic == "rewrite/me":
                changed = base64.b64encode(b"changed by the hook").decode()
                return {
                    "result": "ok",
                    "modifiers": {"topic": "rewritten/t", "payload": changed},
                }, {}
            if topic.startswith("cached/"):
                return ok, {"cache-control": "max-age=60"}
            if topic == "props/in":
                user = [{"key": _b64("by"), "val": _b64("publish-hook")}]
                props = {"p_content_type": "application/json", "p_user_property": user}
                return {"result": "ok", "modifiers": {"properties": props}}, {}
            if topic == "props/bad":
                props = {"p_payload_format_indicator": "binary"}
                return {"result": "ok", "modifiers": {"properties": props}}, {}
            return ok, {}
        refused = 135 if hook.endswith("_m5") else 128
        topics = [
            {"topic": t["topic"], "qos": refused if t["topic"].startswith("secret/") else t["qos"]}
            for t in body["topics"]
        ]
        return {"result": "ok", "modifiers": {"topics": topics}}, {}

    @staticmethod
    def auth(body: dict[str, Any]) -> dict[str, Any]:
        """on_auth_m5: method TEST with data "good" passes, "next" passes the question
        on, anything else is refused."""
        props = body["properties"]
        data = base64.b64decode(props.get("p_authentication_data", ""))
        if data == b"next":
            return {"result": "next"}
        if props["p_authentication_method"] != "TEST" or data != b"good":
            return {"result": {"error": "bad_credentials"}}
        answer = {"p_authentication_method": "TEST", "p_authentication_data": ""}
        return {"result": "ok", "modifiers": {"reason_code": 0, "properties": answer}}


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


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_properties_are_shown_to_the_m5_hooks_and_rewritten_by_them(
    node: Node, service: HookService
) -> None:
    """VerneMQ's ``properties`` modifier: auth_on_publish_m5 rewrites what the message
    carries, on_deliver_m5 what one subscriber gets; each hook sees the properties as
    they are at its turn, and a modifier that cannot be applied refuses the publish."""
    sub = Client("wh-props-sub", node.mqtt_port, 5).connect()
    pub = Client("wh-props-pub", node.mqtt_port, 5).connect()
    try:
        sub.subscribe("props/#", qos=1)
        sent = Properties(PacketTypes.PUBLISH)
        sent.ContentType = "text/plain"
        sent.UserProperty = [("a", "1")]
        pub.publish("props/in", b"p", qos=1, tag=1, properties=sent)
        (got,) = sub.take(1)
        assert got.properties.ContentType == "application/json"
        assert got.properties.UserProperty == [("by", "publish-hook")]
        assert got.properties.ResponseTopic == "reply/here"
        assert got.properties.CorrelationData == b"xyz"
        pub.publish("props/bad", b"b", qos=1, tag=2)
        wait_for(lambda: pub.refused, 10, what="the refused PUBACK")
        assert pub.refused == [(2, 0x87)]
    finally:
        pub.disconnect()
        sub.disconnect()
    with service.lock:
        asked = {h: b for h, b in service.calls if b.get("topic") == "props/in"}
    assert asked["auth_on_publish_m5"]["properties"] == {
        "p_content_type": "text/plain",
        "p_user_property": [{"key": _b64("a"), "val": _b64("1")}],
    }
    rewritten = {
        "p_content_type": "application/json",
        "p_user_property": [{"key": _b64("by"), "val": _b64("publish-hook")}],
    }
    assert asked["on_deliver_m5"]["properties"] == rewritten
    wait_for(lambda: service.count("on_publish_m5", topic="props/in"), 10, what="on_publish_m5")
    with service.lock:
        published = [b for h, b in service.calls if h == "on_publish_m5"]
    assert [b["properties"] for b in published if b["topic"] == "props/in"] == [rewritten]
    wait_for(lambda: refused(node, "auth_on_publish_m5"), 10, what="webhook.failed")
    assert any("p_payload_format_indicator" in r for r in refused(node, "auth_on_publish_m5"))


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


@pytest.mark.parametrize("version", [4, 5])
def test_on_deliver_rewrites_what_each_subscriber_gets(
    node: Node, service: HookService, version: int
) -> None:
    sub = Client(f"wh-deliver-{version}", node.mqtt_port, version).connect()
    pub = Client(f"wh-deliverer-{version}", node.mqtt_port, version).connect()
    try:
        sub.subscribe("deliver/#", qos=1)
        pub.publish("deliver/rewrite", b"original", qos=1)
        pub.publish("deliver/plain", b"as sent", qos=1)
        got = [(m.topic, m.payload) for m in sub.take(2)]
        assert got == [
            ("delivered/t", f"for wh-deliver-{version}".encode()),
            ("deliver/plain", b"as sent"),
        ]
    finally:
        pub.disconnect()
        sub.disconnect()
    hook = "on_deliver_m5" if version == 5 else "on_deliver"
    payload = base64.b64encode(b"original").decode()
    asked = dict(client_id=f"wh-deliver-{version}", topic="deliver/rewrite", qos=1, payload=payload)
    assert service.count(hook, **asked) == 1


def test_on_deliver_asks_for_the_offline_queue_too(node: Node, service: HookService) -> None:
    away = Client("wh-replay", node.mqtt_port, 4, clean=False).connect()
    away.subscribe("deliver/#", qos=1)
    away.disconnect()
    wait_for(lambda: service.count("on_client_offline", client_id="wh-replay"), 10)
    pub = Client("wh-replayer", node.mqtt_port, 4).connect()
    try:
        for i, topic in enumerate(("deliver/plain", "deliver/rewrite", "deliver/plain")):
            pub.publish(topic, f"m{i}".encode(), qos=1, tag=i)
        wait_for(lambda: len(pub.acked) == 3, 10, what="3 PUBACKs")
    finally:
        pub.disconnect()
    back = Client("wh-replay", node.mqtt_port, 4, clean=False).connect()
    try:
        got = [(m.topic, m.payload) for m in back.take(3)]
    finally:
        back.disconnect()
    assert got == [
        ("deliver/plain", b"m0"),
        ("delivered/t", b"for wh-replay"),
        ("deliver/plain", b"m2"),
    ]
    assert service.count("on_deliver", client_id="wh-replay") == 3


def test_on_offline_message_tells_what_is_queued(node: Node, service: HookService) -> None:
    away = Client("wh-away", node.mqtt_port, 4, clean=False).connect()
    away.subscribe("away/#", qos=1)
    away.disconnect()
    wait_for(lambda: service.count("on_client_offline", client_id="wh-away"), 10, what="offline")
    pub = Client("wh-away-pub", node.mqtt_port, 4).connect()
    try:
        pub.publish("away/a", b"while you were out", qos=1, tag=1)
        wait_for(lambda: pub.acked == [1], 10, what="the PUBACK")
    finally:
        pub.disconnect()
    payload = base64.b64encode(b"while you were out").decode()
    match = dict(client_id="wh-away", mountpoint="", topic="away/a", qos=1, payload=payload)
    wait_for(lambda: service.count("on_offline_message", **match), 10, what="on_offline_message")
    back = Client("wh-away", node.mqtt_port, 4, clean=False).connect()
    try:
        assert [m.payload for m in back.take(1)] == [b"while you were out"]
    finally:
        back.disconnect()


def test_register_modifiers_limit_the_session(node: Node, service: HookService) -> None:
    c = Client("wh-limited", node.mqtt_port, 5, username="limited", password="x", reconnect=False)
    c.connect()
    c.publish("limited/small", b"fits", qos=1, tag=1)
    wait_for(lambda: c.acked == [1], 10, what="the PUBACK")
    c.publish("limited/big", b"x" * 100, qos=1, tag=2)  # over the modifier's 16 bytes
    assert c.disconnected.wait(10)
    assert getattr(c.disconnect_reason, "value", c.disconnect_reason) == 0x95
    c.paho.loop_stop()
    assert service.count("on_register_m5", client_id="wh-limited", username="renamed") == 1
    wait_for(lambda: [r for r in refused(node, "auth_on_register_m5") if "upgrade_qos" in r], 10)
    assert not [r for r in refused(node, "auth_on_register_m5") if "max_message_size" in r]


def test_a_qos_modifier_changes_the_routed_qos_not_the_acknowledgement(node: Node) -> None:
    sub = Client("wh-qos-sub", node.mqtt_port, 4).connect()
    pub = Client("wh-qos-pub", node.mqtt_port, 4).connect()
    try:
        sub.subscribe("qos0/#", qos=2)
        pub.publish("qos0/a", b"routed at qos 0", qos=2, tag=1)
        wait_for(lambda: pub.acked == [1], 10, what="the publisher's PUBCOMP")
        assert [(m.payload, m.qos) for m in sub.take(1)] == [(b"routed at qos 0", 0)]
    finally:
        pub.disconnect()
        sub.disconnect()


def _connect_with_auth(port: int, client_id: str, method: str, data: bytes) -> int:
    """A v5 CONNECT naming an Authentication Method: the CONNACK's reason code."""
    codes: list[int] = []
    done = threading.Event()

    def on_connect(c: Any, u: Any, flags: Any, rc: Any, props: Any = None) -> None:
        codes.append(getattr(rc, "value", rc))
        done.set()

    paho = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5,
        reconnect_on_failure=False,
    )  # fmt: skip
    paho.on_connect = on_connect
    props = Properties(PacketTypes.CONNECT)
    props.AuthenticationMethod = method
    props.AuthenticationData = data
    paho.connect("127.0.0.1", port, keepalive=60, properties=props)
    paho.loop_start()
    try:
        assert done.wait(15), f"{client_id}: no CONNACK"
    finally:
        paho.disconnect()
        paho.loop_stop()
    return codes[0]


def test_on_auth_m5_answers_a_clients_authentication_method(
    node: Node, service: HookService
) -> None:
    assert _connect_with_auth(node.mqtt_port, "wh-auth-ok", "TEST", b"good") == 0
    assert _connect_with_auth(node.mqtt_port, "wh-auth-bad", "TEST", b"wrong") == 0x87
    # next: nobody else speaks the method, refused as without the hook
    assert _connect_with_auth(node.mqtt_port, "wh-auth-next", "TEST", b"next") == 0x8C
    good = base64.b64encode(b"good").decode()
    props = {"p_authentication_method": "TEST", "p_authentication_data": good}
    assert service.count("on_auth_m5", client_id="wh-auth-ok", properties=props) == 1
    # then auth_on_register_m5 was asked too, and said next (ternmq's rules let it in)
    assert service.count("auth_on_register_m5", client_id="wh-auth-ok") == 1


# -- ternmq-admin webhooks register | deregister ------------------------------------------
def admin(n: Node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ADMIN, "--node", f"127.0.0.1:{n.http_port}", *args],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A node with no webhook configured and two listener processes."""
    n = make_node(tmp_path_factory.mktemp("wh-runtime"), **{"listener.processes": "2"})
    n.start()
    yield n
    assert n.stop() == 0, n.output()


def _refused_connects(n: Node, user: str, count: int) -> int:
    """How many of ``count`` connections (spread over the listener processes by the
    kernel) the node refuses."""
    refusals = 0
    for i in range(count):
        c = Client(f"wh-rt-{user}-{i}", n.mqtt_port, 4, username=user, password="x",
                   reconnect=False)  # fmt: skip
        c.connect(expect_ok=False)
        refusals += bool(c.reason_code.is_failure)
        c.paho.disconnect()
        c.paho.loop_stop()
    return refusals


def test_webhooks_registered_at_run_time_apply_to_every_listener_process(
    bare: Node, service: HookService
) -> None:
    url = f"http://127.0.0.1:{service.port}/hooks"
    assert _refused_connects(bare, "bad", 4) == 0  # no hook yet
    done = admin(bare, "webhooks", "register", "hook=auth_on_register", f"endpoint={url}")
    assert (done.returncode, done.stdout.strip()) == (0, "Done"), done.stderr
    again = admin(bare, "webhooks", "register", "hook=auth_on_register", f"endpoint={url}")
    assert again.returncode == 1 and "already_registered" in again.stderr
    shown = json.loads(admin(bare, "--json", "webhooks", "show").stdout)
    assert shown == [
        {
            "hook": "auth_on_register",
            "endpoint": url,
            "name": "",
            "base64_payload": True,
            "source": "runtime",
        }
    ]
    table = admin(bare, "webhooks", "show").stdout
    assert "auth_on_register" in table and "runtime" in table
    before = service.count("auth_on_register", username="bad")
    assert _refused_connects(bare, "bad", 8) == 8  # whichever process took it
    assert service.count("auth_on_register", username="bad") == before + 8
    off = admin(bare, "webhooks", "deregister", "hook=auth_on_register", f"endpoint={url}")
    assert off.returncode == 0, off.stderr
    assert _refused_connects(bare, "bad", 4) == 0
    assert json.loads(admin(bare, "--json", "webhooks", "show").stdout) == []
    gone = admin(bare, "webhooks", "deregister", "hook=auth_on_register", f"endpoint={url}")
    assert gone.returncode == 1 and "not_found" in gone.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["hook=on_nothing", "endpoint=http://127.0.0.1:1/x"], "unknown hook"),
        (["hook=on_publish", "endpoint=127.0.0.1:1/x"], "invalid endpoint"),
        (
            ["hook=on_publish", "endpoint=http://127.0.0.1:1/x", "base64_payload=maybe"],
            "true or false",
        ),
        (["hook=on_publish"], "endpoint="),
    ],
)
def test_a_bad_registration_says_why_and_fails(bare: Node, args: list[str], said: str) -> None:
    out = admin(bare, "webhooks", "register", *args)
    assert out.returncode != 0 and said in out.stderr, (out.returncode, out.stderr)


def test_a_dead_on_deliver_endpoint_delivers_unchanged(bare: Node) -> None:
    dead = f"http://127.0.0.1:{free_port()}/nobody"
    assert (
        admin(bare, "webhooks", "register", "hook=on_deliver", f"endpoint={dead}").returncode == 0
    )
    try:
        sub = Client("wh-dead-sub", bare.mqtt_port, 4).connect()
        pub = Client("wh-dead-pub", bare.mqtt_port, 4).connect()
        try:
            sub.subscribe("dead/#", qos=1)
            # the two clients may sit in different listener processes
            until_routed(pub, "dead/probe", [sub])
            for i in range(3):
                pub.publish(f"dead/{i}", f"m{i}".encode(), qos=i % 2)
            got = [(m.topic, m.payload) for m in sub.take(3)]
        finally:
            pub.disconnect()
            sub.disconnect()
        assert got == [("dead/0", b"m0"), ("dead/1", b"m1"), ("dead/2", b"m2")]
        wait_for(lambda: refused(bare, "on_deliver"), 10, what="webhook.failed")
    finally:
        admin(bare, "webhooks", "deregister", "hook=on_deliver", f"endpoint={dead}")


def test_runtime_registrations_end_with_the_node(
    tmp_path_factory: pytest.TempPathFactory, service: HookService
) -> None:
    url = f"http://127.0.0.1:{service.port}/hooks"
    n = make_node(
        tmp_path_factory.mktemp("wh-restart"),
        **{"webhooks.c.hook": "on_publish", "webhooks.c.endpoint": url},
    )
    n.start()
    try:
        ok = admin(n, "webhooks", "register", "hook=on_deliver", f"endpoint={url}",
                   "--base64payload=false")  # fmt: skip
        assert ok.returncode == 0, ok.stderr
        rows = json.loads(admin(n, "--json", "webhooks", "show").stdout)
        assert [(r["hook"], r["source"], r["base64_payload"]) for r in rows] == [
            ("on_publish", "config", True),
            ("on_deliver", "runtime", False),
        ]
        # base64_payload=false: the hook sees the payload as text
        sub = Client("wh-rt-sub", n.mqtt_port, 4).connect()
        pub = Client("wh-rt-pub", n.mqtt_port, 4).connect()
        try:
            sub.subscribe("rt/#", qos=1)
            pub.publish("rt/a", b"plain text", qos=1)
            sub.take(1)
        finally:
            pub.disconnect()
            sub.disconnect()
        assert service.count("on_deliver", client_id="wh-rt-sub", payload="plain text") == 1
        assert n.stop() == 0, n.output()
        n.start()
        rows = json.loads(admin(n, "--json", "webhooks", "show").stdout)
        assert [(r["hook"], r["source"]) for r in rows] == [("on_publish", "config")]
    finally:
        assert n.stop() == 0, n.output()
