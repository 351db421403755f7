"""The registry process: open the table, recover, serve Registry and Admin, expire, stop.

Start-up order matters: the table is rebuilt from disk (sessions that were online are
now offline) and the directory corrected *before* the gRPC port opens, so no
registration can race the recovery. Shutdown ends the Watch streams first (they would
otherwise hold the server's grace period), stops the server, then lets the directory
writer and the committer finish every write they were asked for.
"""

from __future__ import annotations

import asyncio

from services.common.background import report_crash
from services.common.cluster_view import ViewFollower
from services.common.config import Config
from services.common.framed import REGISTRY_LANE, socket_path
from services.common.grpcutil import AdminServicer, bind, create_server
from services.common.lane import Lane
from services.common.metrics import MetricsRegistry
from services.common.service import started
from services.common.typed_settings import build
from services.pb import common_pb2_grpc, registry_pb2_grpc
from services.registry.backends import Backends
from services.registry.cluster import start as cluster_side
from services.registry.committer import Committer
from services.registry.config import RegistrySettings
from services.registry.engines.journal_engine import JournalEngine
from services.registry.recovery import recover, sweep_orphan_subs
from services.registry.registrar import Registrar
from services.registry.servicer import RegistryServicer
from services.registry.sessions import Policy, SessionTable
from services.registry.store import SessionStore
from services.registry.watchers import WatchHub

STOP_GRACE = 2.0
# s a listener has to watch again after its stream broke before its sessions are ended
LISTENER_GRACE = 5.0
VIEW_WAIT = 10.0  # s for gossip's first view at start-up (gossip starts beside us)


async def serve(config: Config, stop: asyncio.Event) -> None:
    settings = build(RegistrySettings, config)
    store = SessionStore(JournalEngine(settings.store_path, settings.map_size))
    sessions, reserved = store.load()
    table = SessionTable(
        Policy(
            persistent_client_expiration=settings.persistent_client_expiration,
            max_session_expiry_interval=settings.max_session_expiry_interval,
            max_offline_messages=settings.max_offline_messages,
            max_online_len=settings.max_online_len,
        )
    )
    metrics = MetricsRegistry()
    committer = Committer(store, table.get, (s.key for s in sessions), metrics)
    backends = Backends(
        settings.msgstore_address,
        settings.gossip_address,
        settings.rpc_timeout,
        lanes=config["service_lanes"],
    )
    hub = WatchHub()
    registrar = Registrar(settings, table, committer, backends, hub, metrics)
    lost: set[asyncio.Task[int]] = set()

    def listener_lost(listener_id: str) -> None:
        task = asyncio.create_task(registrar.listener_lost(listener_id, LISTENER_GRACE))
        lost.add(task)
        task.add_done_callback(lost.discard)

    hub.on_lost = listener_lost
    serving = False
    server = create_server()
    expiry: asyncio.Task[None] | None = None
    side: cluster_side.ClusterSide | None = None
    sweep: asyncio.Task[int] | None = None
    lane: Lane | None = None
    follower = ViewFollower(backends.gossip, settings.node)
    registrar.cluster = lambda: follower.view
    following = asyncio.create_task(follower.run(), name="registry-view")
    try:
        # Whether this node is a cluster member decides how recovery sweeps (recovery.py).
        await follower.first(VIEW_WAIT)
        orphan_subs = await recover(registrar, sessions, reserved)
        servicer = RegistryServicer(registrar, hub)
        registry_pb2_grpc.add_RegistryServicer_to_server(servicer, server)
        common_pb2_grpc.add_AdminServicer_to_server(
            AdminServicer(
                "registry",
                settings.node,
                metrics,
                registrar.details,
                lambda: serving and (side is None or side.ready()),
            ),
            server,
        )
        bind(server, settings.address)
        await server.start()
        lane_path = socket_path(settings.address, REGISTRY_LANE, config["service_lanes"])
        if lane_path is not None:
            lane = Lane(lane_path, servicer.connections_lane, "registry", "Connections")
            await lane.start()
        serving = True
        started(settings.address)
        side = await cluster_side.start(
            settings, registrar, backends, lambda: follower.view.members
        )
        follower.on_change = side.on_view
        side.on_view(follower.view)
        if orphan_subs:
            sweep = asyncio.create_task(
                sweep_orphan_subs(registrar, orphan_subs), name="registry-orphan-subs"
            )
            sweep.add_done_callback(report_crash)
        expiry = asyncio.create_task(registrar.run_expiry(stop), name="registry-expiry")
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({expiry, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if expiry.done():
            expiry.result()  # re-raises if the expiry loop failed: the process must not go on
    finally:
        serving = False
        hub.close()
        if lane is not None:
            await lane.close()
        await server.stop(STOP_GRACE)
        if side is not None:
            await side.close()
        for task in list(lost):
            task.cancel()
        if sweep is not None:
            sweep.cancel()
            await asyncio.gather(sweep, return_exceptions=True)
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        if expiry is not None and not expiry.done():
            expiry.cancel()
            await asyncio.gather(expiry, return_exceptions=True)
        await registrar.close()
        await committer.close()
        await backends.close()
        store.close()
