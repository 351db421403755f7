"""MQTT 5 enhanced authentication on a real node, answered by ``on_auth_m5`` on a real
HTTP service the test runs (VerneMQ's bodies and answers): a multi-round AUTH exchange
before CONNACK, re-authentication after it, and the refusals and protocol errors
around both [MQTT-4.12.0-*], [MQTT-4.12.1-*]. Raw clients drive the exchange (paho
cannot send AUTH packets); paho checks a one-round CONNACK."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from services.listener.mqtt.types import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Pingresp,
    Properties,
    Publish,
    Suback,
    Subscribe,
    Subscription,
)
from services.listener.mqtt.types import ReasonCode as R
from tests.conformance.client import RawClient
from tests.support.hook_server import Answer, HookServer
from tests.support.node import Node, make_node, wait_for

pytestmark = pytest.mark.integration
METHOD = "CHAIN"
# The service's toy mechanism: what the client sends -> (reason code, what comes back).
STEPS: dict[bytes, tuple[int, bytes]] = {
    b"hello": (24, b"challenge-1"),
    b"response-1": (24, b"challenge-2"),
    b"response-2": (0, b"welcome"),
    b"quick": (0, b"welcome"),
    b"again": (24, b"challenge-r"),
    b"response-r": (0, b"re-welcome"),
}


class AuthService(HookServer):
    """An ``on_auth_m5`` (and ``auth_on_register_m5``) endpoint; every call recorded."""

    def answer(self, hook: str, body: dict[str, Any]) -> Answer:
        return self.decide(hook, body), {}

    @staticmethod
    def decide(hook: str, body: dict[str, Any]) -> dict[str, Any]:
        if hook != "on_auth_m5":
            return {"result": "next"}  # auth_on_register_m5: ternmq's rules decide
        props = body["properties"]
        data = base64.b64decode(props.get("p_authentication_data", ""))
        if data == b"next":
            return {"result": "next"}
        if props["p_authentication_method"] != METHOD or data not in STEPS:
            return {"result": {"error": "bad_proof"}}
        code, reply = STEPS[data]
        out = {"p_authentication_method": METHOD, "p_authentication_data": _b64(reply)}
        return {"result": "ok", "modifiers": {"reason_code": code, "properties": out}}

    def hooks_for(self, client_id: str) -> list[tuple[str, bytes]]:
        """(hook, the client's data) of every call about ``client_id``, in order."""
        with self.lock:
            calls = [(h, b) for h, b in self.calls if b.get("client_id") == client_id]
        return [
            (h, base64.b64decode(b.get("properties", {}).get("p_authentication_data", "")))
            for h, b in calls
        ]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def service() -> Iterator[AuthService]:
    s = AuthService()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, service: AuthService) -> Iterator[Node]:
    settings = {"webhooks.timeout": "2s", "connect_timeout": "3s"}
    for hook in ("on_auth_m5", "auth_on_register_m5"):
        settings[f"webhooks.{hook}.hook"] = hook
        settings[f"webhooks.{hook}.endpoint"] = f"http://127.0.0.1:{service.port}/hooks"
    n = make_node(tmp_path_factory.mktemp("enhanced-auth"), **settings)
    n.start()
    yield n
    assert n.stop() == 0, n.output()


def props(data: bytes | None, method: str = METHOD) -> Properties:
    return Properties(authentication_method=method, authentication_data=data)


def start(node: Node, client_id: str, data: bytes, method: str = METHOD) -> RawClient:
    client = RawClient.connect(node.mqtt_port, 5)
    client.send(Connect("MQTT", 5, True, 60, client_id, None, None, None, props(data, method)))
    return client


def exchange(node: Node, client_id: str) -> tuple[RawClient, Connack]:
    """The three-step exchange: CONNECT hello, two AUTH rounds, CONNACK."""
    client = start(node, client_id, b"hello")
    assert client.expect(Auth) == Auth(R.CONTINUE_AUTHENTICATION, props(b"challenge-1"))
    client.send(Auth(R.CONTINUE_AUTHENTICATION, props(b"response-1")))
    assert client.expect(Auth) == Auth(R.CONTINUE_AUTHENTICATION, props(b"challenge-2"))
    client.send(Auth(R.CONTINUE_AUTHENTICATION, props(b"response-2")))
    return client, client.expect(Connack)


def test_a_multi_round_exchange_ends_in_a_connack_with_the_method(
    node: Node, service: AuthService
) -> None:
    client, connack = exchange(node, "ea-rounds")
    assert connack.reason_code == 0
    assert connack.properties.authentication_method == METHOD  # [MQTT-4.12.0-5]
    assert connack.properties.authentication_data == b"welcome"
    assert service.hooks_for("ea-rounds") == [
        ("on_auth_m5", b"hello"),
        ("on_auth_m5", b"response-1"),
        ("on_auth_m5", b"response-2"),
        ("auth_on_register_m5", b""),  # asked once the exchange succeeded
    ]
    client.send(Subscribe(1, (Subscription("ea/t", 0),)))
    assert client.expect(Suback).reason_codes == (0,)
    client.send(Publish("ea/t", b"in", 0))
    assert client.expect(Publish).payload == b"in"  # a working session
    client.disconnect()


