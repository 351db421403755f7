"""The registry process: open the table, recover, serve Registry and Admin, expire, stop.

Start-up order matters: the table is rebuilt from disk (sessions that were online are
now offline) and the directory corrected *before* the gRPC port opens, so no
registration can race the recovery. Shutdown ends the Watch streams first (they would
otherwise hold the server's grace period), stops the server, then lets the journal
finish every write it was asked for.
"""

from __future__ import annotations

import asyncio

from services.common.config import Config
from services.common.grpcutil import AdminServicer, bind, create_server, service_address
from services.common.metrics import MetricsRegistry
from services.common.service import started
from services.pb import common_pb2_grpc, registry_pb2_grpc
from services.registry.backends import Backends
from services.registry.config import registry_config
from services.registry.registrar import Registrar
from services.registry.servicer import RegistryServicer
from services.registry.sessions import Policy, SessionTable
from services.registry.store import Journal, SessionStore
from services.registry.watchers import WatchHub

STOP_GRACE = 2.0


async def serve(config: Config, stop: asyncio.Event) -> None:
    cfg = registry_config(config)
    store = SessionStore(cfg.data_dir / "registry", cfg.map_size)
    sessions, reserved = store.load()
    table = SessionTable(
        Policy(
            persistent_client_expiration=cfg.persistent_client_expiration,
            max_session_expiry_interval=cfg.max_session_expiry_interval,
            max_offline_messages=cfg.max_offline_messages,
            max_online_len=cfg.max_online_len,
        )
    )
    journal = Journal(store, table.get, (s.key for s in sessions))
    backends = Backends(
        service_address(config, "msgstore"), service_address(config, "gossip"), cfg.rpc_timeout
    )
    hub = WatchHub()
    metrics = MetricsRegistry()
    registrar = Registrar(cfg, table, journal, backends, hub, metrics)
    serving = False
    server = create_server()
    expiry: asyncio.Task[None] | None = None
    try:
        await registrar.recover(sessions, reserved)
        registry_pb2_grpc.add_RegistryServicer_to_server(RegistryServicer(registrar, hub), server)
        common_pb2_grpc.add_AdminServicer_to_server(
            AdminServicer("registry", cfg.node, metrics, registrar.details, lambda: serving), server
        )
        address = service_address(config, "registry")
        bind(server, address)
        await server.start()
        serving = True
        started(address)
        expiry = asyncio.create_task(registrar.run_expiry(stop), name="registry-expiry")
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({expiry, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if expiry.done():
            expiry.result()  # re-raises if the expiry loop failed: the process must not go on
    finally:
        serving = False
        hub.close()
        await server.stop(STOP_GRACE)
        if expiry is not None and not expiry.done():
            expiry.cancel()
            await asyncio.gather(expiry, return_exceptions=True)
        await journal.close()
        await backends.close()
        store.close()
