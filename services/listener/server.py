"""The listener process: MQTT listeners over one broker, wired to the node's services.

Start-up order matters for invariant I1: the MQTT ports open only after the msgstore
stream is up and gossip's snapshot of subscriptions and retained messages is loaded —
otherwise a publish right after a restart would miss the offline persistent sessions
that were subscribed before it, and be acknowledged anyway.

Shutdown: stop accepting, tell every client (v5 DISCONNECT 0x8B), let the msgstore
confirm what is pending, close channels.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import grpc

from services.common import live_settings, log
from services.common.cluster_view import ViewFollower
from services.common.config import Config
from services.common.framed import CALL_LANE, REGISTRY_LANE, STORE_LANE, socket_path
from services.common.grpcutil import (
    AdminServicer,
    bind,
    channel,
    create_server,
    rpc_failed,
    service_address,
)
from services.common.lane_client import LaneClient
from services.common.metrics import MetricsRegistry, SampleValue
from services.common.peer import channel as peer_channel
from services.common.runtime_file import Watcher
from services.common.service import started
from services.common.typed_settings import build
from services.listener import convert, processes, systree, trace
from services.listener.auth.authorizer import Authorizer, from_config
from services.listener.auth.errors import AuthFileError
from services.listener.broker import Broker
from services.listener.config import (
    ListenerSettings,
    TcpListener,
    ssl_listeners,
    tcp_listeners,
    ws_listeners,
)
from services.listener.connection import Connection
from services.listener.forward import receiver as forward_receiver
from services.listener.forward.receiver import ForwardServicer
from services.listener.fronts import Front, Fronts, Key, fronts_file, key_of
from services.listener.gate import ConnectionGate
from services.listener.metrics import ListenerMetrics
from services.listener.mqtt.codes import ReasonCode
from services.listener.session.limits import SessionLimits
from services.listener.store_client import StoreClient
from services.listener.tls import TlsServer, build_context
from services.listener.webhooks.client import Webhooks
from services.listener.webhooks.notify import Notifier
from services.listener.websocket import PATH, WsProtocol
from services.pb import (
    common_pb2,
    common_pb2_grpc,
    forward_pb2,
    gossip_pb2,
    gossip_pb2_grpc,
    msgstore_pb2,
    registry_pb2,
    registry_pb2_grpc,
)

_READY_TIMEOUT = 60.0


async def _wait_ready(name: str, chan: grpc.aio.Channel, stop: asyncio.Event) -> None:
    """Wait (bounded) for a sibling service that the supervisor may still be starting."""
    deadline = asyncio.get_running_loop().time() + _READY_TIMEOUT
    while not stop.is_set():
        try:
            await asyncio.wait_for(chan.channel_ready(), timeout=1.0)
            return
        except TimeoutError:
            if asyncio.get_running_loop().time() > deadline:
                raise OSError(f"{name} service not reachable after {_READY_TIMEOUT:.0f}s") from None


async def _watch_meta(
    broker: Broker, stub: gossip_pb2_grpc.GossipStub, ready: asyncio.Event, stop: asyncio.Event
) -> None:
    """Keep the trie and retained store in step with gossip; resync after a broken stream."""
    backoff = 0.1
    while not stop.is_set():
        seen: set[tuple[str, bytes]] = set()
        in_snapshot = True
        try:
            call = stub.Watch(gossip_pb2.WatchRequest(prefixes=["subs", "retain", "listeners"]))
            async for event in call:
                for update in event.updates:
                    if in_snapshot:
                        seen.add((update.prefix, update.key))
                    broker.apply_meta(update)
                broker.follow_moves()
                if event.snapshot_done and in_snapshot:
                    in_snapshot = False
                    _drop_unseen(broker, seen)
                    ready.set()
                    backoff = 0.1
        except grpc.aio.AioRpcError as exc:
            rpc_failed("gossip", "Watch", exc, "warning")
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 2.0)


def _drop_unseen(broker: Broker, seen: set[tuple[str, bytes]]) -> None:
    """After a resync, forget replica entries that gossip no longer has."""
    subs = (convert.split_meta_key(key) for prefix, key in seen if prefix == "subs")
    retained = (convert.split_meta_key(key) for prefix, key in seen if prefix == "retain")
    broker.router.keep_only(subs, retained)


async def _watch_registry(
    broker: Broker, stub: registry_pb2_grpc.RegistryStub, stop: asyncio.Event
) -> None:
    backoff = 0.1
    broken = False
    while not stop.is_set():
        try:
            call = stub.Watch(
                registry_pb2.WatchRequest(listener_id=broker.listener_id, node=broker.node)
            )
            await call.initial_metadata()
            # a call that failed (no registry) returns from initial_metadata too: only a
            # stream the registry opened is a restarted registry
            if broken and not call.done():
                # a restarted registry marked our sessions offline: it would not know to take
                # them over, so two connections could share a client id. Drop ours; clients
                # reconnect and register again.
                broker.drop_all("registry restarted")
                broken = False
            async for command in call:
                backoff = 0.1
                if command.HasField("takeover"):
                    t = command.takeover
                    broker.takeover(t.key, t.old_epoch)
                elif command.HasField("moved"):
                    broker.moved(command.moved.key, command.moved.node)
        except grpc.aio.AioRpcError as exc:
            broken = True
            rpc_failed("registry", "Watch", exc, "warning")
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 2.0)


async def _start_forwarding(
    broker: Broker, settings: ListenerSettings, index: int
) -> grpc.aio.Server:
    """Take other nodes' (and sibling processes') forwarded copies on
    ``cluster.forward_listen``, and tell the cluster where (gossip prefix ``listeners``,
    keyed by this process's route), before any client can connect."""
    peers = peer_channel.create_server(settings.cookie)
    forward_receiver.add_to_server(
        ForwardServicer(broker.accept_forwarded, broker.forwarder.incarnation), peers
    )
    address = processes.forward_address(settings.forward_listen, index)
    host = address.rpartition(":")[0]
    port = peers.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind cluster.forward_listen {address}")
    await peers.start()
    record = forward_pb2.ListenerRecord(
        node=broker.own_route, address=f"{host}:{port}", incarnation=broker.forwarder.incarnation
    )
    op = gossip_pb2.MetaOp(
        prefix="listeners",
        key=convert.meta_key("", broker.own_route),
        value=record.SerializeToString(),
    )
    await broker.gossip.Put(gossip_pb2.PutRequest(ops=[op]), timeout=_READY_TIMEOUT)
    return peers


def _authorizer(config: Config) -> Authorizer:
    return from_config(config)


async def _reload_auth(authorizer: Any, interval: float, stop: asyncio.Event) -> None:
    if interval <= 0:
        return
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)
        try:
            if authorizer.reload_if_changed():
                log.emit("auth.reloaded")
        except (OSError, ValueError, AuthFileError) as exc:
            log.emit(
                "auth.failed",
                "error",
                client_id="",
                peer="",
                username="",
                action="reload",
                topic="",
                reason=str(exc),
            )