def test_reauthentication_succeeds_and_the_connection_goes_on(
    node: Node, service: AuthService
) -> None:
    client, connack = exchange(node, "ea-reauth")
    assert connack.reason_code == 0
    client.send(Auth(R.RE_AUTHENTICATE, props(b"again")))
    assert client.expect(Auth) == Auth(R.CONTINUE_AUTHENTICATION, props(b"challenge-r"))
    client.send(Pingreq())  # other packets go on during a re-authentication
    assert client.expect(Pingresp) == Pingresp()
    client.send(Auth(R.CONTINUE_AUTHENTICATION, props(b"response-r")))
    assert client.expect(Auth) == Auth(R.SUCCESS, props(b"re-welcome"))
    client.send(Pingreq())
    assert client.expect(Pingresp) == Pingresp()
    assert service.hooks_for("ea-reauth")[-2:] == [
        ("on_auth_m5", b"again"),
        ("on_auth_m5", b"response-r"),
    ]
    client.disconnect()


@pytest.mark.parametrize(
    ("auth", "code"),
    [
        (Auth(R.RE_AUTHENTICATE, props(b"wrong")), R.NOT_AUTHORIZED),  # the hook refuses
        (Auth(R.RE_AUTHENTICATE, props(b"again", "OTHER")), R.PROTOCOL_ERROR),
        (Auth(R.CONTINUE_AUTHENTICATION, props(b"again")), R.PROTOCOL_ERROR),  # out of turn
    ],
)
def test_a_failed_reauthentication_disconnects(node: Node, auth: Auth, code: int) -> None:
    """[MQTT-4.12.1-1], [MQTT-4.12.1-2]: DISCONNECT with the reason, then close."""
    client, _ = exchange(node, f"ea-refused-{code}")
    client.send(auth)
    assert client.expect(Disconnect).reason_code == code
    client.expect_closed()


@pytest.mark.parametrize(
    ("data", "code"),
    [(b"wrong", R.NOT_AUTHORIZED), (b"next", R.BAD_AUTHENTICATION_METHOD)],
)
def test_a_refused_round_refuses_the_connect(node: Node, data: bytes, code: int) -> None:
    client = start(node, f"ea-bad-{code}", b"hello")
    client.expect(Auth)
    client.send(Auth(R.CONTINUE_AUTHENTICATION, props(data)))
    assert client.expect(Connack).reason_code == code
    client.expect_closed()


def test_only_auth_may_arrive_before_connack(node: Node) -> None:
    """[MQTT-3.1.2-30]: a PUBLISH during the exchange is a protocol error."""
    client = start(node, "ea-early-publish", b"hello")
    client.expect(Auth)
    client.send(Publish("ea/t", b"too early", 0))
    assert client.expect(Connack).reason_code == R.PROTOCOL_ERROR
    client.expect_closed()


def test_auth_without_enhanced_authentication_is_a_protocol_error(node: Node) -> None:
    """[MQTT-4.12.0-7]"""
    client = RawClient.connect(node.mqtt_port, 5)
    client.send(Connect("MQTT", 5, True, 60, "ea-plain", None, None, None, Properties()))
    connack = client.expect(Connack)
    assert connack.reason_code == 0 and connack.properties.authentication_method is None
    client.send(Auth(R.RE_AUTHENTICATE, props(b"again")))
    assert client.expect(Disconnect).reason_code == R.PROTOCOL_ERROR
    client.expect_closed()


def test_a_malformed_auth_is_a_logged_protocol_error(node: Node) -> None:
    client, _ = exchange(node, "ea-malformed")
    client.send_raw(bytes([0xF0, 0x02, 0x05, 0x00]))  # reason code 0x05: not AUTH's
    assert client.expect(Disconnect).reason_code == R.MALFORMED_PACKET
    client.expect_closed()
    wait_for(
        lambda: any(e.get("client_id") == "ea-malformed" for e in node.events("protocol.error")),
        10,
        what="protocol.error logged",
    )


def test_the_connect_timeout_bounds_the_exchange(node: Node) -> None:
    client = start(node, "ea-silent", b"hello")
    client.expect(Auth)
    client.expect_closed(timeout=10)  # no answer within connect_timeout (3 s): closed


def test_paho_gets_the_method_back_in_its_connack(node: Node) -> None:
    got: list[tuple[int, Any]] = []
    done = threading.Event()

    def on_connect(c: Any, u: Any, flags: Any, rc: Any, properties: Any = None) -> None:
        got.append((getattr(rc, "value", rc), properties))
        done.set()

    paho = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id="ea-paho",
        protocol=mqtt.MQTTv5,
        reconnect_on_failure=False,
    )
    paho.on_connect = on_connect
    connect_props = PahoProperties(PacketTypes.CONNECT)
    connect_props.AuthenticationMethod = METHOD
    connect_props.AuthenticationData = b"quick"
    paho.connect("127.0.0.1", node.mqtt_port, keepalive=60, properties=connect_props)
    paho.loop_start()
    try:
        assert done.wait(15), "no CONNACK"
    finally:
        paho.disconnect()
        paho.loop_stop()
    code, connack_props = got[0]
    assert code == 0
    assert connack_props.AuthenticationMethod == METHOD
    assert connack_props.AuthenticationData == b"welcome"
