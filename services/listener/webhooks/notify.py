"""VerneMQ's notification webhooks: ``on_register``, ``on_client_wakeup``,
``on_publish``, ``on_subscribe``, ``on_unsubscribe``, ``on_client_offline``,
``on_client_gone`` and ``on_offline_message`` (and the ``_m5`` forms of the first four,
for MQTT 5 clients); and the factory of a subscriber's ``on_deliver`` (``deliver``),
the one of these whose answer counts.

They tell the user's service what happened; their answers change nothing (an
``on_unsubscribe`` rewrite is not applied). Each call is a task of its own: the client
never waits for it. At most :data:`MAX_PENDING` calls are under way per listener process;
past that a notification is dropped and counted rather than queued without bound.
"""

from __future__ import annotations

import time
from typing import Any

from services.common import log
from services.common.background import Background
from services.listener.mqtt.types import NO_PROPERTIES, Properties
from services.listener.webhooks import props
from services.listener.webhooks.client import Webhooks
from services.listener.webhooks.deliver import DeliverHook, Subscriber
from services.listener.webhooks.spec import (
    hook_name,
    offline_message_body,
    publish_body,
    registered_body,
    subscribe_body,
)

MAX_PENDING = 10_000


class Notifier:
    """Sends one listener process's notifications; shared by its connections."""

    def __init__(self, webhooks: Webhooks) -> None:
        self.webhooks = webhooks
        self.pending = Background()  # a bug in a call is logged, not lost
        self.dropped = 0

    def send(self, base: str, proto_ver: int, body: dict[str, Any]) -> None:
        hook = hook_name(base, proto_ver) if base in _VERSIONED else base
        if not self.webhooks.has(hook):
            return
        if len(self.pending) >= MAX_PENDING:
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.emit("webhook.failed", "warning", hook=hook, endpoint="", reason="overloaded")
            return
        self.pending.spawn(self.webhooks.notify(hook, body), f"webhook-{hook}")

    # -- what the connection tells ---------------------------------------------------------
    def registered(
        self,
        proto_ver: int,
        peer: str,
        mountpoint: str,
        client_id: str,
        username: str | None,
        session_present: bool,
    ) -> None:
        body = registered_body(proto_ver, peer, mountpoint, client_id, username)
        self.send("on_register", proto_ver, body)
        if session_present:
            self.send("on_client_wakeup", 4, {"mountpoint": mountpoint, "client_id": client_id})

    def published(
        self,
        proto_ver: int,
        mountpoint: str,
        client_id: str,
        username: str | None,
        topic: str,
        qos: int,
        payload: bytes,
        retain: bool,
        properties: Properties = NO_PROPERTIES,
        expires_at: float | None = None,
    ) -> None:
        hook = hook_name("on_publish", proto_ver)
        if self.webhooks.has(hook):
            b64 = self.webhooks.base64_payload(hook)
            body = publish_body(
                proto_ver, mountpoint, client_id, username, topic, qos, payload, retain, b64
            )
            if proto_ver == 5:
                shown = props.with_expiry(properties, expires_at, time.time())
                body["properties"] = props.encode(shown, b64)
            self.send("on_publish", proto_ver, body)

    def subscribed(
        self,
        proto_ver: int,
        mountpoint: str,
        client_id: str,
        username: str | None,
        topics: list[tuple[str, int]],
    ) -> None:
        body = subscribe_body(proto_ver, mountpoint, client_id, username, topics)
        self.send("on_subscribe", proto_ver, body)

    def unsubscribed(
        self,
        proto_ver: int,
        mountpoint: str,
        client_id: str,
        username: str | None,
        topics: list[str],
    ) -> None:
        body: dict[str, Any] = {
            "username": username,
            "client_id": client_id,
            "mountpoint": mountpoint,
            "topics": topics,
        }
        if proto_ver == 5:
            body["properties"] = {}
        self.send("on_unsubscribe", proto_ver, body)

    def ended(self, mountpoint: str, client_id: str, persistent: bool) -> None:
        hook = "on_client_offline" if persistent else "on_client_gone"
        self.send(hook, 4, {"mountpoint": mountpoint, "client_id": client_id})

    def offline_message(
        self, mountpoint: str, client_id: str, qos: int, topic: str, payload: bytes, retain: bool
    ) -> None:
        """A message was queued for an offline persistent session."""
        hook = "on_offline_message"
        if self.webhooks.has(hook):
            b64 = self.webhooks.base64_payload(hook)
            body = offline_message_body(mountpoint, client_id, qos, topic, payload, retain, b64)
            self.send(hook, 4, body)

    def deliver_hook(
        self, executor: Subscriber, proto_ver: int, username: str | None
    ) -> DeliverHook | None:
        """The subscriber's ``on_deliver`` (``_m5`` for MQTT 5), None when none is
        registered: then its deliveries pay nothing for it."""
        hook = hook_name("on_deliver", proto_ver)
        if not self.webhooks.has(hook):
            return None
        return DeliverHook(self.webhooks, self.pending, hook, executor, username)


_VERSIONED = {"on_register", "on_publish", "on_subscribe", "on_unsubscribe"}
