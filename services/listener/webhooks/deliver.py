"""``on_deliver`` / ``on_deliver_m5``: each message for a subscriber is shown to the hook
before it is delivered, with its MQTT 5 properties, and the answer may rewrite its topic
and payload (VerneMQ's ``topic`` and ``payload`` modifiers) and, for ``on_deliver_m5``,
its properties (the ``properties`` modifier, :mod:`.props`).

Theory of operation: the executor hands a delivery to :meth:`DeliverHook.push` instead
of to its session (one attribute check when no hook is registered: the executor's
``deliver_hook`` is None). Each delivery is asked for at once (calls are concurrent),
and released to the session in the order it arrived, as soon as it and every earlier
one are answered: a slow answer holds the later messages back, never reorders them.
While they wait they count in the subscriber's backlog (``appending``), so flow control
holds a fast publisher back as it would for a slow client.

An answer that fails (timeout, error, ``next``) delivers the message unchanged, as
VerneMQ does; a modifier that cannot be applied does too, and is logged.

Worked example: messages A, B, C; B's answer comes first (topic rewritten to ``x``),
then A's, then C's: A is delivered when its answer comes, B (as ``x``) right after it,
then C.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace
from typing import Protocol

from services.common.background import Background
from services.common.session_key import SessionKey
from services.listener.session.messages import Message, OutboundMessage
from services.listener.webhooks import props
from services.listener.webhooks.client import Webhooks
from services.listener.webhooks.spec import deliver_body, deliver_modifiers


class Subscriber(Protocol):
    """The executor, as the hook sees it."""

    sid: SessionKey | None
    appending: int  # deliveries on their way, counted in its backlog

    def deliver_hooked(self, out: OutboundMessage) -> None: ...


class _Waiting:
    __slots__ = ("answered", "out")

    def __init__(self, out: OutboundMessage) -> None:
        self.out = out
        self.answered = False


class DeliverHook:
    """One subscriber's ``on_deliver``: deliveries in order, each after its answer."""

    def __init__(
        self,
        webhooks: Webhooks,
        pending: Background,
        hook: str,
        executor: Subscriber,
        username: str | None,
    ) -> None:
        self.webhooks = webhooks
        self.pending = pending  # the process's notification tasks (bugs logged, not lost)
        self.hook = hook
        self.executor = executor
        self.username = username
        self.queue: deque[_Waiting] = deque()

    def push(self, out: OutboundMessage) -> None:
        ex = self.executor
        if not self.queue and not self.webhooks.has(self.hook):
            ex.deliver_hooked(out)  # deregistered since this client connected
            return
        entry = _Waiting(out)
        self.queue.append(entry)
        ex.appending += 1  # in its backlog while the hook is asked
        sid = ex.sid or ("", "")
        msg = out.message
        b64 = self.webhooks.base64_payload(self.hook)
        body = deliver_body(
            sid[0], sid[1], self.username, msg.topic, out.qos, msg.payload, out.retain, b64
        )
        body["properties"] = props.encode(_shown(msg), b64)
        self.pending.spawn(self._ask(entry, body, b64), f"webhook-{self.hook}")

    async def _ask(self, entry: _Waiting, body: dict[str, object], b64: bool) -> None:
        try:
            decision = await self.webhooks.ask(self.hook, body)
            if decision.result == "ok" and decision.modifiers:
                entry.out = self._modified(entry.out, decision.modifiers, b64)
        finally:
            entry.answered = True
            self._release()

    def _modified(
        self, out: OutboundMessage, mods: dict[str, object], b64: bool
    ) -> OutboundMessage:
        change = deliver_modifiers(dict(mods), b64)
        if isinstance(change, str):
            self.webhooks.invalid(self.hook, change)
            return out
        topic, payload = change
        msg = out.message
        properties, expires_at = msg.properties, msg.expires_at
        if "properties" in mods:
            if self.hook != "on_deliver_m5":  # a 3.1.1 subscriber's delivery has none
                self.webhooks.ignored(self.hook, "properties", "only on_deliver_m5 has them")
            else:
                applied = props.apply(_shown(msg), mods["properties"], b64)
                if isinstance(applied, str):
                    self.webhooks.invalid(self.hook, f"properties: {applied}")
                    return out
                new_props, ignored = applied
                for name in ignored:
                    self.webhooks.ignored(self.hook, f"properties.{name}", "not a message's")
                expiry = new_props.message_expiry_interval
                expires_at = None if expiry is None else time.time() + expiry
                properties = replace(new_props, message_expiry_interval=None)
        if (
            topic is None
            and payload is None
            and properties is msg.properties
            and expires_at == msg.expires_at
        ):
            return out
        new = replace(
            msg,
            topic=msg.topic if topic is None else topic,
            payload=msg.payload if payload is None else payload,
            properties=properties,
            expires_at=expires_at,
        )  # a copy: the message is shared by every subscriber it goes to
        return replace(out, message=new)

    def _release(self) -> None:
        queue = self.queue
        ex = self.executor
        while queue and queue[0].answered:
            ex.appending -= 1
            ex.deliver_hooked(queue.popleft().out)


def _shown(msg: Message) -> props.Properties:
    return props.with_expiry(msg.properties, msg.expires_at, time.time())
