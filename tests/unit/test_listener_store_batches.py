"""The store client's batches stay under gRPC's message limit, in order.

Found by the fuzzer: a 1 MB publish to 80 offline persistent sessions made one 80 MB
batch, gRPC refused it (INTERNAL), and the stream broke for every write on it. A batch
is now sealed at ``MAX_BATCH_BYTES``; an append too large to travel alone is refused.
The msgstore here is a fake that answers each batch with seqs 1..n.
"""

from __future__ import annotations

import asyncio
from typing import Any

from services.listener import convert, store_client
from services.listener.session.messages import Message
from services.listener.store_client import MAX_BATCH_BYTES, StoreClient
from services.pb import msgstore_pb2


class FakeCall:
    """The Stream call: reads each request, records its size, answers every append OK."""

    def __init__(self, requests: Any, sizes: list[int]) -> None:
        self.requests = requests
        self.sizes = sizes

    def __aiter__(self) -> FakeCall:
        return self

    async def __anext__(self) -> msgstore_pb2.StoreBatchResult:
        raw = await self.requests.__anext__()
        self.sizes.append(len(raw))
        batch = msgstore_pb2.StoreBatch.FromString(raw)
        n = len(batch.appends)
        return msgstore_pb2.StoreBatchResult(
            batch_id=batch.batch_id, statuses=[0] * n, seqs=list(range(1, n + 1))
        )

    def cancel(self) -> None:
        pass


class FakeChannel:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def unary_unary(self, *args: Any, **kwargs: Any) -> Any:
        return None

    def stream_stream(self, *args: Any, **kwargs: Any) -> Any:
        return lambda requests: FakeCall(requests, self.sizes)


def _field(size: int) -> bytes:
    msg = Message("m", "t/1", bytes(size), 1, False, "pub", "", 0.0)
    return convert.message_field(msg, "node")


async def _append_all(
    sizes: list[int], max_append: int = store_client.MAX_APPEND_BYTES
) -> tuple[list[tuple[int, int]], list[int]]:
    channel = FakeChannel()
    client = StoreClient(channel, max_append=max_append)  # type: ignore[arg-type]
    client.start()
    got: list[tuple[int, int]] = []
    for i, size in enumerate(sizes):

        def done(status: int, seq: int, error: str, i: int = i) -> None:
            got.append((i, status))

        client.append("", f"c{i % 7}", 1, _field(size), 1, False, (), done)
    await asyncio.wait_for(client.flush(), 10)
    await asyncio.sleep(0)
    await client.stop()
    return got, channel.sizes


def test_batches_stay_under_the_limit_and_results_keep_their_order() -> None:
    sizes = [1_000_000] * 80 + [100] * 50
    got, batch_sizes = asyncio.run(_append_all(sizes))
    assert [i for i, _ in got] == list(range(len(sizes)))
    assert all(status == 0 for _, status in got)
    assert len(batch_sizes) >= 10
    assert max(batch_sizes) <= MAX_BATCH_BYTES + 64  # the batch id and framing


def test_an_append_too_large_for_the_stream_fails_alone() -> None:
    got, _ = asyncio.run(_append_all([100, 6_000_000, 100], max_append=5_000_000))
    statuses = dict(got)
    assert statuses[0] == statuses[2] == 0
    assert statuses[1] == msgstore_pb2.APPEND_STORE_ERROR
