"""``$SYS`` topics: the node's metrics published as MQTT messages (VerneMQ's systree).

Every ``systree_interval`` the listener gathers the metrics of all four services (its
own registry, and the others' through their Admin RPC, as ``/metrics`` does) and
publishes each sample as a QoS 0, non-retained message from the broker itself, so
``mosquitto_sub -t '$SYS/<nodename>/#'`` shows what ``/metrics`` shows; topic names are
in ``systree_topics``. ``#`` and ``+/...`` subscribers never see them [MQTT-4.7.2-1];
``systree_enabled = off`` (or an interval of 0) stops them. A service that does not
answer is left out of that round and the round still goes out: monitoring must not stop
because one service is restarting. They are not counted as published messages (those
are the clients'), only as delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace

import grpc

from services.common.grpcutil import rpc_failed, samples_from_pb
from services.common.metrics import SampleValue
from services.listener.session.messages import Message
from services.listener.systree_topics import systree_messages
from services.pb import common_pb2, common_pb2_grpc

PUBLISHER = "$SYS"  # the client id systree messages are published under
_RPC_TIMEOUT = 2.0

Source = Callable[[], Awaitable[list[SampleValue]]]
Publish = Callable[[Message], None]
"""Routes one of the broker's own messages (not counted as published by a client)."""


def admin_source(service: str, channel: grpc.aio.Channel) -> Source:
    """The samples of a sibling service, through its Admin RPC (none when it is down)."""
    stub = common_pb2_grpc.AdminStub(channel)

    async def samples() -> list[SampleValue]:
        try:
            reply = await stub.Metrics(common_pb2.MetricsRequest(), timeout=_RPC_TIMEOUT)
        except grpc.aio.AioRpcError as exc:
            rpc_failed(service, "Metrics", exc, level="info")
            return []
        return samples_from_pb(reply)

    return samples


def summed(sources: Sequence[Source]) -> Source:
    """The node's listener processes as one: equal series (name and labels) added up,
    as the counts of a node with one process would be."""
    if len(sources) == 1:
        return sources[0]

    async def samples() -> list[SampleValue]:
        first: dict[tuple[str, tuple[tuple[str, str], ...]], SampleValue] = {}
        total: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for batch in await asyncio.gather(*(source() for source in sources)):
            for s in batch:
                series = (s.name, tuple(sorted(s.labels.items())))
                first.setdefault(series, s)
                total[series] = total.get(series, 0.0) + s.value
        return [replace(s, value=total[series]) for series, s in first.items()]

    return samples


async def publish_round(
    publish: Publish, next_id: Callable[[], str], node: str, sources: Iterable[Source]
) -> int:
    """Gather every source's samples and route them; returns how many were published."""
    gathered = await asyncio.gather(*(source() for source in sources))
    messages = systree_messages(node, (s for samples in gathered for s in samples))
    now = time.time()
    for topic, payload in messages:
        publish(Message(next_id(), topic, payload, 0, False, PUBLISHER, "", now))
    return len(messages)


async def run(
    publish: Publish,
    next_id: Callable[[], str],
    node: str,
    interval: float,
    sources: list[Source],
    stop: asyncio.Event,
) -> None:
    """Publish a round every ``interval`` seconds until ``stop`` is set."""
    if interval <= 0:
        return
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
            return
        try:
            await publish_round(publish, next_id, node, sources)
        except Exception as exc:  # a bug: reported as asyncio reports one, the next round goes on
            asyncio.get_running_loop().call_exception_handler(
                {"message": "a $SYS round failed", "exception": exc}
            )
