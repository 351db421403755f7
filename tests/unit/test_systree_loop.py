"""The $SYS loop: rounds every interval, a failing round reported and survived, stop ends it."""

from __future__ import annotations

import asyncio
from typing import Any

from services.common.metrics import SampleValue
from services.listener import systree
from services.listener.session.messages import Message


class RecordingBroker:
    """Stands in for ``Broker``: what the loop routes, and how."""

    def __init__(self) -> None:
        self.routed: list[tuple[Message, bool]] = []
        self._ids = 0

    def next_msg_id(self) -> str:
        self._ids += 1
        return f"m{self._ids}"

    def publish_own(self, msg: Message) -> None:
        """As ``Broker.publish_own``: routed as the broker's own (internal) message."""
        self.routed.append((msg, True))


def test_rounds_go_on_after_a_failing_one_and_stop_ends_the_loop() -> None:
    calls = 0

    async def flaky() -> list[SampleValue]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("first round breaks")
        return [SampleValue("ternmq_connections", {}, float(calls), "gauge", "")]

    async def main() -> tuple[RecordingBroker, list[dict[str, Any]]]:
        broker = RecordingBroker()
        reported: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        stop = asyncio.Event()
        task = asyncio.create_task(
            systree.run(broker.publish_own, broker.next_msg_id, "n1", 0.01, [flaky], stop)
        )
        for _ in range(500):  # bounded: 5 s
            if len(broker.routed) >= 2:
                break
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 5)
        return broker, reported

    broker, reported = asyncio.run(main())
    assert [c["message"] for c in reported] == ["a $SYS round failed"]
    assert isinstance(reported[0]["exception"], RuntimeError)
    msg, internal = broker.routed[0]
    assert internal and msg.topic == "$SYS/n1/connections" and msg.payload == b"2"
    assert (msg.qos, msg.retain, msg.publisher) == (0, False, "$SYS")


def test_an_interval_of_zero_publishes_nothing() -> None:
    async def main() -> RecordingBroker:
        broker = RecordingBroker()
        stop = asyncio.Event()
        await asyncio.wait_for(
            systree.run(broker.publish_own, broker.next_msg_id, "n1", 0, [], stop), 1
        )
        return broker

    assert asyncio.run(main()).routed == []
