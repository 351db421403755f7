"""VerneMQ-compatible webhook bodies and answers (``webhooks.spec``), and one connection's
hook decisions (``webhooks.gate``) against a scripted endpoint."""

from __future__ import annotations

import asyncio
import base64
import json
from types import SimpleNamespace
from typing import Any

from services.listener.mqtt.types import NO_PROPERTIES, Publish, Subscribe, Subscription
from services.listener.session.auth import AllowAll
from services.listener.webhooks.client import Endpoint, Webhooks
from services.listener.webhooks.gate import ConnectionHooks
from services.listener.webhooks.spec import (
    NEXT,
    Decision,
    cache_key,
    parse_reply,
    publish_body,
    register_body,
    subscribe_modifier,
)


def test_answers_mean_what_vernemq_says() -> None:
    assert parse_reply(200, None, b'{"result": "ok"}') == Decision("ok")
    assert parse_reply(200, None, b'{"result": "next"}') == NEXT
    refused = parse_reply(200, None, b'{"result": {"error": "not_allowed"}}')
    assert (refused.result, refused.reason) == ("error", "not_allowed")
    ok = parse_reply(200, "max-age=30", b'{"result": "ok", "modifiers": {"topic": "x"}}')
    assert ok.modifiers == {"topic": "x"} and ok.max_age == 30
    # a 3.1.1 subscribe rewrite comes as a top-level "topics"
    sub = parse_reply(200, None, b'{"result": "ok", "topics": [{"topic": "a", "qos": 0}]}')
    assert sub.modifiers == {"topics": [{"topic": "a", "qos": 0}]}


def test_anything_else_refuses() -> None:
    for status, raw in ((500, b'{"result": "ok"}'), (200, b"ok"), (200, b"[]"), (200, b"{}")):
        assert parse_reply(status, None, raw).result == "error", (status, raw)


def test_bodies_carry_vernemqs_fields() -> None:
    v4 = register_body(4, "10.0.0.1:5000", "", "c1", "u", b"pw", True)
    assert v4 == {
        "peer_addr": "10.0.0.1",
        "peer_port": 5000,
        "mountpoint": "",
        "client_id": "c1",
        "username": "u",
        "password": "pw",
        "clean_session": True,
    }
    v5 = register_body(5, "[::1]:5000", "m", "c1", None, None, False)
    assert v5["peer_addr"] == "::1" and v5["clean_start"] is False and v5["properties"] == {}
    pub = publish_body(4, "", "c1", "u", "a/b", 1, b"hi", False)
    assert pub["payload"] == base64.b64encode(b"hi").decode() and pub["qos"] == 1
    assert publish_body(4, "", "c1", "u", "a/b", 1, b"hi", False, False)["payload"] == "hi"


def test_the_cache_key_leaves_out_the_payload_only() -> None:
    a = publish_body(4, "", "c1", "u", "a/b", 1, b"one", False)
    b = publish_body(4, "", "c1", "u", "a/b", 1, b"two", False)
    c = publish_body(4, "", "c1", "u", "a/c", 1, b"one", False)
    assert cache_key("auth_on_publish", a) == cache_key("auth_on_publish", b)
    assert cache_key("auth_on_publish", a) != cache_key("auth_on_publish", c)


def test_a_subscription_rewrite_keeps_the_number_of_filters() -> None:
    rewrite = [{"topic": "x", "qos": 1}, {"topic": "y", "qos": 135}]
    assert subscribe_modifier(rewrite, 2) == [("x", 1), ("y", 135)]
    assert isinstance(subscribe_modifier(rewrite, 3), str)
    assert isinstance(subscribe_modifier([{"topic": "x", "qos": 7}], 1), str)


class _Scripted(Webhooks):
    """Answers from a table instead of HTTP; records what it was asked."""

    def __init__(self, hooks: list[str], answers: dict[str, Decision]) -> None:
        super().__init__([Endpoint(h, h, "http://unused") for h in hooks])
        self.answers = answers
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def ask(self, hook: str, body: dict[str, Any]) -> Decision:
        self.asked.append((hook, json.loads(json.dumps(body))))
        return self.answers.get(hook, NEXT)


