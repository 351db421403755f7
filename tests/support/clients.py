"""Real MQTT clients for integration tests: paho-mqtt (v3.1.1 and v5) and mosquitto CLI."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.support.node import wait_for


@dataclass
class Received:
    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    properties: Any = None


@dataclass
class Client:
    """A paho client running its network loop in a thread, recording what it sees."""

    client_id: str
    port: int
    version: int = 4  # 3 = 3.1, 4 = 3.1.1, 5 = 5.0
    clean: bool = True
    session_expiry: int = 0
    username: str | None = None
    password: str | None = None
    will: tuple[str, bytes, int, bool] | None = None
    reconnect: bool = True  # paho reconnects by itself after a lost connection
    host: str = "127.0.0.1"
    tls: tuple[str, str | None, str | None] | None = None  # (CA file, cert file, key file)
    websocket: bool = False  # MQTT over WebSocket, path /mqtt
    messages: queue.Queue[Received] = field(default_factory=queue.Queue)
    acked: list[int] = field(default_factory=list)  # tags answered with success
    refused: list[tuple[int, int]] = field(default_factory=list)  # (tag, failure code)
    connack: threading.Event = field(default_factory=threading.Event)
    disconnected: threading.Event = field(default_factory=threading.Event)
    reason_code: Any = None
    disconnect_reason: Any = None
    session_present: bool = False

    def __post_init__(self) -> None:
        protocol = {3: mqtt.MQTTv31, 4: mqtt.MQTTv311, 5: mqtt.MQTTv5}[self.version]
        kwargs: dict[str, Any] = {}
        if self.version < 5:
            kwargs["clean_session"] = self.clean
        self.paho = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=protocol,
            reconnect_on_failure=self.reconnect,
            transport="websockets" if self.websocket else "tcp",
            **kwargs,
        )
        if self.websocket:
            self.paho.ws_set_options(path="/mqtt")
        self.paho.on_connect = self._on_connect
        self.paho.on_message = self._on_message
        self.paho.on_publish = self._on_publish
        self.paho.on_disconnect = self._on_disconnect
        self.paho.max_inflight_messages_set(100)
        if self.username is not None:
            self.paho.username_pw_set(self.username, self.password)
        if self.will is not None:
            self.paho.will_set(*self.will)
        if self.tls is not None:
            ca, cert, key = self.tls
            self.paho.tls_set(ca_certs=ca, certfile=cert, keyfile=key)
        self._mids: dict[int, int] = {}
        self._lock = threading.Lock()

    def _on_connect(self, c: Any, u: Any, flags: Any, rc: Any, props: Any = None) -> None:
        self.reason_code = rc
        self.session_present = bool(flags.session_present)
        self.connack.set()

    def _on_message(self, c: Any, u: Any, msg: mqtt.MQTTMessage) -> None:
        self.messages.put(
            Received(
                msg.topic,
                msg.payload,
                msg.qos,
                bool(msg.retain),
                bool(msg.dup),
                getattr(msg, "properties", None),
            )
        )

    def _on_publish(self, c: Any, u: Any, mid: int, rc: Any, props: Any) -> None:
        with self._lock:
            tag = self._mids.pop(mid, None)
        if tag is None:
            return
        code = getattr(rc, "value", rc)  # a v5 PUBACK's reason code; 0 for 3.1.1
        if code >= 0x80:
            self.refused.append((tag, code))
        else:
            self.acked.append(tag)

    def _on_disconnect(self, c: Any, u: Any, flags: Any, rc: Any, props: Any = None) -> None:
        self.disconnect_reason = rc
        self.disconnected.set()

    def connect(self, timeout: float = 15, expect_ok: bool = True) -> Client:
        props = None
        if self.version == 5:
            props = Properties(PacketTypes.CONNECT)
            if self.session_expiry:
                props.SessionExpiryInterval = self.session_expiry
            self.paho.connect(
                self.host, self.port, keepalive=60, clean_start=self.clean, properties=props
            )
        else:
            self.paho.connect(self.host, self.port, keepalive=60)
        self.paho.loop_start()
        assert self.connack.wait(timeout), f"{self.client_id}: no CONNACK"
        if expect_ok:
            assert not self.reason_code.is_failure, f"{self.client_id}: {self.reason_code}"
        return self

    def subscribe(self, topic: str, qos: int = 1, timeout: float = 10, **opts: Any) -> None:
        done = threading.Event()
        self.paho.on_subscribe = lambda *a: done.set()
        if self.version == 5 and opts:
            from paho.mqtt.subscribeoptions import SubscribeOptions

            self.paho.subscribe(topic, options=SubscribeOptions(qos=qos, **opts))
        else:
            self.paho.subscribe(topic, qos)
        assert done.wait(timeout), f"{self.client_id}: no SUBACK for {topic}"

    def publish(
        self,
        topic: str,
        payload: bytes | str,
        qos: int = 0,
        retain: bool = False,
        tag: int | None = None,
        properties: Any = None,
    ) -> mqtt.MQTTMessageInfo:
        info = self.paho.publish(topic, payload, qos, retain, properties=properties)
        if tag is not None:
            with self._lock:
                self._mids[info.mid] = tag
        return info

    def unanswered(self) -> int:
        """Tagged publishes still waiting for their PUBACK (or PUBCOMP)."""
        with self._lock:
            return len(self._mids)

    def take(self, n: int, timeout: float = 15) -> list[Received]:
        out = []
        for _ in range(n):
            out.append(self.messages.get(timeout=timeout))
        return out

    def drain(self, quiet: float = 1.0) -> list[Received]:
        """Everything that arrives until ``quiet`` seconds pass without a message."""
        out = []
        while True:
            try:
                out.append(self.messages.get(timeout=quiet))
            except queue.Empty:
                return out

    def disconnect(self) -> None:
        self.paho.disconnect()
        self.paho.loop_stop()

    def drop(self) -> None:
        """Close the socket without DISCONNECT (an abnormal end: wills fire)."""
        sock = self.paho.socket()
        self.paho.loop_stop()
        if sock is not None:
            sock.close()


def connect_frame(client_id: str) -> bytes:
    """A raw MQTT 3.1.1 CONNECT (clean session, keepalive 60), for tests that speak to the
    socket below any client library."""
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid
    return bytes([0x10, len(body)]) + body


def until_routed(pub: Client, topic: str, subs: list[Client], bound: float = 30.0) -> None:
    """Subscriptions reach other nodes (and listener processes) through gossip: publish
    QoS 0 probes on ``topic`` until every subscriber got one, then drain the probes."""

    def all_got_one() -> bool:
        pub.publish(topic, b"probe", qos=0)
        return all(not s.messages.empty() for s in subs)

    wait_for(all_got_one, bound, 0.2, f"probes on {topic} reach every subscriber")
    for s in subs:
        s.drain(0.5)


def mosquitto_pub(port: int, topic: str, message: str, qos: int = 1, *extra: str) -> None:
    subprocess.run(
        ["mosquitto_pub", "-p", str(port), "-t", topic, "-q", str(qos), "-m", message, *extra],
        check=True,
        timeout=20,
    )


def mosquitto_sub_once(
    port: int,
    topic: str,
    count: int,
    client_id: str,
    qos: int = 1,
    persistent: bool = True,
    timeout: float = 20,
) -> list[str]:
    """Receive ``count`` messages with mosquitto_sub (-C), one payload per line."""
    args = [
        "mosquitto_sub",
        "-p",
        str(port),
        "-t",
        topic,
        "-q",
        str(qos),
        "-i",
        client_id,
        "-C",
        str(count),
        "-W",
        str(int(timeout)),
    ]
    if persistent:
        args.append("-c")
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout + 10)
    return out.stdout.splitlines()


__all__ = ["Client", "Received", "mosquitto_pub", "mosquitto_sub_once", "wait_for"]


def connect_until_accepted(
    make: Callable[[], Client], bound: float, pause: float, refusal: int | None = None
) -> Client:
    """A client from ``make``, connected: again after each refusal (such as 0x88 while a
    service or a queue's owner is coming back), until accepted or ``bound`` s passed.
    With ``refusal``, every refusal must carry that reason code."""
    deadline = time.monotonic() + bound
    while True:
        client = make()
        client.connect(expect_ok=False)
        if not client.reason_code.is_failure:
            return client
        client.disconnect()
        if refusal is not None:
            assert client.reason_code.value == refusal, client.reason_code
        assert time.monotonic() < deadline, (
            f"{client.client_id}: refused for {bound:g} s: {client.reason_code}"
        )
        time.sleep(pause)
