"""One connection's auth hooks: which packets wait for a webhook, what the answer does to
them, and the authorizer the session then consults (webhooks first, ternmq's own rules on
``next``).

The connection holds a CONNECT, PUBLISH or SUBSCRIBE that a configured hook covers, and
everything after it (:meth:`ConnectionHooks.wants`), while :meth:`ConnectionHooks.decide`
asks. The answer is kept for that packet: the session's synchronous ``authenticate``,
``authorize_publish`` and ``authorize_subscribe`` calls find it. Modifiers rewrite the
packet before the session sees it: a publish's topic, payload and retain flag, a
subscription's filters and QoS (128 or 135 refuses one filter), a CONNECT's client id,
user name, clean flag and session limits (``connect``). A publish's ``qos`` modifier
cannot rewrite the packet (the client's acknowledgement follows the QoS it sent): it is
kept here and applied to the routed message (:meth:`ConnectionHooks.routed`). A hook
that fails (timeout, HTTP error) refuses, and ``webhook.failed`` says why.

Enhanced authentication: ``on_auth_m5`` answers a CONNECT with an Authentication Method
and each AUTH with that method after it; its verdict waits here for the session
(:meth:`ConnectionHooks.auth_answer`, ``session.handle_auth``). When an exchange before
CONNACK succeeds, ``auth_on_register_m5`` is asked for the CONNECT held meanwhile.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from services.listener.mqtt.types import Auth, Connect, Packet, Publish, Subscribe
from services.listener.session.auth import Authorizer
from services.listener.session.handle_auth import AuthAnswer
from services.listener.session.messages import Message
from services.listener.webhooks import connect, props
from services.listener.webhooks.client import Webhooks
from services.listener.webhooks.spec import (
    CONTINUE_AUTHENTICATION,
    RE_AUTHENTICATE,
    REFUSED_QOS,
    Decision,
    hook_name,
    payload_modifier,
    publish_body,
    qos_modifier,
    subscribe_body,
    subscribe_modifier,
)


class ConnectionHooks:
    """The authorizer of one connection when webhooks are configured."""

    def __init__(self, webhooks: Webhooks, inner: Authorizer) -> None:
        self.webhooks = webhooks
        self.inner = inner
        self.decided: Packet | None = None  # the packet the decisions below are for
        self.asking = False  # a hook call is on its way
        self.task: asyncio.Task[Packet] | None = None  # that call (the connection's)
        self.connect: int | None = None  # the CONNECT's reason code; None = ternmq decides
        self.publish: tuple[str, bool] | None = None  # (topic, allowed)
        self.publish_qos: int | None = None  # auth_on_publish's qos modifier, until routed
        self.allow_publish = True  # auth_on_register's allow_publish / allow_subscribe
        self.allow_subscribe = True
        self.subscribe: dict[str, bool] = {}  # filter -> allowed (absent: ternmq decides)
        # enhanced authentication (on_auth_m5): the method the hook took up, the CONNECT
        # whose exchange runs (auth_on_register follows its success), the last verdict
        self.auth_method: str | None = None
        self.auth_connect: Connect | None = None
        self.answer: AuthAnswer | None = None

    def wants(self, pkt: Packet, proto_ver: int) -> bool:
        """Whether ``pkt`` waits for a webhook before the session handles it."""
        if pkt is self.decided:
            return False
        if isinstance(pkt, Connect):
            return self.webhooks.has(
                hook_name("auth_on_register", pkt.protocol_version)
            ) or connect.wants_auth(self.webhooks, pkt)
        if isinstance(pkt, Publish):
            return self.webhooks.has(hook_name("auth_on_publish", proto_ver))
        if isinstance(pkt, Subscribe):
            return self.webhooks.has(hook_name("auth_on_subscribe", proto_ver))
        if isinstance(pkt, Auth):  # another one is the session's protocol error
            method = self.auth_method
            return (
                method is not None
                and pkt.properties.authentication_method == method
                and pkt.reason_code in (CONTINUE_AUTHENTICATION, RE_AUTHENTICATE)
            )
        return False

    async def decide(self, pkt: Packet, session: Any, peer: str) -> Packet:
        """Ask the hook for ``pkt``; the packet the session is to handle (rewritten by
        the answer's modifiers), whose decision is kept here."""
        self.asking = True
        try:
            out = await self._decide(pkt, session, peer)
        finally:
            self.asking = False
        self.decided = out
        return out

    async def _decide(self, pkt: Packet, s: Any, peer: str) -> Packet:
        hooks = self.webhooks
        if isinstance(pkt, Connect):
            await self._connect(pkt, s, peer)
            return pkt
        if isinstance(pkt, Auth):
            await self._auth(pkt, s, peer)
            return pkt
        version = s.protocol_version
        if isinstance(pkt, Publish):
            hook = hook_name("auth_on_publish", version)
            b64 = hooks.base64_payload(hook)
            topic = self._topic(pkt, s)
            body = publish_body(
                version, s.mountpoint, s.client_id, s.username, topic, pkt.qos, pkt.payload,
                pkt.retain, b64,
            )  # fmt: skip
            if version == 5:
                body["properties"] = props.encode(pkt.properties, b64)
            d = await hooks.ask(hook, body)
            self.publish_qos = None
            if d.result == "ok":
                qos = qos_modifier(d.modifiers)
                asked = d.modifiers.get("properties", {}) if version == 5 else {}
                rewritten = props.apply(pkt.properties, asked, b64)
                if isinstance(qos, str):
                    hooks.invalid(hook, qos)
                    d = Decision("error", reason=qos)
                elif isinstance(rewritten, str):
                    hooks.invalid(hook, f"properties: {rewritten}")
                    d = Decision("error", reason=rewritten)
                else:
                    self.publish_qos = qos
                    self._rewrite_publish(pkt, d, b64)
                    pkt.properties, ignored = rewritten
                    for name in ignored:
                        hooks.ignored(hook, f"properties.{name}", "not a message's")
                    topic = self._topic(pkt, s)
            self.publish = None if d.result == "next" else (topic, d.result == "ok")
            return pkt
        assert isinstance(pkt, Subscribe)
        hook = hook_name("auth_on_subscribe", version)
        asked = [(sub.topic_filter, sub.qos) for sub in pkt.subscriptions]
        body = subscribe_body(version, s.mountpoint, s.client_id, s.username, asked)
        d = await hooks.ask(hook, body)
        self.subscribe = {}
        if d.result == "next":
            return pkt
        if d.result != "ok":
            self.subscribe = {f: False for f, _ in asked}
            return pkt
        rewrite = d.modifiers.get("topics")
        if rewrite is None:
            self.subscribe = {f: True for f, _ in asked}
            return pkt
        topics = subscribe_modifier(rewrite, len(asked))
        if isinstance(topics, str):
            self.subscribe = {f: False for f, _ in asked}  # an answer that cannot be applied
            hooks.invalid(hook, topics)
            return pkt
        new = []
        for (f, qos), sub in zip(topics, pkt.subscriptions, strict=True):
            refused = qos in REFUSED_QOS
            self.subscribe[f] = not refused and self.subscribe.get(f, True)
            new.append(replace(sub, topic_filter=f, qos=sub.qos if refused else qos))
        return replace(pkt, subscriptions=tuple(new))

    async def _connect(self, pkt: Connect, s: Any, peer: str) -> None:
        hooks = self.webhooks
        self.connect = None
        if connect.wants_auth(hooks, pkt):
            answer = self.answer = await connect.enhanced_auth(hooks, pkt, s)
            if answer is None or answer.code not in (0, CONTINUE_AUTHENTICATION):
                return  # next (the session refuses the method) or refused
            self.auth_method = pkt.properties.authentication_method
            if answer.code == CONTINUE_AUTHENTICATION:
                self.auth_connect = pkt  # registered once the exchange succeeds
                return
            self.connect = 0  # accepted, unless auth_on_register says otherwise
        await self._register(pkt, s, peer)

    async def _auth(self, pkt: Auth, s: Any, peer: str) -> None:
        """An AUTH of the CONNECT's exchange, or a re-authentication: ``on_auth_m5``."""
        held = self.auth_connect
        answer = self.answer = await connect.auth_round(self.webhooks, pkt, s, held)
        if held is None or (answer is not None and answer.code == CONTINUE_AUTHENTICATION):
            return
        self.auth_connect = None
        if answer is not None and answer.code == 0:
            self.connect = 0
            await self._register(held, s, peer)

    def auth_answer(self) -> AuthAnswer | None:
        """The session's enhanced authentication asks for the verdict (once)."""
        answer, self.answer = self.answer, None
        return answer

    async def _register(self, pkt: Connect, s: Any, peer: str) -> None:
        hooks = self.webhooks
        if not hooks.has(hook_name("auth_on_register", pkt.protocol_version)):
            return  # accepted by on_auth_m5 alone
        code, mods = await connect.register(hooks, pkt, s, peer)
        if code is not None or self.connect is None:
            self.connect = code
        if mods is not None:
            self.allow_publish, self.allow_subscribe = mods.allow_publish, mods.allow_subscribe

    def routed(self, msg: Message) -> None:
        """The publish the hook answered for is routed: its ``qos`` modifier applies."""
        qos = self.publish_qos
        if qos is not None:
            self.publish_qos = None
            msg.qos = qos

    @staticmethod
    def _topic(pkt: Publish, s: Any) -> str:
        """The publish's topic, through its v5 Topic Alias (the aliases of the packets
        before it, which the session has handled: every later one waits)."""
        alias = pkt.properties.topic_alias if s.protocol_version == 5 else None
        if pkt.topic or alias is None or s.inbound is None:
            return pkt.topic
        return str(s.inbound.aliases.get(alias, ""))

    @staticmethod
    def _rewrite_publish(pkt: Publish, d: Decision, b64: bool) -> None:
        mods = d.modifiers
        if isinstance(mods.get("topic"), str):
            pkt.topic = mods["topic"]
        if "payload" in mods:
            pkt.payload = payload_modifier(mods["payload"], b64)
        if isinstance(mods.get("retain"), bool):
            pkt.retain = mods["retain"]

    # -- the session's authorizer --------------------------------------------------------
    def authenticate(
        self, client_id: str, username: str | None, password: bytes | None, peer: str
    ) -> int:
        if self.connect is None:
            return self.inner.authenticate(client_id, username, password, peer)
        return self.connect

    def authorize_publish(
        self, client_id: str, username: str | None, mountpoint: str, topic: str
    ) -> bool:
        if not self.allow_publish:
            return False
        decided = self.publish
        if decided is not None and decided[0] == topic:
            self.publish = None
            return decided[1]
        return self.inner.authorize_publish(client_id, username, mountpoint, topic)

    def authorize_subscribe(
        self, client_id: str, username: str | None, mountpoint: str, topic_filter: str
    ) -> bool:
        if not self.allow_subscribe:
            return False
        allowed = self.subscribe.pop(topic_filter, None)
        if allowed is not None:
            return allowed
        return self.inner.authorize_subscribe(client_id, username, mountpoint, topic_filter)