def _session(version: int = 4) -> Any:
    return SimpleNamespace(
        protocol_version=version, client_id="c1", username="u", mountpoint="", inbound=None
    )


def _publish(topic: str, payload: bytes = b"p") -> Publish:
    return Publish(topic, payload, 1, False, False, 7, NO_PROPERTIES)


def test_a_publish_rewritten_by_its_hook_is_allowed_under_its_new_topic() -> None:
    mods = {"topic": "rewritten/t", "payload": base64.b64encode(b"new").decode(), "retain": True}
    hooks = _Scripted(["auth_on_publish"], {"auth_on_publish": Decision("ok", mods)})
    gate = ConnectionHooks(hooks, AllowAll())
    pkt = _publish("a/b")
    assert gate.wants(pkt, 4)
    out = asyncio.run(gate.decide(pkt, _session(), "1.2.3.4:5"))
    assert out is pkt and not gate.wants(pkt, 4)  # decided: the session takes it now
    assert (pkt.topic, pkt.payload, pkt.retain) == ("rewritten/t", b"new", True)
    assert gate.authorize_publish("c1", "u", "", "rewritten/t") is True
    assert hooks.asked[0][1]["topic"] == "a/b"


def test_a_refused_publish_and_next_leaves_it_to_the_rules() -> None:
    refuse = _Scripted(["auth_on_publish"], {"auth_on_publish": Decision("error", reason="no")})
    gate = ConnectionHooks(refuse, AllowAll())
    asyncio.run(gate.decide(_publish("a/b"), _session(), "p:1"))
    assert gate.authorize_publish("c1", "u", "", "a/b") is False

    class DenyPublish:
        def authenticate(self, *args: Any) -> int:
            return 0

        def authorize_publish(self, *args: Any) -> bool:
            return False

        def authorize_subscribe(self, *args: Any) -> bool:
            return True

    nxt = ConnectionHooks(_Scripted(["auth_on_publish"], {}), DenyPublish())
    asyncio.run(nxt.decide(_publish("a/b"), _session(), "p:1"))
    assert nxt.authorize_publish("c1", "u", "", "a/b") is False  # the ACL's answer


def test_a_subscription_rewrite_refuses_and_grants_per_filter() -> None:
    rewrite = {"topics": [{"topic": "mine/#", "qos": 0}, {"topic": "secret/#", "qos": 135}]}
    hooks = _Scripted(["auth_on_subscribe_m5"], {"auth_on_subscribe_m5": Decision("ok", rewrite)})
    gate = ConnectionHooks(hooks, AllowAll())
    pkt = Subscribe(3, (Subscription("a/#", 1), Subscription("secret/#", 2)))
    assert gate.wants(pkt, 5) and not gate.wants(pkt, 4)  # only the _m5 hook is configured
    out = asyncio.run(gate.decide(pkt, _session(5), "p:1"))
    assert isinstance(out, Subscribe)
    assert [(s.topic_filter, s.qos) for s in out.subscriptions] == [("mine/#", 0), ("secret/#", 2)]
    assert gate.authorize_subscribe("c1", "u", "", "mine/#") is True
    assert gate.authorize_subscribe("c1", "u", "", "secret/#") is False


def test_register_decides_or_defers_to_the_password_rules() -> None:
    from services.listener.mqtt.types import Connect

    def connect(user: str) -> Connect:
        return Connect("MQTT", 4, True, 60, "c1", None, user, b"pw", NO_PROPERTIES)

    answers = {"auth_on_register": Decision("error", reason="not_allowed")}
    gate = ConnectionHooks(_Scripted(["auth_on_register"], answers), AllowAll())
    asyncio.run(gate.decide(connect("bad"), _session(), "10.0.0.1:5"))
    assert gate.authenticate("c1", "bad", b"pw", "10.0.0.1:5") == 0x87
    gate = ConnectionHooks(_Scripted(["auth_on_register"], {}), AllowAll())
    asyncio.run(gate.decide(connect("any"), _session(), "10.0.0.1:5"))
    assert gate.connect is None and gate.authenticate("c1", "any", b"pw", "p") == 0