def _rejected(metrics: ListenerMetrics) -> Callable[[str, str], None]:
    def rejected(peer: str, reason: str) -> None:
        kind = "tls_handshake" if reason.startswith("tls:") else "handshake"
        metrics.refused.labels(kind).inc()
        log.emit(
            "client.rejected",
            "warning",
            client_id="",
            peer=peer,
            reason=reason,
            reason_code=0,
            proto_ver=0,
        )

    return rejected


class TcpFront:
    """A plain TCP (or WebSocket) listener's ``asyncio.Server`` as a ``Front``: closing
    it stops accepting, and the connections it accepted stay."""

    def __init__(self, server: asyncio.Server) -> None:
        self.server = server

    async def close(self) -> None:
        self.server.close()


async def _start_tcp(listener: TcpListener, factory: Any, reuse_port: bool) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        factory, listener.host, listener.port, reuse_port=reuse_port, backlog=4096
    )
    if listener.buffer_size:  # accepted sockets inherit them from the listening socket
        for sock in server.sockets:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, listener.buffer_size)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, listener.buffer_size)
    return server


def _own_samples(metrics: MetricsRegistry) -> systree.Source:
    async def samples() -> list[SampleValue]:
        return metrics.samples()

    return samples


async def _trace(
    broker: Broker, req: common_pb2.TraceRequest, context: Any
) -> AsyncIterator[common_pb2.TraceLine]:
    """``ternmq-admin trace client``: this process's lines about one client id, until
    ``req.seconds`` pass or the caller goes away (``trace``)."""
    run = trace.Trace(
        req.mountpoint,
        req.client_id,
        req.rate_max or 10,
        (req.rate_interval_ms or 100) / 1000,
        req.payload_limit or 200,
    )
    traces = trace.start(run)
    conn = broker.sessions.get(run.key)
    if conn is not None:  # online already: its next packets are traced
        conn.tracing = traces
        yield common_pb2.TraceLine(
            text=f'Connection <{conn.peer}> found for client "{req.client_id}"'
        )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (req.seconds or 60)
    try:
        while (left := deadline - loop.time()) > 0:
            try:
                text = await asyncio.wait_for(run.lines.get(), left)
            except TimeoutError:
                break
            yield common_pb2.TraceLine(text=text)
    finally:
        trace.stop(run)


