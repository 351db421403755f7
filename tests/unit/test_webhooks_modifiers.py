"""VerneMQ's modifiers and the hooks of issue 18's last part, without HTTP: register and
publish modifiers, on_deliver (its order), on_auth_m5, on_offline_message's body, and
the runtime registration file."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from services.common.runtime_file import RuntimeFile, Watcher
from services.listener.mqtt.types import NO_PROPERTIES, Connect, Properties, Publish
from services.listener.session.auth import AllowAll
from services.listener.session.handle_auth import AuthAnswer
from services.listener.session.limits import SessionLimits
from services.listener.session.messages import Message, OutboundMessage
from services.listener.webhooks import runtime
from services.listener.webhooks.client import Endpoint, Webhooks
from services.listener.webhooks.deliver import DeliverHook
from services.listener.webhooks.gate import ConnectionHooks
from services.listener.webhooks.spec import (
    NEXT,
    Decision,
    RegisterModifiers,
    auth_m5_answer,
    auth_m5_body,
    check_registration,
    deliver_body,
    deliver_modifiers,
    offline_message_body,
    qos_modifier,
    register_modifiers,
)


class _Scripted(Webhooks):
    """Answers from a table (or a function) instead of HTTP; records what it was asked."""

    def __init__(self, hooks: list[str], answers: dict[str, Decision]) -> None:
        super().__init__([Endpoint(h, h, "http://unused") for h in hooks])
        self.answers = answers
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.invalids: list[str] = []

    async def ask(self, hook: str, body: dict[str, Any]) -> Decision:
        self.asked.append((hook, json.loads(json.dumps(body))))
        return self.answers.get(hook, NEXT)

    def invalid(self, hook: str, reason: str) -> None:
        self.invalids.append(reason)


# -- pure bodies and answers ------------------------------------------------------------
def test_on_deliver_and_on_offline_message_bodies_are_vernemqs() -> None:
    body = deliver_body("mp", "sub", "u", "a/b", 1, b"hi", False)
    assert body == {
        "username": "u",
        "client_id": "sub",
        "mountpoint": "mp",
        "qos": 1,
        "topic": "a/b",
        "payload": base64.b64encode(b"hi").decode(),
        "retain": False,
        "properties": {},
    }
    assert offline_message_body("", "c", 2, "t", b"x", True, False) == {
        "mountpoint": "",
        "client_id": "c",
        "qos": 2,
        "topic": "t",
        "payload": "x",
        "retain": True,
    }


def test_on_auth_m5_body_and_answer() -> None:
    body = auth_m5_body("", "c1", "u", "SCRAM", b"\x01\x02")
    assert body["properties"] == {
        "p_authentication_method": "SCRAM",
        "p_authentication_data": base64.b64encode(b"\x01\x02").decode(),
    }
    ok = {"reason_code": 0, "properties": {"p_authentication_method": "SCRAM"}}
    assert auth_m5_answer(ok, "SCRAM") == 0
    assert auth_m5_answer({**ok, "reason_code": 24}, "SCRAM") == 0x18
    assert isinstance(auth_m5_answer(ok, "OTHER"), str)  # the method must come back
    assert isinstance(auth_m5_answer({**ok, "reason_code": 135}, "SCRAM"), str)
    assert isinstance(auth_m5_answer({"reason_code": 0}, "SCRAM"), str)


def test_register_modifiers_map_onto_the_session_or_are_ignored() -> None:
    mods = register_modifiers(
        {
            "max_message_size": 1024,
            "max_inflight_messages": 5,
            "retry_interval": 2500,  # VerneMQ's milliseconds
            "max_online_messages": 7.0,
            "clean_session": False,
            "username": "renamed",
            "subscriber_id": {"client_id": "new-id", "mountpoint": "mp"},
            "upgrade_qos": True,
            "max_offline_messages": 3,
        }
    )
    assert isinstance(mods, RegisterModifiers)
    assert dict(mods.limits) == {
        "max_message_size": 1024,
        "max_inflight_messages": 5,
        "retry_interval": 2.5,
        "max_online_messages": 7,
    }
    assert (mods.client_id, mods.mountpoint, mods.username, mods.clean) == (
        "new-id",
        "mp",
        "renamed",
        False,
    )
    assert mods.ignored == ("upgrade_qos", "max_offline_messages")
    m5 = register_modifiers({"properties": {"p_session_expiry_interval": 30}})
    assert isinstance(m5, RegisterModifiers) and m5.session_expiry == 30


@pytest.mark.parametrize(
    "bad",
    [
        {"no_such_modifier": 1},
        {"max_message_size": "big"},
        {"max_inflight_messages": -1},
        {"clean_session": "yes"},
        {"subscriber_id": {"client_id": "x"}},
        {"client_id": ""},
        {"properties": []},
    ],
)
def test_a_register_modifier_that_cannot_be_applied_is_said_why(bad: dict[str, Any]) -> None:
    assert isinstance(register_modifiers(bad), str)


def test_publish_qos_and_deliver_modifiers() -> None:
    assert qos_modifier({}) is None
    assert qos_modifier({"qos": 2}) == 2 and qos_modifier({"qos": 1.0}) == 1
    assert isinstance(qos_modifier({"qos": 3}), str)
    assert isinstance(qos_modifier({"qos": True}), str)
    new = base64.b64encode(b"new").decode()
    assert deliver_modifiers({"topic": "x/y", "payload": new}, True) == ("x/y", b"new")
    assert deliver_modifiers({"payload": "plain"}, False) == (None, b"plain")
    assert isinstance(deliver_modifiers({"topic": "x/#"}, True), str)
    assert isinstance(deliver_modifiers({"payload": "a"}, True), str)  # not base64


def test_registrations_are_checked_as_vernemq_checks_them() -> None:
    assert check_registration("on_deliver", "http://127.0.0.1:8000/hooks") == ""
    assert check_registration("on_auth_m5", "https://auth.example/x") == ""
    assert "unknown hook" in check_registration("on_nothing", "http://a/b")
    for url in ("127.0.0.1:80/x", "ftp://a/b", "http://", "http://a:99999/x", "http://a b/"):
        assert "invalid endpoint" in check_registration("on_publish", url), url


# -- the runtime registration file ------------------------------------------------------
def test_register_and_deregister_change_the_list_in_vernemqs_way() -> None:
    cfg = [{"hook": "on_publish", "endpoint": "http://a/", "name": "p", "base64_payload": True}]
    added = runtime.change(cfg, "register", "on_deliver", "http://b/", False)
    assert isinstance(added, list) and [e["endpoint"] for e in added] == ["http://a/", "http://b/"]
    assert added[1]["source"] == "runtime" and added[1]["base64_payload"] is False
    assert "already_registered" in str(runtime.change(added, "register", "on_deliver", "http://b/"))
    assert "not_found" in str(runtime.change(cfg, "deregister", "on_deliver", "http://b/"))
    removed = runtime.change(added, "deregister", "on_publish", "http://a/")  # a configured one
    assert isinstance(removed, list) and [e["hook"] for e in removed] == ["on_deliver"]
    assert "unknown hook" in str(runtime.change(cfg, "register", "nope", "http://b/"))


def test_a_listener_applies_the_file_and_answers_with_the_generation(tmp_path: Path) -> None:
    file = RuntimeFile(tmp_path, "webhooks", "endpoints")
    hooks = Webhooks([Endpoint("p", "on_publish", "http://a/")])
    watcher = Watcher(file, hooks.apply_rows, "webhooks.runtime")
    assert not watcher.check()  # no file: the configuration stands
    assert hooks.has("on_publish")
    rows = [{"hook": "on_deliver", "endpoint": "http://b/", "base64_payload": False}]
    file.save(3, rows)
    assert file.path == tmp_path / "run" / "webhooks.json"
    assert watcher.check() and not watcher.check()  # applied once
    assert hooks.has("on_deliver") and not hooks.has("on_publish")
    assert hooks.base64_payload("on_deliver") is False
    assert file.ack_path(os.getpid()).read_text() == "3" and file.applied(os.getpid()) == 3
    file.clear()
    assert not file.path.exists() and not file.ack_path(os.getpid()).exists()


# -- CONNECT: register modifiers and on_auth_m5 ------------------------------------------
def _session(version: int = 5) -> Any:
    limits = SessionLimits()
    return SimpleNamespace(
        protocol_version=version,
        client_id="c1",
        username="u",
        mountpoint="",
        inbound=None,
        limits=limits,
        outbound=SimpleNamespace(limits=limits, window=limits.inflight_window),
    )


def _connect(version: int = 5, method: str | None = None, user: str = "u") -> Connect:
    props = Properties(authentication_method=method, authentication_data=b"d0" if method else None)
    return Connect("MQTT", version, True, 60, "c1", None, user, b"pw", props)


def test_register_modifiers_rewrite_the_connect_and_the_sessions_limits() -> None:
    mods = {
        "max_message_size": 10,
        "max_inflight_messages": 3,
        "retry_interval": 1000,
        "clean_session": False,
        "client_id": "renamed",
        "mountpoint": "tenant",
        "allow_publish": False,
    }
    hooks = _Scripted(["auth_on_register"], {"auth_on_register": Decision("ok", mods)})
    gate = ConnectionHooks(hooks, AllowAll())
    s = _session(4)
    pkt = _connect(4)
    asyncio.run(gate.decide(pkt, s, "10.0.0.1:5"))
    assert gate.authenticate("renamed", "u", b"pw", "p") == 0
    assert (pkt.client_id, pkt.clean_start, s.mountpoint) == ("renamed", False, "tenant")
    assert (s.limits.max_message_size, s.limits.retry_interval) == (10, 1.0)
    assert s.outbound.limits is s.limits and s.outbound.window == 3
    assert gate.authorize_publish("renamed", "u", "tenant", "any/topic") is False


def test_an_unknown_register_modifier_refuses() -> None:
    answers = {"auth_on_register": Decision("ok", {"frobnicate": 1})}
    hooks = _Scripted(["auth_on_register"], answers)
    gate = ConnectionHooks(hooks, AllowAll())
    asyncio.run(gate.decide(_connect(4), _session(4), "p:1"))
    assert gate.authenticate("c1", "u", b"pw", "p") == 0x87 and hooks.invalids


def _auth_ok(code: int = 0, method: str = "M") -> Decision:
    return Decision("ok", {"reason_code": code, "properties": {"p_authentication_method": method}})


def test_on_auth_m5_accepts_and_the_session_takes_the_verdict() -> None:
    hooks = _Scripted(["on_auth_m5"], {"on_auth_m5": _auth_ok()})
    gate = ConnectionHooks(hooks, AllowAll())
    pkt = _connect(method="M")
    assert gate.wants(pkt, 5) and not gate.wants(_connect(), 5)
    asyncio.run(gate.decide(pkt, _session(), "p:1"))
    assert pkt.properties.authentication_method == "M"  # the session answers it now
    assert gate.auth_answer() == AuthAnswer(0) and gate.auth_answer() is None  # taken once
    assert gate.authenticate("c1", "u", b"pw", "p") == 0
    assert hooks.asked[0] == ("on_auth_m5", auth_m5_body("", "c1", "u", "M", b"d0"))


def test_on_auth_m5_then_auth_on_register_m5_decides() -> None:
    answers = {"on_auth_m5": _auth_ok(), "auth_on_register_m5": Decision("error", reason="no")}
    gate = ConnectionHooks(_Scripted(["on_auth_m5", "auth_on_register_m5"], answers), AllowAll())
    asyncio.run(gate.decide(_connect(method="M"), _session(), "p:1"))
    assert gate.authenticate("c1", "u", b"pw", "p") == 0x87


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (Decision("error", reason="bad credentials"), 0x87),
        (_auth_ok(method="OTHER"), 0x87),  # not the client's method
        (_auth_ok(code=0x18), 0x18),  # an AUTH exchange: the session continues it
    ],
)
def test_on_auth_m5_verdicts(answer: Decision, code: int) -> None:
    gate = ConnectionHooks(_Scripted(["on_auth_m5"], {"on_auth_m5": answer}), AllowAll())
    asyncio.run(gate.decide(_connect(method="M"), _session(), "p:1"))
    verdict = gate.auth_answer()
    assert verdict is not None and verdict.code == code


def test_on_auth_m5_next_leaves_the_connect_to_the_session() -> None:
    gate = ConnectionHooks(_Scripted(["on_auth_m5"], {}), AllowAll())
    pkt = _connect(method="M")
    asyncio.run(gate.decide(pkt, _session(), "p:1"))
    assert pkt.properties.authentication_method == "M" and gate.connect is None
    assert gate.auth_answer() is None  # the session refuses the method (0x8C)


# -- PUBLISH: the qos modifier ------------------------------------------------------------
def test_the_qos_modifier_applies_to_the_routed_message_not_the_packet() -> None:
    answers = {"auth_on_publish": Decision("ok", {"qos": 0})}
    gate = ConnectionHooks(_Scripted(["auth_on_publish"], answers), AllowAll())
    pkt = Publish("a/b", b"p", 1, False, False, 7, NO_PROPERTIES)
    asyncio.run(gate.decide(pkt, _session(4), "p:1"))
    assert pkt.qos == 1  # the client's PUBACK follows the QoS it sent
    msg = Message("m1", "a/b", b"p", 1, False, "c1", "", 0.0)
    gate.routed(msg)
    assert msg.qos == 0
    again = Message("m2", "a/b", b"p", 1, False, "c1", "", 0.0)
    gate.routed(again)  # only the publish it answered for
    assert again.qos == 1


def test_a_bad_qos_modifier_refuses_the_publish() -> None:
    answers = {"auth_on_publish": Decision("ok", {"qos": 5})}
    hooks = _Scripted(["auth_on_publish"], answers)
    gate = ConnectionHooks(hooks, AllowAll())
    asyncio.run(gate.decide(Publish("a/b", b"p", 1, False, False, 7), _session(4), "p:1"))
    assert gate.authorize_publish("c1", "u", "", "a/b") is False and hooks.invalids


# -- on_deliver: in order, each after its answer ---------------------------------------
class _Executor:
    def __init__(self) -> None:
        self.sid: tuple[str, str] | None = ("", "sub")
        self.appending = 0
        self.delivered: list[tuple[str, bytes]] = []

    def deliver_hooked(self, out: OutboundMessage) -> None:
        self.delivered.append((out.message.topic, out.message.payload))


class _Slow(_Scripted):
    """The answer to topic ``t`` comes after ``delays[t]`` seconds."""

    def __init__(self, delays: dict[str, float], mods: dict[str, dict[str, Any]]) -> None:
        super().__init__(["on_deliver"], {})
        self.delays, self.mods = delays, mods

    async def ask(self, hook: str, body: dict[str, Any]) -> Decision:
        await asyncio.sleep(self.delays.get(body["topic"], 0))
        return Decision("ok", self.mods.get(body["topic"], {}))


def test_deliveries_wait_for_their_answers_and_keep_their_order() -> None:
    from services.common.background import Background

    async def run() -> _Executor:
        ex = _Executor()
        hooks = _Slow({"a": 0.2, "b": 0.0}, {"b": {"topic": "x", "payload": "eA=="}})
        pending = Background()
        hook = DeliverHook(hooks, pending, "on_deliver", ex, "u")
        shared = Message("m", "a", b"1", 1, False, "pub", "", 0.0)
        for topic in ("a", "b", "c"):
            msg = Message("m", topic, b"1", 1, False, "pub", "", 0.0)
            hook.push(OutboundMessage(shared if topic == "a" else msg, 1, False))
        assert ex.appending == 3 and ex.delivered == []  # all wait for "a"
        await asyncio.sleep(0.4)
        assert ex.appending == 0 and shared.topic == "a"  # copies are changed, not it
        await pending.close()
        return ex

    ex = asyncio.run(run())
    assert ex.delivered == [("a", b"1"), ("x", b"x"), ("c", b"1")]
