"""The gossip service process: open the store, serve gRPC, commit, collect, stop.

Start-up: lock ``data_dir/gossip/`` (one gossip process per data directory), open
LMDB and load every record into memory, then serve ``Gossip`` and ``Admin`` on
``gossip.address``. Shutdown (``stop`` set): end the Watch streams, let in-flight RPCs
finish for a short grace, commit whatever Puts are queued, close the store. All disk
work runs on one dedicated thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from services.common import grpcutil, service
from services.common.config import Config
from services.common.framed import CALL_LANE, socket_path
from services.common.lane import CallLane, unary_handlers
from services.common.metrics import MetricsRegistry
from services.common.peer import channel as peer_channel
from services.common.peer.identity import load_or_create
from services.common.typed_settings import build
from services.gossip.cluster.discovery import RedisDiscovery
from services.gossip.cluster.node import ClusterNode
from services.gossip.cluster.replicator import Replicator
from services.gossip.cluster.servicer import ClusterServicer
from services.gossip.committer import Committer, load_store
from services.gossip.config import GossipSettings
from services.gossip.engines.lmdb_engine import LmdbEngine
from services.gossip.gc import collect_garbage
from services.gossip.hub import WatchHub
from services.gossip.metrics import GossipMetrics
from services.gossip.servicer import GossipServicer
from services.gossip.store import MetaStore
from services.pb import cluster_pb2_grpc, common_pb2_grpc, gossip_pb2, gossip_pb2_grpc

GRACE_S = 1.0


def now_us() -> int:
    return time.time_ns() // 1000


def _lock(path: Path) -> int:
    """An exclusive lock on the store directory, released by the kernel even on SIGKILL."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise OSError(f"another gossip process is using {path}") from None
    return fd


async def serve(config: Config, stop: asyncio.Event) -> None:
    settings = build(GossipSettings, config)
    path = settings.store_path
    lock_fd = _lock(path)
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gossip-store")
    loop = asyncio.get_running_loop()
    try:
        engine = await loop.run_in_executor(executor, LmdbEngine, path, settings.map_size)
        try:
            store = MetaStore(settings.nodename)
            await loop.run_in_executor(executor, load_store, store, engine)
            await _serve(settings, store, engine, executor, stop, config["service_lanes"])
        finally:
            await loop.run_in_executor(executor, engine.close)
    finally:
        executor.shutdown(wait=True)
        os.close(lock_fd)


async def _serve(
    settings: GossipSettings,
    store: MetaStore,
    engine: LmdbEngine,
    executor: ThreadPoolExecutor,
    stop: asyncio.Event,
    lanes: bool,
) -> None:
    hub = WatchHub()
    registry = MetricsRegistry()
    metrics = GossipMetrics(registry, store, watchers=lambda: len(hub))
    committer = Committer(
        store,
        engine,
        executor,
        max_batch=settings.max_batch,
        clock_us=now_us,
        on_commit=hub.publish,
        metrics=metrics,
    )

    def details() -> dict[str, Any]:
        return {
            "keys": {p: store.count(p) for p in store.resolvers},
            "tombstones": store.tombstone_count(),
            "watchers": len(hub),
            "dot_floor": store.dot_floor,
        }

    identity = load_or_create(settings.data_dir, settings.nodename)
    redis = settings.discovery == "redis"
    cluster = ClusterNode(
        identity,
        settings.cookie,
        settings.seeds,
        settings.data_dir / "cluster",
        discovering=redis,
    )
    # Built before the first commit: its digest starts from what was loaded, and every
    # commit after is reported to it.
    replicator = Replicator(store, committer, cluster)
    committer.on_durable = replicator.on_durable
    committer.start()
    peers = peer_channel.create_server(settings.cookie)
    cluster_pb2_grpc.add_ClusterServicer_to_server(ClusterServicer(cluster, replicator), peers)
    host = settings.cluster_listen.rpartition(":")[0]
    port = peers.add_insecure_port(settings.cluster_listen)
    if port == 0:
        raise OSError(f"cannot bind cluster.listen {settings.cluster_listen}")
    await peers.start()
    cluster.start(f"{host}:{port}")
    replicator.start()
    discovery = (
        RedisDiscovery(settings.redis_url, settings.redis_ttl, settings.cookie, cluster)
        if redis
        else None
    )
    if discovery is not None:
        discovery.start()

    def all_details() -> dict[str, Any]:
        out = {**details(), "cluster": cluster.details(), "replication": replicator.details()}
        if discovery is not None:
            out["discovery"] = discovery.details()
        return out

    server = grpcutil.create_server()
    servicer = GossipServicer(
        store,
        committer,
        hub,
        settings,
        metrics,
        views=cluster.views,
        join=cluster.join_via,
        leave=cluster.remove,
    )
    gossip_pb2_grpc.add_GossipServicer_to_server(servicer, server)
    common_pb2_grpc.add_AdminServicer_to_server(
        grpcutil.AdminServicer(
            "gossip", settings.nodename, registry, all_details, ready=lambda: cluster.ready
        ),
        server,
    )
    grpcutil.bind(server, settings.address)
    await server.start()
    calls: CallLane | None = None
    calls_path = socket_path(settings.address, CALL_LANE, lanes)
    if calls_path is not None:
        service_desc = gossip_pb2.DESCRIPTOR.services_by_name["Gossip"]
        calls = CallLane(calls_path, unary_handlers(servicer, service_desc), "gossip")
        await calls.start()
    gc_task = asyncio.create_task(collect_garbage(committer, settings, metrics, stop))
    service.started(settings.address)
    try:
        await stop.wait()
    finally:
        hub.close()
        if discovery is not None:
            await discovery.stop()
        await replicator.stop()
        await cluster.stop()
        await peers.stop(GRACE_S)
        if calls is not None:
            await calls.close()
        await server.stop(GRACE_S)
        await gc_task
        await committer.close()