async def serve(config: Config, stop: asyncio.Event, index: int = 0) -> None:
    """Run listener process ``index`` of ``listener.processes`` until ``stop``."""
    settings = build(ListenerSettings, config)
    node = settings.nodename
    if not 0 <= index < max(settings.processes, 1):
        raise OSError(f"listener process {index} of listener.processes = {settings.processes}")
    metrics = MetricsRegistry()
    lm = ListenerMetrics(metrics)
    addresses = {name: service_address(config, name) for name in ("registry", "gossip", "msgstore")}
    channels = {name: channel(addr) for name, addr in addresses.items()}
    for name, chan in channels.items():
        await _wait_ready(name, chan, stop)
    store = StoreClient(channels["msgstore"])
    lanes: bool = config["service_lanes"]
    store.lane = socket_path(addresses["msgstore"], STORE_LANE, lanes)
    store_calls = socket_path(addresses["msgstore"], CALL_LANE, lanes)
    if store_calls is not None:
        store.calls = LaneClient(store_calls, msgstore_pb2.DESCRIPTOR.services_by_name["MsgStore"])
    store.start()
    broker = Broker(
        settings,
        f"{node}/listener/{os.getpid()}",
        store,
        registry_pb2_grpc.RegistryStub(channels["registry"]),
        gossip_pb2_grpc.GossipStub(channels["gossip"]),
        metrics,
        processes.route_name(node, index),
    )
    gossip_calls = socket_path(addresses["gossip"], CALL_LANE, lanes)
    if gossip_calls is not None:
        gossip_service = gossip_pb2.DESCRIPTOR.services_by_name["Gossip"]
        broker.meta.lane = LaneClient(gossip_calls, gossip_service)
    meta_ready = asyncio.Event()
    follower = ViewFollower(broker.gossip, node, broker.set_view)
    tasks = [
        asyncio.create_task(follower.run(), name="cluster-view"),
        asyncio.create_task(_watch_meta(broker, broker.gossip, meta_ready, stop)),
        asyncio.create_task(_watch_registry(broker, broker.registry, stop)),
    ]
    broker.registry_client.lane = socket_path(addresses["registry"], REGISTRY_LANE, lanes)
    broker.registry_client.start()
    await asyncio.wait_for(store.connected.wait(), _READY_TIMEOUT)
    await asyncio.wait_for(broker.registry_client.connected.wait(), _READY_TIMEOUT)
    await asyncio.wait_for(meta_ready.wait(), _READY_TIMEOUT)
    peers = await _start_forwarding(broker, settings, index)

    authorizer = _authorizer(config)
    tasks.append(asyncio.create_task(_reload_auth(authorizer, settings.auth_reload_interval, stop)))
    listening: list[Fronts] = []  # once the listeners are open (the status's view)
    admin = create_server()
    common_pb2_grpc.add_AdminServicer_to_server(
        AdminServicer(
            "listener",
            node,
            metrics,
            lambda: {
                "sessions": len(broker.sessions),
                "accepting": broker.accepting,
                "forward": broker.forwarder.details(),
                "traces": sum(len(t) for t in trace.ACTIVE.values()),
                "listening": listening[0].status() if listening else [],
            },
            lambda: broker.accepting,
            functools.partial(_trace, broker),
        ),
        admin,
    )
    admin_addr = processes.admin_address(service_address(config, "listener"), index)
    bind(admin, admin_addr)
    await admin.start()

    slow_auth = settings.passwd_enabled
    hooks = Webhooks.from_config(config)
    notifier = Notifier(hooks)
    broker.offline_hook = notifier.offline_message

    def connection(
        lst: TcpListener,
        limits: SessionLimits,
        gate: ConnectionGate | None,
        peer: str = "",
        identity: str | None = None,
    ) -> Connection:
        return Connection(
            broker,
            lst,
            limits,
            authorizer,
            lm,
            slow_auth,
            gate,
            settings.max_pending_bytes,
            peer,
            identity,
            hooks,
            notifier,
        )

    # Each listener's session limits, taken by each CONNECT as they are then: a
    # ``ternmq-admin set`` of a limit swaps them (``live_settings``), and a listener
    # (re)started later takes the settings of that moment.
    live = live_settings.live()
    live_limits: dict[Key, tuple[TcpListener, list[SessionLimits]]] = {}

    def limits_of(lst: TcpListener) -> list[SessionLimits]:
        current = live.current if live is not None else config
        holder = [SessionLimits.from_config(current, lst.mountpoint, lst.allowed_versions)]
        live_limits[key_of(lst)] = (lst, holder)
        return holder

    reuse_port = settings.reuse_port or settings.processes > 1
    rejected = _rejected(lm)
    # Each listener's connections, one gate per address for the process's life: a
    # connection accepted before a restart is still that listener's.
    gates: dict[Key, ConnectionGate] = {}

    async def open_front(lst: TcpListener) -> Front:
        """One listener's socket, and what each connection on it is served by."""
        limits = limits_of(lst)
        gate = gates.get(key_of(lst))
        if gate is None:
            gate = gates[key_of(lst)] = ConnectionGate()
        gate.limit = lst.max_connections  # as (re)started
        if lst.transport == "tcp":

            def factory(
                lst: TcpListener = lst,
                limits: list[SessionLimits] = limits,
                gate: ConnectionGate = gate,
            ) -> Connection:
                return connection(lst, limits[0], gate)

            front = TcpFront(await _start_tcp(lst, factory, reuse_port))
            started(f"mqtt://{lst.host}:{lst.port}")
            return front

        def mqtt(
            peer: str,
            identity: str | None,
            lst: TcpListener = lst,
            limits: list[SessionLimits] = limits,
            gate: ConnectionGate = gate,
        ) -> Any:
            # a PROXY header, if any, was read before TLS or the HTTP request
            return connection(replace(lst, proxy_protocol=False), limits[0], gate, peer, identity)

        make: Callable[[str, str | None], Any] = mqtt
        if lst.transport in ("ws", "wss"):

            def make(
                peer: str,
                identity: str | None,
                mqtt: Callable[[str, str | None], Any] = mqtt,
            ) -> Any:
                return WsProtocol(mqtt, rejected, False, peer, identity)

        scheme = {"ssl": "mqtts", "ws": "ws", "wss": "wss"}[lst.transport]
        if lst.tls is None:  # ws: the PROXY header, if any, comes before the HTTP request

            def plain(lst: TcpListener = lst, mqtt: Any = mqtt) -> WsProtocol:
                return WsProtocol(mqtt, rejected, lst.proxy_protocol)

            front = TcpFront(await _start_tcp(lst, plain, reuse_port))
            started(f"{scheme}://{lst.host}:{lst.port}{PATH}")
            return front
        ctx = build_context(lst.name, lst.tls, lst.transport)  # OSError: stops start-up
        tls_server = TlsServer(lst, ctx, make, rejected, reuse_port)
        tls_server.start()
        started(f"{scheme}://{lst.host}:{tls_server.port}")
        return tls_server

    def end_sessions(lst: TcpListener) -> int:
        """``listener stop --kill_sessions``: the connections this listener accepted,
        those still waiting for their CONNACK too (they close without one)."""
        gate = gates.get(key_of(lst))
        mine = [c for c in gate.held if isinstance(c, Connection) and not c.closed] if gate else []
        for c in mine:
            c.fail(ReasonCode.ADMINISTRATIVE_ACTION, "listener stopped")
        return len(mine)

    fronts = Fronts(
        [*tcp_listeners(config), *ssl_listeners(config), *ws_listeners(config)],
        open_front,
        end_sessions,
    )
    await fronts.start()
    listening.append(fronts)

    def new_limits(current: Config) -> None:
        for lst, holder in live_limits.values():
            holder[0] = SessionLimits.from_config(current, lst.mountpoint, lst.allowed_versions)
        broker.apply_settings(current)

    if live is not None:
        live.on_change(new_limits)
    # ternmq-admin listener stop|restart|start|delete, from the node's file of them
    listeners_file = fronts_file(str(config["data_dir"]))
    listeners_watch = Watcher(listeners_file, fronts.apply, "listeners.runtime")
    await listeners_watch.check_async()
    listeners_watch.start()
    broker.accepting = True
    if settings.systree_enabled and index == 0:  # one $SYS publisher per node
        own = [_own_samples(metrics)]
        for k in range(1, settings.processes):
            sibling = processes.admin_address(service_address(config, "listener"), k)
            channels[processes.child_name(k)] = chan = channel(sibling)
            own.append(systree.admin_source(processes.child_name(k), chan))
        sources: list[systree.Source] = [systree.summed(own)]
        sources += [
            systree.admin_source(name, chan)
            for name, chan in channels.items()
            if name in ("registry", "gossip", "msgstore")
        ]
        tasks.append(
            asyncio.create_task(
                systree.run(
                    broker.publish_own,
                    broker.next_msg_id,
                    node,
                    settings.systree_interval,
                    sources,
                    stop,
                ),
                name="systree",
            )
        )
    started(admin_addr)

    await stop.wait()

    broker.accepting = False
    listeners_watch.stop()
    await fronts.close()
    await broker.shutdown()
    await notifier.pending.close()
    await hooks.close()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(store.flush(), 5)
    for task in tasks:
        task.cancel()
    await broker.registry_client.stop()
    await broker.forwarder.stop()
    await peers.stop(1)
    await store.stop()
    for lane in (store.calls, broker.meta.lane):
        if lane is not None:
            await lane.close()
    await admin.stop(1)
    for chan in channels.values():
        await chan.close(None)
