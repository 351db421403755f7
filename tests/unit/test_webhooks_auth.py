"""on_auth_m5 across an AUTH exchange, without HTTP: the verdicts the connection's hooks
keep for the session, the bodies of later rounds, and auth_on_register_m5 asked once the
exchange before CONNACK succeeds."""

from __future__ import annotations

import asyncio
import base64
import json
from types import SimpleNamespace
from typing import Any

from services.listener.mqtt.types import Auth, Connect, Properties
from services.listener.session.auth import AllowAll
from services.listener.session.handle_auth import AuthAnswer
from services.listener.session.limits import SessionLimits
from services.listener.webhooks.client import Endpoint, Webhooks
from services.listener.webhooks.gate import ConnectionHooks
from services.listener.webhooks.spec import NEXT, Decision, auth_m5_reply


class Queued(Webhooks):
    """Each hook answers from its own queue (then ``next``); every question recorded."""

    def __init__(self, answers: dict[str, list[Decision]]) -> None:
        super().__init__([Endpoint(h, h, "http://unused") for h in answers])
        self.answers = answers
        self.asked: list[tuple[str, dict[str, Any]]] = []
        self.invalids: list[str] = []

    async def ask(self, hook: str, body: dict[str, Any]) -> Decision:
        self.asked.append((hook, json.loads(json.dumps(body))))
        queue = self.answers.get(hook) or []
        return queue.pop(0) if queue else NEXT

    def invalid(self, hook: str, reason: str) -> None:
        self.invalids.append(reason)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def answer(code: int, data: bytes | None = None, method: str = "M") -> Decision:
    props: dict[str, Any] = {"p_authentication_method": method}
    if data is not None:
        props["p_authentication_data"] = b64(data)
    return Decision("ok", {"reason_code": code, "properties": props})


def session() -> Any:
    limits = SessionLimits()
    return SimpleNamespace(
        protocol_version=5,
        client_id="connected-id",
        username="connected-user",
        mountpoint="",
        inbound=None,
        limits=limits,
        outbound=SimpleNamespace(limits=limits, window=limits.inflight_window),
    )


def connect_pkt() -> Connect:
    props = Properties(authentication_method="M", authentication_data=b"c1")
    return Connect("MQTT", 5, True, 60, "c1", None, "u", None, props)


def auth(code: int = 0x18, data: bytes = b"c2", method: str = "M") -> Auth:
    return Auth(code, Properties(authentication_method=method, authentication_data=data))


def test_auth_m5_reply_reads_vernemqs_properties() -> None:
    ok = {"reason_code": 24, "properties": {"p_authentication_method": "M"}}
    assert auth_m5_reply(ok, "M") == (0x18, None)
    with_data = {
        **ok,
        "properties": {"p_authentication_method": "M", "p_authentication_data": b64(b"\x00s")},
    }
    assert auth_m5_reply(with_data, "M") == (0x18, b"\x00s")
    bad = {**ok, "properties": {"p_authentication_method": "M", "p_authentication_data": "%%"}}
    assert isinstance(auth_m5_reply(bad, "M"), str)
    assert isinstance(auth_m5_reply(ok, "OTHER"), str)


def test_an_exchange_before_connack_then_auth_on_register_m5() -> None:
    mods = {"client_id": "renamed"}
    hooks = Queued(
        {
            "on_auth_m5": [answer(24, b"s1"), answer(0, b"fin")],
            "auth_on_register_m5": [Decision("ok", mods)],
        }
    )
    gate = ConnectionHooks(hooks, AllowAll())
    s = session()
    pkt = connect_pkt()
    asyncio.run(gate.decide(pkt, s, "10.0.0.1:5"))
    assert gate.auth_answer() == AuthAnswer(0x18, b"s1")
    assert [h for h, _ in hooks.asked] == ["on_auth_m5"]  # no register yet
    assert gate.wants(auth(), 5) and not gate.wants(auth(method="OTHER"), 5)
    assert not gate.wants(auth(code=0), 5)  # not the client's to send: no question
    asyncio.run(gate.decide(auth(), s, "10.0.0.1:5"))
    assert gate.auth_answer() == AuthAnswer(0, b"fin")
    hook, body = hooks.asked[1]
    assert hook == "on_auth_m5" and body["client_id"] == "c1" and body["username"] == "u"
    assert body["properties"] == {
        "p_authentication_method": "M",
        "p_authentication_data": b64(b"c2"),
    }
    assert hooks.asked[2][0] == "auth_on_register_m5"
    assert pkt.client_id == "renamed"  # the held CONNECT, which the session admits
    assert gate.authenticate("renamed", "u", None, "p") == 0


def test_a_refused_round_does_not_ask_auth_on_register() -> None:
    hooks = Queued(
        {
            "on_auth_m5": [answer(24), Decision("error", reason="wrong proof")],
            "auth_on_register_m5": [Decision("ok")],
        }
    )
    gate = ConnectionHooks(hooks, AllowAll())
    s = session()
    asyncio.run(gate.decide(connect_pkt(), s, "p:1"))
    gate.auth_answer()
    asyncio.run(gate.decide(auth(), s, "p:1"))
    verdict = gate.auth_answer()
    assert verdict is not None and verdict.code == 0x87 and verdict.reason == "wrong proof"
    assert [h for h, _ in hooks.asked] == ["on_auth_m5", "on_auth_m5"]


def test_reauthentication_asks_on_auth_m5_for_the_connected_client() -> None:
    hooks = Queued(
        {"on_auth_m5": [answer(0), answer(0, b"re")], "auth_on_register_m5": [Decision("ok")]}
    )
    gate = ConnectionHooks(hooks, AllowAll())
    s = session()
    asyncio.run(gate.decide(connect_pkt(), s, "p:1"))
    assert gate.auth_answer() == AuthAnswer(0)
    asyncio.run(gate.decide(auth(0x19, b"again"), s, "p:1"))
    assert gate.auth_answer() == AuthAnswer(0, b"re")
    hook, body = hooks.asked[-1]
    assert hook == "on_auth_m5" and body["client_id"] == "connected-id"
    assert [h for h, _ in hooks.asked].count("auth_on_register_m5") == 1  # at CONNECT only


def test_an_answer_that_cannot_be_applied_refuses_and_is_logged() -> None:
    bad = Decision(
        "ok",
        {
            "reason_code": 0,
            "properties": {"p_authentication_method": "M", "p_authentication_data": "%%"},
        },
    )
    hooks = Queued({"on_auth_m5": [bad]})
    gate = ConnectionHooks(hooks, AllowAll())
    asyncio.run(gate.decide(connect_pkt(), session(), "p:1"))
    verdict = gate.auth_answer()
    assert verdict is not None and verdict.code == 0x87 and hooks.invalids
    assert not gate.wants(auth(), 5)  # no exchange was taken up
