"""The msgstore process: open the store, serve MsgStore and Admin, stop cleanly.

Shutdown order matters for durability: stop accepting RPCs (in-flight ones get a short
grace), then let the committer write every job already submitted and fsync, then close
the environment. The store lives in ``data_dir/msgstore/``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from services.common import log
from services.common.config import Config
from services.common.framed import CALL_LANE, STORE_LANE, socket_path
from services.common.grpcutil import AdminServicer, bind, create_server
from services.common.lane import CallLane, Lane, unary_handlers
from services.common.metrics import MetricsRegistry
from services.common.service import started
from services.common.typed_settings import build
from services.msgstore.cluster.start import ClusterSide
from services.msgstore.cluster.start import start as start_cluster
from services.msgstore.committer import Committer
from services.msgstore.config import MsgstoreSettings
from services.msgstore.engines.base import StoreError
from services.msgstore.engines.lmdb_engine import LmdbEngine
from services.msgstore.metrics import StoreMetrics, replication_gauges
from services.msgstore.model import Collected, CollectTombstones
from services.msgstore.queue import DBS, QueueStore
from services.msgstore.servicer import MsgStoreServicer, add_to_server
from services.msgstore.tombstones import Graveyard
from services.pb import common_pb2_grpc, msgstore_pb2

STOP_GRACE = 1.0  # seconds in-flight RPCs get to finish once stop is set
COLLECT_EVERY = 10.0  # seconds between two looks for tombstones past their grace
COLLECT_BATCH = 1000  # tombstones removed per commit at most


def open_store(settings: MsgstoreSettings) -> QueueStore:
    """Open the LMDB store; a failure is an OSError so the service exits with a reason."""
    path = settings.store_path
    try:
        engine = LmdbEngine(
            path,
            DBS,
            map_size=settings.map_size,
            ordered_sync=settings.fsync == "always",
        )
        return QueueStore(engine)
    except (StoreError, OSError) as exc:
        raise OSError(f"cannot open the message store in {path}: {exc}") from exc


def _metrics(store: QueueStore) -> tuple[MetricsRegistry, StoreMetrics]:
    registry = MetricsRegistry()
    metrics = StoreMetrics(registry)
    totals = store.totals

    def used() -> float:
        return float(store.engine.info().used_bytes)

    def limit() -> float:
        return float(store.engine.info().limit_bytes)

    metrics.gauges(
        queues=lambda: totals.queues,
        entries=lambda: totals.entries,
        size=lambda: totals.bytes,
        used=used,
        limit=limit,
    )
    return registry, metrics


async def collect_tombstones(committer: Committer, graveyard: Graveyard) -> None:
    """Now and then (a tenth of the grace, at most ``COLLECT_EVERY`` seconds), remove the
    tombstones whose grace has passed (``tombstones``), a bounded number per commit; a
    failure buries them again."""
    every = min(COLLECT_EVERY, max(graveyard.grace / 10, 0.1))
    while True:
        await asyncio.sleep(every)
        while due := graveyard.due(time.monotonic(), COLLECT_BATCH):
            job = CollectTombstones(tuple((g.session, g.epoch) for g in due))
            result = await committer.submit(job)
            assert isinstance(result, Collected)
            if result.error:
                graveyard.retry(due, time.monotonic())
                break
            graveyard.collected += result.count


async def serve(config: Config, stop: asyncio.Event) -> None:
    settings = build(MsgstoreSettings, config)
    store = open_store(settings)
    registry, metrics = _metrics(store)
    committer = Committer(
        store,
        fsync=settings.fsync,
        interval=settings.fsync_interval,
        max_batch=settings.max_batch,
        max_delay=settings.max_batch_delay,
        metrics=metrics,
    )
    committer.start()
    graveyard = Graveyard(settings.tombstone_ttl)
    now = time.monotonic()
    for session, epoch in store.tombstones_at_open:
        graveyard.bury(session, epoch, now)
    store.tombstones_at_open = []
    servicer = MsgStoreServicer(store, committer, graveyard=graveyard)
    ready = False
    side: ClusterSide | None = None

    def details() -> dict[str, Any]:
        totals = store.totals
        return {
            "path": str(settings.store_path),
            "fsync": committer.fsync,
            "queues": totals.queues,
            "entries": totals.entries,
            "bytes": totals.bytes,
            "streams": servicer.streams,
            "pending": committer.pending,
            "groups": committer.groups,
            "tombstones": len(graveyard),
            "tombstones_collected": graveyard.collected,
            "replication": side.replicator.status() if side is not None else None,
        }

    server = create_server()
    add_to_server(servicer, server)
    admin = AdminServicer("msgstore", settings.nodename, registry, details, lambda: ready)
    common_pb2_grpc.add_AdminServicer_to_server(admin, server)
    collector = asyncio.create_task(collect_tombstones(committer, graveyard))
    lane: Lane | None = None
    calls: CallLane | None = None
    try:
        if settings.replication_factor > 1:
            side = servicer.cluster = await start_cluster(settings, store, committer)
            rep = side.replicator
            replication_gauges(
                registry,
                lambda: float(len(rep.queues)),
                lambda: float(rep.replicated),
                rep.lag_max,
                lambda: float(rep.held_bytes),
            )
        bind(server, settings.address)
        await server.start()
        lane_path = socket_path(settings.address, STORE_LANE, config["service_lanes"])
        if lane_path is not None:
            lane = Lane(lane_path, servicer.Stream, "msgstore", "Stream")
            await lane.start()
        calls_path = socket_path(settings.address, CALL_LANE, config["service_lanes"])
        if calls_path is not None:
            service = msgstore_pb2.DESCRIPTOR.services_by_name["MsgStore"]
            calls = CallLane(calls_path, unary_handlers(servicer, service), "msgstore")
            await calls.start()
        ready = True
        started(settings.address)
        await stop.wait()
    finally:
        ready = False
        collector.cancel()
        if lane is not None:
            await lane.close()
        if calls is not None:
            await calls.close()
        await server.stop(STOP_GRACE)
        if side is not None:
            await side.close()
        await committer.close()
        try:
            store.engine.close()
        except StoreError as exc:
            log.emit("store.error", "error", op="close", reason=str(exc))
            raise OSError(f"closing the message store: {exc}") from exc
