"""The listener's side of the msgstore ``Stream``: many small writes, few batches.

Every append, ack and mark the listener makes goes into the *open* batch. The request
side of the stream (``_requests``) ships the open batch as soon as fewer than
``max_inflight`` batches are unanswered, so under load batches grow by themselves while
the store commits the previous one and at low load a write leaves at once. One batch in
flight is the default: a stream message costs each side the same CPU however much it
carries (``bench/rpc_cost.py`` measures it), and a second batch in flight mostly splits
the next group commit in two: smaller commits, more CPU per message on both sides.

Results come back in batch order; each append's callback is called with its result in
that order, which is what keeps deliveries to a persistent session in sequence order.
Callbacks (``AppendCallback``) are called directly, not through futures: a future and
its done-callback per message cost more than the rest of the bookkeeping.

Batches are written in protobuf's wire format from pre-encoded pieces
(``convert.append_entry`` and friends) and sent as bytes: the session key is encoded
once per session and the message once per publish, not once per field per copy.

A batch stops taking appends at :data:`MAX_BATCH_BYTES` and waits, sealed, for its turn
behind the in-flight one: gRPC refuses a message above its limit, and a refused message
ends the stream for every write on it (a 1 MB publish to 80 offline persistent sessions
made one 80 MB batch). An append too large to travel even alone is refused at once.

When the stream breaks (msgstore restarted or killed) every unanswered callback gets
:data:`UNAVAILABLE`: publishers get a negative acknowledgement rather than a PUBACK for
something that may not be on disk. The stream is reopened with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Final

import grpc
from google.protobuf.message import DecodeError

from services.common.framed import FrameError, frame, frames, open_lane
from services.common.grpcutil import rpc_failed_as
from services.common.lane_client import LaneClient, call_or_grpc
from services.listener import convert
from services.pb import common_pb2, msgstore_pb2, msgstore_pb2_grpc

UNAVAILABLE: Final = -1
"""The status an append's callback gets when the store could not confirm the write."""

AppendCallback = Callable[[int, int, str], None]
"""Called once per append with ``(status, seq, error)``: status is a
``msgstore_pb2.AppendStatus`` or :data:`UNAVAILABLE` (then ``error`` says why)."""

_STREAM: Final = "/ternmq.msgstore.MsgStore/Stream"
_KEY_CACHE: Final = 65536  # encoded session keys kept (cleared when full: bounded, rarely missed)
MAX_BATCH_BYTES: Final = 8 * 1024 * 1024
"""Appended bytes after which a batch is sealed and the next one opened."""
MAX_APPEND_BYTES: Final = 60 * 1024 * 1024
"""The largest append sent: a batch of it alone stays under gRPC's 64 MB limit
(``grpcutil``), with room for the acks and marks that travel with it."""


_STORE_ERROR: Final = int(msgstore_pb2.APPEND_STORE_ERROR)
READ_TIMEOUT: Final = 30.0


class StreamBroken(Exception):
    """The Stream RPC ended or misbehaved; it is reopened."""


class _Ack:
    """The acks of one (session, epoch) in the open batch: one ``Ack`` entry per batch."""

    __slots__ = ("key", "seqs", "upto")

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.seqs: list[int] = []
        self.upto = 0


class _Batch:
    """One StoreBatch being filled, then in flight."""

    __slots__ = (
        "acks", "appends", "barriers", "batch_id", "callbacks", "done", "marks", "ops", "size",
    )  # fmt: skip

    def __init__(self) -> None:
        self.appends: list[bytes] = []
        self.size = 0  # bytes of appends
        self.callbacks: list[AppendCallback] = []
        self.acks: dict[tuple[str, str, int], _Ack] = {}
        self.marks: list[bytes] = []
        self.done: asyncio.Future[None] | None = None  # answered or failed: ``flush``
        # Per session: whether its own marks in this batch are durable where they must be.
        self.barriers: dict[tuple[str, str], asyncio.Future[str]] = {}
        self.ops = 0
        self.batch_id = 0

    def settle_barriers(self, why: str, failed: set[tuple[str, str]] | None) -> None:
        """Answer each session's barrier: ``why`` for the sessions in ``failed`` (None:
        every one), "" for the others."""
        for sid, fut in self.barriers.items():
            if not fut.done():
                fut.set_result(why if why and (failed is None or sid in failed) else "")

    def encode(self) -> bytes:
        acks = [
            convert.ack_entry(ack.key, epoch, ack.seqs, ack.upto)
            for (_mp, _cid, epoch), ack in self.acks.items()
        ]
        return convert.store_batch(self.batch_id, self.appends, acks, self.marks)


