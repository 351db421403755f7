"""Wills: the message a session leaves behind, published now or after its delay.

A v5 will delay keeps the will pending; the session reconnecting (here) before it fires
cancels it [MQTT-3.1.3-9], which is why the pending ones are kept by session key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from services.common.session_key import SessionKey
from services.listener.mqtt.types import Will
from services.listener.session.handle_publish import forwarded
from services.listener.session.messages import Message


class Wills:
    """Pending delayed wills of this listener's sessions."""

    __slots__ = ("_next_id", "_pending", "_publish")

    def __init__(self, publish: Callable[[Message], None], next_id: Callable[[], str]) -> None:
        self._publish = publish
        self._next_id = next_id
        self._pending: dict[SessionKey, asyncio.TimerHandle] = {}

    def publish(self, key: SessionKey, will: Will, delay: int) -> None:
        now = time.time()
        props = will.properties
        expiry = props.message_expiry_interval
        msg = Message(
            self._next_id(),
            will.topic,
            will.payload,
            will.qos,
            will.retain,
            key[1],
            key[0],
            now,
            now + expiry if expiry else None,
            forwarded(props),
        )
        if delay <= 0:
            self._publish(msg)
            return
        self.cancel(key)
        self._pending[key] = asyncio.get_running_loop().call_later(delay, self._fire, key, msg)

    def cancel(self, key: SessionKey) -> None:
        """The session came back: its delayed will is void."""
        handle = self._pending.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _fire(self, key: SessionKey, msg: Message) -> None:
        self._pending.pop(key, None)
        self._publish(msg)

    def cancel_all(self) -> None:
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()
