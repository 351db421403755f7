"""The listener's side of the msgstore ``Stream``: many small writes, few batches.

Every append, ack and mark the listener makes goes into the *open* batch. A sender task
ships the open batch as soon as fewer than ``max_inflight`` batches are unanswered, so
under load batches grow by themselves while the store commits the previous ones (the
store's group commit does the same one level down) and at low load a write leaves at
once. Results come back in batch order; each append's future is resolved with its
``AppendResult`` in that order, which is what keeps deliveries to a persistent session
in sequence order.

When the stream breaks (msgstore restarted or killed) every unanswered future fails
with :class:`StoreUnavailable`: publishers get a negative acknowledgement rather than a
PUBACK for something that may not be on disk. The stream is reopened with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc

from services.common import log
from services.pb import common_pb2, msgstore_pb2, msgstore_pb2_grpc

_MAX_OPS = 2048


class StoreUnavailable(Exception):
    """The msgstore could not confirm a write."""


class StreamBroken(Exception):
    """The Stream RPC ended or misbehaved; it is reopened."""


@dataclass(slots=True)
class _Batch:
    pb: msgstore_pb2.StoreBatch = field(default_factory=msgstore_pb2.StoreBatch)
    futures: list[asyncio.Future[msgstore_pb2.AppendResult]] = field(default_factory=list)
    done: asyncio.Future[None] | None = None
    ops: int = 0


class StoreClient:
    def __init__(self, channel: grpc.aio.Channel, max_inflight: int = 8) -> None:
        self.stub = msgstore_pb2_grpc.MsgStoreStub(channel)
        self.max_inflight = max_inflight
        self._open = _Batch()
        self._inflight: list[_Batch] = []
        self._wakeup = asyncio.Event()
        self._slot = asyncio.Event()
        self._next_id = 1
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.connected = asyncio.Event()

    # -- writes --------------------------------------------------------------------
    def append(
        self,
        mountpoint: str,
        client_id: str,
        epoch: int,
        msg: common_pb2.MqttMessage,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
    ) -> asyncio.Future[msgstore_pb2.AppendResult]:
        """Queue one delivery; ``msg`` is shared by every copy of one publish (built once)."""
        fut: asyncio.Future[msgstore_pb2.AppendResult] = asyncio.get_running_loop().create_future()
        entry = self._open.pb.appends.add(epoch=epoch)
        entry.key.mountpoint = mountpoint
        entry.key.client_id = client_id
        delivery = entry.delivery
        delivery.msg.CopyFrom(msg)
        delivery.qos = qos
        delivery.retain = retain
        if sub_ids:
            delivery.sub_ids.extend(sub_ids)
        self._open.futures.append(fut)
        self._added()
        return fut

    def ack(self, mountpoint: str, client_id: str, epoch: int, seq: int) -> None:
        entry = self._ack_entry(mountpoint, client_id, epoch)
        entry.seqs.append(seq)
        entry.delivered_upto = max(entry.delivered_upto, seq)
        self._added()

    def delivered(self, mountpoint: str, client_id: str, epoch: int, upto: int) -> None:
        """Everything up to ``upto`` was written to the client: a resume after this sets
        DUP on those entries [MQTT-3.3.1-1] and not on the ones it never saw."""
        acks = self._open.pb.acks
        before = len(acks)
        entry = self._ack_entry(mountpoint, client_id, epoch)
        entry.delivered_upto = max(entry.delivered_upto, upto)
        if len(acks) > before:
            self._added()

    def _ack_entry(self, mountpoint: str, client_id: str, epoch: int) -> msgstore_pb2.Ack:
        """The open batch's Ack for this session: the last one if it is this session's
        (consecutive acks of one client share an entry), else a new one."""
        acks = self._open.pb.acks
        last = acks[-1] if acks else None
        if (
            last is not None
            and last.key.client_id == client_id
            and last.key.mountpoint == mountpoint
            and last.epoch == epoch
        ):
            return last
        entry = acks.add(epoch=epoch)
        entry.key.mountpoint = mountpoint
        entry.key.client_id = client_id
        return entry

    def mark(
        self, mountpoint: str, client_id: str, epoch: int, kind: int, ident: int, set_: bool
    ) -> None:
        entry = self._open.pb.marks.add(epoch=epoch, kind=kind, id=ident, set=set_)  # type: ignore[arg-type]
        entry.key.mountpoint = mountpoint
        entry.key.client_id = client_id
        self._added()

    def flush(self) -> asyncio.Future[None]:
        """A future resolved when everything written so far is answered (or failed)."""
        batch = self._open
        if batch.done is None:
            batch.done = asyncio.get_running_loop().create_future()
        if batch.ops == 0 and not self._inflight:
            fut = batch.done
            batch.done = None
            fut.set_result(None)
            return fut
        if batch.ops == 0:
            batch.ops = 1  # ship an empty batch as a barrier behind the inflight ones
        self._wakeup.set()
        return batch.done

    def _added(self) -> None:
        self._open.ops += 1
        self._wakeup.set()

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="store-stream")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail_all("listener stopping")

    async def _run(self) -> None:
        backoff = 0.05
        while not self._stopping:
            try:
                await self._session()
                backoff = 0.05
            except grpc.aio.AioRpcError as exc:
                self._broken(exc.code().name, str(exc.details()))
            except StreamBroken as exc:
                self._broken("STREAM_BROKEN", str(exc))
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def _broken(self, code: str, reason: str) -> None:
        self.connected.clear()
        self._fail_all(f"{code}: {reason}")
        log.emit(
            "rpc.failed", "warning", target="msgstore", method="Stream", code=code, reason=reason
        )

    async def _session(self) -> None:
        outbox: asyncio.Queue[msgstore_pb2.StoreBatch | None] = asyncio.Queue()

        async def requests() -> AsyncIterator[msgstore_pb2.StoreBatch]:
            while True:
                item = await outbox.get()
                if item is None:
                    return
                yield item

        call = self.stub.Stream(requests())
        sender = asyncio.create_task(self._sender(outbox), name="store-sender")
        self.connected.set()
        try:
            async for result in call:
                self._answer(result)
            raise StreamBroken("stream ended by the msgstore")
        finally:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
            call.cancel()

    async def _sender(self, outbox: asyncio.Queue[msgstore_pb2.StoreBatch | None]) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._open.ops and len(self._inflight) < self.max_inflight:
                batch = self._open
                self._open = _Batch()
                batch.pb.batch_id = self._next_id
                self._next_id += 1
                self._inflight.append(batch)
                outbox.put_nowait(batch.pb)
            if self._open.ops and len(self._inflight) >= self.max_inflight:
                self._slot.clear()
                await self._slot.wait()
                self._wakeup.set()

    def _answer(self, result: msgstore_pb2.StoreBatchResult) -> None:
        if not self._inflight or self._inflight[0].pb.batch_id != result.batch_id:
            raise StreamBroken("batch results out of order")
        batch = self._inflight.pop(0)
        self._slot.set()
        if result.error and not result.results:
            for fut in batch.futures:
                if not fut.done():
                    fut.set_exception(StoreUnavailable(result.error))
        else:
            for fut, res in zip(batch.futures, result.results, strict=True):
                if not fut.done():
                    fut.set_result(res)
        if batch.done is not None and not batch.done.done():
            batch.done.set_result(None)

    def _fail_all(self, reason: str) -> None:
        batches = [*self._inflight]
        self._inflight.clear()
        self._slot.set()
        for batch in batches:
            for fut in batch.futures:
                if not fut.done():
                    fut.set_exception(StoreUnavailable(reason))
            if batch.done is not None and not batch.done.done():
                batch.done.set_result(None)

    # -- unary calls ---------------------------------------------------------------
    async def read(
        self, mountpoint: str, client_id: str, epoch: int, after_seq: int, max_entries: int = 1000
    ) -> msgstore_pb2.ReadReply:
        reply: msgstore_pb2.ReadReply = await self.stub.Read(
            msgstore_pb2.ReadRequest(
                key=common_pb2.SessionKey(mountpoint=mountpoint, client_id=client_id),
                epoch=epoch,
                after_seq=after_seq,
                max_entries=max_entries,
            ),
            timeout=30,
        )
        return reply