class _Requests:
    """The stream's requests as an async iterator (a class, not an async generator, which
    the compiled build cannot make)."""

    __slots__ = ("client",)

    def __init__(self, client: StoreClient) -> None:
        self.client = client

    def __aiter__(self) -> _Requests:
        return self

    async def __anext__(self) -> bytes:
        return await self.client._next_request()


class StoreClient:
    def __init__(
        self,
        channel: grpc.aio.Channel,
        max_inflight: int = 1,
        max_append: int = MAX_APPEND_BYTES,
    ) -> None:
        self.max_append = max_append
        self.stub = msgstore_pb2_grpc.MsgStoreStub(channel)
        self._stream = channel.stream_stream(
            _STREAM,
            request_serializer=None,  # batches are encoded by hand (bytes)
            response_deserializer=msgstore_pb2.StoreBatchResult.FromString,
        )
        # The msgstore's unix socket for the stream (framed.socket_path), else gRPC.
        self.lane: str | None = None
        # Its call lane, for Read (``services.common.lane``), else gRPC.
        self.calls: LaneClient | None = None
        self.max_inflight = max_inflight
        self._open = _Batch()
        self._sealed: deque[_Batch] = deque()  # full, waiting for a slot, in order
        self._inflight: deque[_Batch] = deque()
        self._wakeup = asyncio.Event()
        self._slot = asyncio.Event()
        self._next_id = 1
        self._keys: dict[tuple[str, str], bytes] = {}
        self._sender_error: Exception | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.connected = asyncio.Event()

    # -- writes --------------------------------------------------------------------
    def key(self, mountpoint: str, client_id: str) -> bytes:
        """The session's encoded ``SessionKey`` field (cached)."""
        sid = (mountpoint, client_id)
        key = self._keys.get(sid)
        if key is None:
            if len(self._keys) >= _KEY_CACHE:
                self._keys.clear()
            key = self._keys[sid] = convert.key_field(mountpoint, client_id)
        return key

    def append(
        self,
        mountpoint: str,
        client_id: str,
        epoch: int,
        msg: bytes,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        callback: AppendCallback,
        offline: bool = False,
    ) -> None:
        """Queue one delivery; ``msg`` is ``convert.message_field`` of the message, shared
        by every copy of one publish (encoded once). ``callback`` gets the result.
        ``offline``: this listener holds no connection of the session, so the queue's
        offline limit applies (``max_offline_messages``)."""
        entry = convert.append_entry(
            self.key(mountpoint, client_id), epoch, msg, qos, retain, sub_ids, offline
        )
        size = len(entry)
        if size > self.max_append:
            too_large = f"message too large for the store stream (over {self.max_append} bytes)"
            asyncio.get_running_loop().call_soon(callback, _STORE_ERROR, 0, too_large)
            return
        batch = self._open
        if batch.size + size > MAX_BATCH_BYTES and batch.appends:
            batch = self._seal()
        batch.appends.append(entry)
        batch.size += size
        batch.callbacks.append(callback)
        batch.ops += 1
        self._wakeup.set()

    def _seal(self) -> _Batch:
        """Queue the open batch behind the in-flight ones; return the new open batch. Its
        ``done`` stays with it: a flush covers what was written before it, not after."""
        self._sealed.append(self._open)
        self._open = _Batch()
        return self._open

    def ack(self, mountpoint: str, client_id: str, epoch: int, seq: int) -> None:
        ack = self._ack(mountpoint, client_id, epoch)
        ack.seqs.append(seq)
        if seq > ack.upto:
            ack.upto = seq
        self._open.ops += 1
        self._wakeup.set()

    def delivered(self, mountpoint: str, client_id: str, epoch: int, upto: int) -> None:
        """Everything up to ``upto`` was written to the client: a resume after this sets
        DUP on those entries [MQTT-3.3.1-1] and not on the ones it never saw."""
        acks = self._open.acks
        before = len(acks)
        ack = self._ack(mountpoint, client_id, epoch)
        if upto > ack.upto:
            ack.upto = upto
        if len(acks) > before:
            self._open.ops += 1
            self._wakeup.set()

    def _ack(self, mountpoint: str, client_id: str, epoch: int) -> _Ack:
        """The open batch's acks of this session and epoch."""
        acks = self._open.acks
        ident = (mountpoint, client_id, epoch)
        ack = acks.get(ident)
        if ack is None:
            ack = acks[ident] = _Ack(self.key(mountpoint, client_id))
        return ack

    def mark(
        self, mountpoint: str, client_id: str, epoch: int, kind: int, ident: int, set_: bool
    ) -> None:
        key = self.key(mountpoint, client_id)
        self._open.marks.append(convert.mark_entry(key, epoch, kind, ident, set_))
        self._open.ops += 1
        self._wakeup.set()

    def mark_barrier(self, mountpoint: str, client_id: str) -> asyncio.Future[str]:
        """A future resolved once the batch carrying this session's latest mark (made
        just before, with :meth:`mark`) is answered: "" when the session's marks are
        durable where they must be, else why not. Another session's refused mark in the
        same batch (its connection taken over on another node: an older epoch) is not
        this one's: only the sessions the store names fail (``marks_failed``)."""
        batch = self._open
        sid = (mountpoint, client_id)
        fut = batch.barriers.get(sid)
        if fut is None:
            fut = batch.barriers[sid] = asyncio.get_running_loop().create_future()
        if batch.ops == 0:
            batch.ops = 1  # nothing marked since the last batch left: ship a barrier
        self._wakeup.set()
        return fut

    def settled(self) -> bool:
        """Nothing written is unanswered: what :meth:`flush` would return is done already
        (checked without making a future, on every connection's end)."""
        return not self._open.ops and not self._inflight and not self._sealed

    def flush(self) -> asyncio.Future[None]:
        """A future resolved when everything written so far is answered or has failed.
        What became of each write its callback hears, and of a connection's QoS 2 marks
        its :meth:`mark_barrier`: the batch's own outcome would be a third answer that
        nobody may act on."""
        batch = self._open
        if batch.done is None:
            batch.done = asyncio.get_running_loop().create_future()
        if self.settled():
            fut = batch.done
            batch.done = None
            fut.set_result(None)
            return fut
        if batch.ops == 0:
            batch.ops = 1  # ship an empty batch as a barrier behind the inflight ones
        self._wakeup.set()
        return batch.done

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
        rpc_failed_as("msgstore", "Stream", code, reason)

    async def _session(self) -> None:
        self._sender_error = None
        if self.lane is not None:
            await self._lane_session(self.lane)
            return
        call = self._stream(_Requests(self))
        self.connected.set()
        if self._open.ops or self._sealed:  # written while the stream was down: ship it now
            self._wakeup.set()
        try:
            async for result in call:
                self._answer(result)
        finally:
            call.cancel()
        failed = self._sender_failed()  # not ``self._sender_error``: see there
        if failed is not None:
            raise StreamBroken(f"sending a batch failed: {failed!r}")
        raise StreamBroken("stream ended by the msgstore")

    async def _lane_session(self, path: str) -> None:
        """The same stream over the msgstore's unix socket (``services.common.framed``)."""
        try:
            reader, writer = await open_lane(path)  # the msgstore's hello: the stream is up
        except (OSError, FrameError) as exc:
            raise StreamBroken(f"{path}: {exc}") from None
        sender: asyncio.Task[None] | None = None
        try:
            self.connected.set()
            if self._open.ops or self._sealed:  # written while the stream was down
                self._wakeup.set()
            sender = asyncio.create_task(self._lane_send(writer), name="store-lane-send")
            async for data in frames(reader):
                self._answer(msgstore_pb2.StoreBatchResult.FromString(data))
        except (OSError, FrameError, DecodeError) as exc:
            raise StreamBroken(repr(exc)) from None
        finally:
            if sender is not None:
                sender.cancel()
            writer.close()
        failed = self._sender_failed()
        if failed is not None:
            raise StreamBroken(f"sending a batch failed: {failed!r}")
        raise StreamBroken("stream ended by the msgstore")

    async def _lane_send(self, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    data = await self._next_request()
                except StopAsyncIteration:  # failed (``_sender_error``): end our side
                    writer.write_eof()
                    return
                writer.write(frame(data))
                await writer.drain()
        except ConnectionError:
            return  # the lane broke: its reader ends and ``_lane_session`` reports it

    def _sender_failed(self) -> Exception | None:
        """What the request side failed with. Read through a method: ``_session`` set the
        attribute to None before awaiting, and a read there stays narrowed to None, which
        the compiled check would turn into a TypeError instead of ``StreamBroken``."""
        return self._sender_error

    async def _next_request(self) -> bytes:
        """The request side of the stream (``_Requests``): ship the open batch whenever a
        slot is free. An exception here ends the request stream (gRPC would only log it
        at debug level and cancel the call); ``_session`` then reports it."""
        try:
            while True:
                ready = bool(self._sealed or self._open.ops)
                if ready and len(self._inflight) < self.max_inflight:
                    if self._sealed:
                        batch = self._sealed.popleft()
                    else:
                        batch = self._open
                        self._open = _Batch()
                    batch.batch_id = self._next_id
                    self._next_id += 1
                    self._inflight.append(batch)
                    return batch.encode()
                if ready:  # every slot taken: wait for an answer
                    self._slot.clear()
                    await self._slot.wait()
                else:
                    self._wakeup.clear()
                    await self._wakeup.wait()
        except Exception as exc:
            self._sender_error = exc
            raise StopAsyncIteration from exc

    def _answer(self, result: msgstore_pb2.StoreBatchResult) -> None:
        if not self._inflight or self._inflight[0].batch_id != result.batch_id:
            raise StreamBroken("batch results out of order")
        batch = self._inflight.popleft()
        self._slot.set()
        statuses = result.statuses
        seqs = result.seqs
        if result.error and not statuses:
            self._fail(batch, result.error)
            return
        callbacks = batch.callbacks
        if len(statuses) != len(callbacks) or len(seqs) != len(callbacks):
            raise StreamBroken(
                f"{len(statuses)} statuses and {len(seqs)} seqs for {len(callbacks)} appends"
            )
        for callback, status, seq in zip(callbacks, statuses, seqs, strict=True):
            try:
                callback(status, seq, "")
            except Exception as exc:  # a bug in the callback: reported, the stream goes on
                _report(exc)
        if batch.done is not None and not batch.done.done():
            batch.done.set_result(None)
        if batch.barriers:
            why = result.marks_error
            failed = None
            if why and result.marks_failed:
                failed = {(k.mountpoint, k.client_id) for k in result.marks_failed}
            batch.settle_barriers(why, failed)

    def _fail(self, batch: _Batch, reason: str) -> None:
        for callback in batch.callbacks:
            try:
                callback(UNAVAILABLE, 0, reason)
            except Exception as exc:
                _report(exc)
        batch.callbacks = []
        if batch.done is not None and not batch.done.done():
            batch.done.set_result(None)
        batch.settle_barriers(reason or "the store did not answer", None)

    def _fail_all(self, reason: str) -> None:
        batches = [*self._inflight]
        self._inflight.clear()
        self._slot.set()
        for batch in batches:
            self._fail(batch, reason)

    # -- unary calls ---------------------------------------------------------------
    async def read(
        self, mountpoint: str, client_id: str, epoch: int, after_seq: int, max_entries: int = 1000
    ) -> msgstore_pb2.ReadReply:
        """A page of the queue; raises ``AioRpcError`` or, over the call lane,
        ``LaneError``."""
        request = msgstore_pb2.ReadRequest(
            key=common_pb2.SessionKey(mountpoint=mountpoint, client_id=client_id),
            epoch=epoch,
            after_seq=after_seq,
            max_entries=max_entries,
        )
        read = self.stub.Read
        reply = await call_or_grpc(
            self.calls, "Read", request, READ_TIMEOUT, lambda: read(request, timeout=READ_TIMEOUT)
        )
        assert isinstance(reply, msgstore_pb2.ReadReply)
        return reply


def _report(exc: Exception) -> None:
    """Report a failing callback the way asyncio reports a failing done-callback."""
    asyncio.get_running_loop().call_exception_handler(
        {"message": "Exception in a msgstore append callback", "exception": exc}
    )
