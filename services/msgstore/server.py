"""The msgstore process: open the store, serve MsgStore and Admin, stop cleanly.

Shutdown order matters for durability: stop accepting RPCs (in-flight ones get a short
grace), then let the committer write every job already submitted and fsync, then close
the environment. The store lives in ``data_dir/msgstore/``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from services.common import log
from services.common.config import Config
from services.common.grpcutil import AdminServicer, bind, create_server, service_address
from services.common.metrics import MetricsRegistry
from services.common.service import started
from services.msgstore.committer import Committer
from services.msgstore.engines.base import StoreError
from services.msgstore.engines.lmdb_engine import LmdbEngine
from services.msgstore.metrics import StoreMetrics
from services.msgstore.queue import DBS, QueueStore
from services.msgstore.servicer import MsgStoreServicer, add_to_server
from services.pb import common_pb2_grpc

STOP_GRACE = 1.0  # seconds in-flight RPCs get to finish once stop is set


def store_path(config: Config) -> Path:
    return Path(config["data_dir"]) / "msgstore"


def open_store(config: Config) -> QueueStore:
    """Open the LMDB store; a failure is an OSError so the service exits with a reason."""
    path = store_path(config)
    try:
        engine = LmdbEngine(
            path,
            DBS,
            map_size=config["msgstore.map_size"],
            ordered_sync=config["msgstore.fsync"] == "always",
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


async def serve(config: Config, stop: asyncio.Event) -> None:
    store = open_store(config)
    registry, metrics = _metrics(store)
    committer = Committer(
        store,
        fsync=config["msgstore.fsync"],
        interval=config["msgstore.fsync_interval"],
        max_batch=config["msgstore.max_batch"],
        max_delay=config["msgstore.max_batch_delay"],
        metrics=metrics,
    )
    committer.start()
    servicer = MsgStoreServicer(store, committer)
    ready = False

    def details() -> dict[str, Any]:
        totals = store.totals
        return {
            "path": str(store_path(config)),
            "fsync": committer.fsync,
            "queues": totals.queues,
            "entries": totals.entries,
            "bytes": totals.bytes,
            "streams": servicer.streams,
            "pending": committer.pending,
            "groups": committer.groups,
        }

    server = create_server()
    add_to_server(servicer, server)
    admin = AdminServicer("msgstore", config["nodename"], registry, details, lambda: ready)
    common_pb2_grpc.add_AdminServicer_to_server(admin, server)
    address = service_address(config, "msgstore")
    try:
        bind(server, address)
        await server.start()
        ready = True
        started(address)
        await stop.wait()
    finally:
        ready = False
        await server.stop(STOP_GRACE)
        await committer.close()
        try:
            store.engine.close()
        except StoreError as exc:
            log.emit("store.error", "error", op="close", reason=str(exc))
            raise OSError(f"closing the message store: {exc}") from exc
