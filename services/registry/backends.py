"""Calls to this node's msgstore and gossip services, each with a deadline.

Channels are long-lived and reconnect by themselves; calls use ``wait_for_ready`` so a
service that is still starting is waited for, but never past ``rpc_timeout``. Unary calls
go over each service's call lane when it listens on a unix socket
(``services.common.lane``): a gRPC aio call costs each side several times the CPU, and a
persistent CONNECT makes several. Every
failure becomes a :class:`BackendError` (and an ``rpc.failed`` event), which the caller
turns into a refused CONNECT or a later retry — never a crash.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc

from services.common.framed import CALL_LANE, socket_path
from services.common.grpcutil import CHANNEL_OPTIONS, CallFailed, rpc_failed_as, status_of
from services.common.lane_client import LaneClient, call_or_grpc
from services.common.session_key import SessionKey
from services.pb import gossip_pb2, gossip_pb2_grpc, msgstore_pb2, msgstore_pb2_grpc
from services.registry.records import SUBS_PREFIX, pb_key
from services.registry.sessions import DeleteQueue, OpenQueue

T = TypeVar("T")
READ_PAGE = 1000  # queue entries per Read

# gRPC's default reconnect backoff grows to 2 minutes: a msgstore restarted after a long
# outage would keep refusing CONNECTs that long. Capped, it is found within a second.
_OPTIONS = (
    *CHANNEL_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


def _channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=_OPTIONS)


class BackendError(Exception):
    """A call to another service failed; the message says which and why."""

    def __init__(
        self, target: str, method: str, code: str, reason: str, store_epoch: int = 0
    ) -> None:
        super().__init__(f"{target}.{method} failed: {code} {reason}".strip())
        self.target = target
        self.method = method
        self.code = code
        self.reason = reason
        self.store_epoch = store_epoch  # the queue's epoch when the msgstore refused ours


def _logged(err: BackendError) -> BackendError:
    """Every BackendError is also an ``rpc.failed`` event."""
    rpc_failed_as(err.target, err.method, err.code, err.reason)
    return err


class Backends:
    def __init__(
        self, msgstore_address: str, gossip_address: str, rpc_timeout: float, lanes: bool = True
    ) -> None:
        self.timeout = rpc_timeout
        self._msgstore_channel = _channel(msgstore_address)
        self._gossip_channel = _channel(gossip_address)
        self.msgstore = msgstore_pb2_grpc.MsgStoreStub(self._msgstore_channel)
        self.gossip = gossip_pb2_grpc.GossipStub(self._gossip_channel)
        self._lanes: dict[str, LaneClient] = {}
        for target, address, service in (
            ("msgstore", msgstore_address, msgstore_pb2.DESCRIPTOR.services_by_name["MsgStore"]),
            ("gossip", gossip_address, gossip_pb2.DESCRIPTOR.services_by_name["Gossip"]),
        ):
            path = socket_path(address, CALL_LANE, lanes)
            if path is not None:
                self._lanes[target] = LaneClient(path, service)
        # A queue this node owns: its replica set, this node first (() = not replicated);
        # the registrar sets it when msgstore.replication_factor > 1.
        self.replica_set: Callable[[SessionKey], tuple[str, ...]] = lambda key: ()

    async def _call(
        self, target: str, method: str, fn: Callable[..., Awaitable[T]], request: Any
    ) -> T:
        try:
            return cast(
                T,
                await call_or_grpc(
                    self._lanes.get(target),
                    method,
                    request,
                    self.timeout,
                    lambda: fn(request, timeout=self.timeout, wait_for_ready=True),
                ),
            )
        except CallFailed as exc:
            err = BackendError(target, method, *status_of(exc))
        raise _logged(err)

    def _refuse(self, method: str, state: msgstore_pb2.QueueState) -> BackendError:
        return _logged(BackendError("msgstore", method, "REFUSED", state.error, state.epoch))

    async def open_queue(self, step: OpenQueue) -> msgstore_pb2.QueueState:
        request = msgstore_pb2.OpenRequest(
            key=pb_key(step.key),
            epoch=step.epoch,
            create=True,
            clean=step.clean,
            max_len=step.max_len,
            replicas=self.replica_set(step.key),
            max_offline_len=step.max_offline,
        )
        state: msgstore_pb2.QueueState = await self._call(
            "msgstore", "Open", self.msgstore.Open, request
        )
        if state.error:
            raise self._refuse("Open", state)
        return state

    async def carry_marks(
        self,
        key: SessionKey,
        epoch: int,
        inbound_qos2: list[int],
        delivered_upto: int,
        outbound_pubrel: list[int],
    ) -> None:
        """A queue's delivery state, in its own seqs (a replicated queue keeps them across
        a handover): what was sent to the client, QoS 2 packet ids and PUBREL marks."""
        batch = msgstore_pb2.StoreBatch(batch_id=3)
        if delivered_upto:
            batch.acks.add(key=pb_key(key), epoch=epoch, delivered_upto=delivered_upto)
        for kind, ids in (
            (msgstore_pb2.MARK_INBOUND_QOS2, inbound_qos2),
            (msgstore_pb2.MARK_OUTBOUND_PUBREL, outbound_pubrel),
        ):
            for ident in ids:
                batch.marks.add(key=pb_key(key), epoch=epoch, kind=kind, id=ident, set=True)
        if batch.acks or batch.marks:
            await self._store(batch)

    async def orphans(self, primary: str, replica: str = "") -> msgstore_pb2.QueuesReply:
        """The replicated queues held here whose primary is ``primary`` (and whose
        replica set names ``replica``, if given)."""
        request = msgstore_pb2.OrphansRequest(primary=primary, replica=replica)
        reply: msgstore_pb2.QueuesReply = await self._call(
            "msgstore", "Orphans", self.msgstore.Orphans, request
        )
        return reply

    async def failover(
        self,
        key: SessionKey,
        epoch: int,
        copies: tuple[str, ...],
        limits: tuple[int, int],
        uncertain: bool = True,
    ) -> msgstore_pb2.QueueState:
        """Make this node the primary of ``key``'s replicated queue, whose primary is
        down: the msgstore reads the other copies (DESIGN §4). Refused (BackendError)
        when too few of them answer. ``uncertain``: what the old primary sent to the
        client is not known (it died with it), so every entry counts as sent once; a
        live handover, which carries the exact delivery state after, passes False.
        ``limits``: the queue's online and offline length limits (0 = unlimited)."""
        request = msgstore_pb2.FailoverRequest(
            key=pb_key(key),
            epoch=epoch,
            copies=list(copies),
            replicas=list(self.replica_set(key)),
            max_len=limits[0],
            max_offline_len=limits[1],
            uncertain=uncertain,
        )
        state: msgstore_pb2.QueueState = await self._call(
            "msgstore", "Failover", self.msgstore.Failover, request
        )
        if state.error:
            raise self._refuse("Failover", state)
        return state

    async def delete_queue(self, step: DeleteQueue) -> msgstore_pb2.QueueState:
        request = msgstore_pb2.DeleteRequest(
            key=pb_key(step.key), epoch=step.epoch, reason=step.reason
        )
        state: msgstore_pb2.QueueState = await self._call(
            "msgstore", "Delete", self.msgstore.Delete, request
        )
        if state.error:
            raise self._refuse("Delete", state)
        return state

    async def read_queue(
        self, key: SessionKey, epoch: int, after: int
    ) -> tuple[list[msgstore_pb2.QueueEntry], msgstore_pb2.QueueState]:
        """Every live entry above ``after``, in seq order, and the queue's state."""
        entries: list[msgstore_pb2.QueueEntry] = []
        while True:
            request = msgstore_pb2.ReadRequest(
                key=pb_key(key), epoch=epoch, after_seq=after, max_entries=READ_PAGE
            )
            reply: msgstore_pb2.ReadReply = await self._call(
                "msgstore", "Read", self.msgstore.Read, request
            )
            if reply.state.error:
                raise self._refuse("Read", reply.state)
            entries.extend(reply.entries)
            if not reply.more:  # not the count: a page of large messages is short
                return entries, reply.state
            after = reply.entries[-1].seq

    async def append_entries(
        self,
        key: SessionKey,
        epoch: int,
        entries: list[msgstore_pb2.QueueEntry],
        inbound_qos2: list[int] = [],  # noqa: B006 (read only)
        delivered_upto: int = 0,
        outbound_pubrel: list[int] = [],  # noqa: B006 (read only)
    ) -> None:
        """Append ``entries`` to ``key``'s queue in order, fenced by ``epoch``, as one
        durable batch (a queue handed over from another node), then carry over their
        state: ``delivered_upto`` and ``outbound_pubrel`` name the old queue's seqs,
        which the entries get anew here (in the same order), so a message that was in
        flight is resent with DUP and one whose PUBREC arrived gets its PUBREL."""
        batch = msgstore_pb2.StoreBatch(batch_id=1)
        for entry in entries:
            batch.appends.add(key=pb_key(key), epoch=epoch, delivery=entry.delivery)
        for packet_id in inbound_qos2:
            batch.marks.add(
                key=pb_key(key),
                epoch=epoch,
                kind=msgstore_pb2.MARK_INBOUND_QOS2,
                id=packet_id,
                set=True,
            )
        result = await self._store(batch)
        renumbered = dict(zip((e.seq for e in entries), result.seqs, strict=True))
        state = msgstore_pb2.StoreBatch(batch_id=2)
        delivered = [new for old, new in renumbered.items() if old <= delivered_upto]
        if delivered:
            state.acks.add(key=pb_key(key), epoch=epoch, delivered_upto=max(delivered))
        for old in outbound_pubrel:
            if old in renumbered:
                state.marks.add(
                    key=pb_key(key),
                    epoch=epoch,
                    kind=msgstore_pb2.MARK_OUTBOUND_PUBREL,
                    id=renumbered[old],
                    set=True,
                )
        if state.acks or state.marks:
            await self._store(state)

    async def _store(self, batch: msgstore_pb2.StoreBatch) -> msgstore_pb2.StoreBatchResult:
        """One durable batch on its own stream; refused as a whole if any append is."""
        call = self.msgstore.Stream(timeout=self.timeout, wait_for_ready=True)
        try:
            await call.write(batch)
            await call.done_writing()
            result: msgstore_pb2.StoreBatchResult = await call.read()
        except grpc.aio.AioRpcError as exc:
            err = BackendError("msgstore", "Stream", exc.code().name, exc.details() or "")
            raise _logged(err) from None
        finally:
            call.cancel()
        if result is grpc.aio.EOF:  # type: ignore[attr-defined]
            raise _logged(BackendError("msgstore", "Stream", "STREAM_ENDED", "no result"))
        bad = [s for s in result.statuses if s != msgstore_pb2.APPEND_OK]
        if result.error or bad or result.stale_acks or result.marks_error:
            reason = result.error or (
                f"{len(bad)} appends refused ({bad[0]})"
                if bad
                else result.marks_error or "a stale epoch"
            )
            raise _logged(BackendError("msgstore", "Stream", "REFUSED", reason))
        return result

    async def queue_pages(self) -> AsyncIterator[list[msgstore_pb2.QueueState]]:
        """Every existing msgstore queue, a page (one call, one deadline) at a time."""
        after = b""
        while True:
            reply: msgstore_pb2.QueuesReply = await self._call(
                "msgstore", "Queues", self.msgstore.Queues, msgstore_pb2.QueuesRequest(after=after)
            )
            yield list(reply.queues)
            if not reply.next:
                return
            after = reply.next

    async def put_meta(self, ops: list[gossip_pb2.MetaOp]) -> None:
        await self._call("gossip", "Put", self.gossip.Put, gossip_pb2.PutRequest(ops=ops))

    async def subs_owners(self) -> dict[bytes, str]:
        """Every ``subs`` key in gossip and the node its record names (one snapshot)."""
        owners: dict[bytes, str] = {}
        call = self.gossip.Watch(
            gossip_pb2.WatchRequest(prefixes=[SUBS_PREFIX]), wait_for_ready=True
        )
        try:
            async with asyncio.timeout(self.timeout):
                async for event in call:
                    for update in event.updates:
                        if update.deleted:
                            owners.pop(update.key, None)
                        else:
                            record = gossip_pb2.SubscriberRecord.FromString(update.value)
                            owners[update.key] = record.node
                    if event.snapshot_done:
                        return owners
        except grpc.aio.AioRpcError as exc:
            err = BackendError("gossip", "Watch", exc.code().name, exc.details() or "")
        except TimeoutError:
            err = BackendError("gossip", "Watch", "DEADLINE_EXCEEDED", "no snapshot in time")
        else:
            err = BackendError("gossip", "Watch", "STREAM_ENDED", "no snapshot_done")
        finally:
            call.cancel()
        raise _logged(err)

    async def close(self) -> None:
        for lane in self._lanes.values():
            await lane.close()
        await self._msgstore_channel.close(None)
        await self._gossip_channel.close(None)
