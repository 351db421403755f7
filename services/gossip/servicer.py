"""The Gossip gRPC servicer: protobuf in and out, the store, committer and hub underneath.

Put validates every op first (a request is atomic), then waits for the group commit that
makes it durable. Get reads the committed view. Watch registers for changes *before*
copying the snapshot — both in one step of the event loop, so no change falls between
them — streams the snapshot in chunks (the last one with ``snapshot_done``), then sends
whatever accumulated since the previous event, coalesced per key, whenever gRPC flow
control lets it send again. Domain errors become status codes in one place,
:func:`_status_for`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, NoReturn

import grpc

from services.gossip.committer import CommitError, CommitFull, Committer, ShuttingDown
from services.gossip.config import GossipSettings
from services.gossip.hub import WatchHub
from services.gossip.metrics import GossipMetrics
from services.gossip.store import PREFIXES, MetaStore, Op, Txn, UnknownPrefix, Update
from services.gossip.watch import chunks
from services.pb import gossip_pb2, gossip_pb2_grpc

Context = Any  # grpc.aio.ServicerContext; the stubs' generics add nothing here


class InvalidRequest(ValueError):
    """A request that breaks the API contract (empty key, unknown prefix)."""


def _status_for(exc: Exception) -> grpc.StatusCode:
    if isinstance(exc, InvalidRequest | UnknownPrefix):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(exc, CommitFull):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, ShuttingDown):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


async def _abort(context: Context, exc: Exception) -> NoReturn:
    await context.abort(_status_for(exc), str(exc))
    raise AssertionError("context.abort returned")  # it raises; this tells the type checker


def _ops(request: gossip_pb2.PutRequest, store: MetaStore) -> list[Op]:
    ops = []
    for i, op in enumerate(request.ops):
        if not op.key:
            raise InvalidRequest(f"ops[{i}]: empty key")
        store.check_prefix(op.prefix)
        ops.append(Op(op.prefix, op.key, None if op.delete else op.value))
    return ops


def _prefixes(requested: Iterable[str], store: MetaStore) -> list[str]:
    out = list(dict.fromkeys(requested)) or list(PREFIXES)
    for prefix in out:
        store.check_prefix(prefix)
    return out


def _event(updates: list[Update], snapshot_done: bool = False) -> gossip_pb2.WatchEvent:
    event = gossip_pb2.WatchEvent(snapshot_done=snapshot_done)
    for u in updates:
        if u.value is None:
            event.updates.add(prefix=u.prefix, key=u.key, deleted=True)
        else:
            event.updates.add(prefix=u.prefix, key=u.key, value=u.value)
    return event


class GossipServicer(gossip_pb2_grpc.GossipServicer):  # type: ignore[misc]
    def __init__(
        self,
        store: MetaStore,
        committer: Committer,
        hub: WatchHub,
        settings: GossipSettings,
        metrics: GossipMetrics,
        views: Callable[[], AsyncIterator[gossip_pb2.ClusterView]] | None = None,
        join: Callable[[str], Awaitable[gossip_pb2.JoinClusterReply]] | None = None,
        leave: Callable[[str], gossip_pb2.JoinClusterReply] | None = None,
    ) -> None:
        self.store = store
        self.committer = committer
        self.hub = hub
        self.settings = settings
        self.metrics = metrics
        self.views = views
        self.join = join
        self.leave = leave

    async def JoinCluster(
        self, request: gossip_pb2.JoinClusterRequest, context: Context
    ) -> gossip_pb2.JoinClusterReply:
        if self.join is None:
            return gossip_pb2.JoinClusterReply(ok=False, reason="no cluster on this service")
        return await self.join(request.seed)

    async def LeaveCluster(
        self, request: gossip_pb2.LeaveClusterRequest, context: Context
    ) -> gossip_pb2.JoinClusterReply:
        if self.leave is None:
            return gossip_pb2.JoinClusterReply(ok=False, reason="no cluster on this service")
        return self.leave(request.node)

    async def WatchView(
        self, request: gossip_pb2.WatchViewRequest, context: Context
    ) -> AsyncIterator[gossip_pb2.ClusterView]:
        """The cluster view now, then each change (coalesced: the latest view wins)."""
        if self.views is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no cluster on this service")
            return
        async for view in self.views():
            yield view

    async def Put(self, request: gossip_pb2.PutRequest, context: Context) -> gossip_pb2.PutReply:
        try:
            ops = _ops(request, self.store)
            if ops:
                await self.committer.submit(lambda txn: _apply(txn, ops))
        except (InvalidRequest, UnknownPrefix, CommitError) as exc:
            await _abort(context, exc)
        self.metrics.put_requests.inc()
        for op in ops:
            self.metrics.put_ops.labels(op.prefix).inc()
        return gossip_pb2.PutReply(applied=len(ops))

    async def Get(self, request: gossip_pb2.GetRequest, context: Context) -> gossip_pb2.GetReply:
        try:
            value = self.store.get(request.prefix, request.key)
        except UnknownPrefix as exc:
            await _abort(context, exc)
        if value is None:
            return gossip_pb2.GetReply(found=False)
        return gossip_pb2.GetReply(found=True, value=value)

    async def Watch(
        self, request: gossip_pb2.WatchRequest, context: Context
    ) -> AsyncIterator[gossip_pb2.WatchEvent]:
        try:
            prefixes = _prefixes(request.prefixes, self.store)
        except UnknownPrefix as exc:
            await _abort(context, exc)
        limits = (self.settings.watch_batch_size, self.settings.watch_batch_bytes)
        # No await between these two lines: the snapshot and the deltas meet exactly.
        watcher = self.hub.register(prefixes)
        snapshot = [(p, self.store.items(p)) for p in prefixes]
        try:
            pending: list[Update] | None = None
            for chunk in chunks(_snapshot_updates(snapshot), *limits):
                if pending is not None:
                    yield self._sent(_event(pending))
                pending = chunk
            yield self._sent(_event(pending or [], snapshot_done=True))
            del snapshot, pending
            while True:
                batch = await watcher.next(*limits)
                if not batch:
                    return  # the service is stopping: end the stream cleanly
                yield self._sent(_event(batch))
        finally:
            self.hub.unregister(watcher)

    def _sent(self, event: gossip_pb2.WatchEvent) -> gossip_pb2.WatchEvent:
        self.metrics.watch_events.inc()
        return event


def _apply(txn: Txn, ops: list[Op]) -> None:
    txn.apply(ops)


def _snapshot_updates(snapshot: list[tuple[str, list[tuple[bytes, bytes]]]]) -> Iterator[Update]:
    for prefix, items in snapshot:
        for key, value in items:
            yield Update(prefix, key, value)
