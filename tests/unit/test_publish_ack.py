"""What a publisher's PUBACK says when the store had no queue for a session.

The fault run found this: a persistent session handed over to another node left this
node's routes pointing at it for a moment; the append found no queue here and counted as
done, so the publisher was acknowledged for a message no queue held.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from services.common.session_key import SessionKey
from services.listener.mqtt.types import ReasonCode
from services.listener.publish_ack import Countdown, Queued
from services.listener.session.messages import Message, OutboundMessage
from services.pb import msgstore_pb2

KEY: SessionKey = ("", "sub")


class Outcomes:
    def __init__(self, persistent: bool) -> None:
        self._persistent = persistent
        self.drops: list[str] = []
        self.failures: list[str] = []

    @property
    def sessions(self) -> Mapping[SessionKey, Any]:
        return {}

    def dropped(self, client_id: str, out: OutboundMessage, reason: str) -> None:
        self.drops.append(reason)

    def refused(self, msg: Message, reason: str) -> None:
        self.failures.append(f"{msg.msg_id}: {reason}")

    def persistent(self, key: SessionKey) -> bool:
        return self._persistent


class Publisher:
    def __init__(self) -> None:
        self.answers: list[tuple[int, int]] = []

    def routed(self, token: int, reason_code: int, reason: str = "") -> None:
        self.answers.append((token, reason_code))


@pytest.mark.parametrize(
    ("persistent", "code"),
    [(True, ReasonCode.UNSPECIFIED_ERROR), (False, ReasonCode.SUCCESS)],
)
def test_no_queue_fails_the_publish_only_for_a_persistent_session(
    persistent: bool, code: int
) -> None:
    broker = Outcomes(persistent)
    publisher = Publisher()
    msg = Message("m1", "t", b"x", 1, False, "pub", "", 0.0)
    countdown = Countdown(publisher, 7, broker, msg)  # type: ignore[arg-type]
    queued = Queued(broker, KEY, None, msg, 1, False, (), countdown)
    countdown.left += 1
    countdown.arm(ReasonCode.SUCCESS)
    queued.done(msgstore_pb2.APPEND_NO_QUEUE, 0, "")
    assert publisher.answers == [(7, code)]
    assert broker.drops == (["session_moved"] if persistent else [])
    assert broker.failures == (["m1: APPEND_NO_QUEUE"] if persistent else [])
