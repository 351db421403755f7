"""The node's HTTP endpoints: ``/health``, ``/status``, ``/metrics`` and the admin API.

Served from a thread of ``ternmq start`` (stdlib ``ThreadingHTTPServer``): it is low
traffic, must keep answering while the services restart, and gathers its answers from
the services' Admin RPCs with synchronous gRPC calls and short deadlines — a service
that does not answer shows up as not ready, it does not hang the endpoint.

Admin API (JSON, used by ``ternmq-admin``):
``GET /api/v1/cluster/show``, ``/api/v1/session/show[?client_id=]``,
``/api/v1/retain/show[?topic=&payload=1]``, ``/api/v1/listener/show``, ``/api/v1/webhooks/show``,
``/api/v1/metrics/show``, ``/api/v1/show?key=K&key=…``, ``/api/v1/plugin/show``,
``/api/v1/webhooks/register?hook=&endpoint=[&base64_payload=]`` and
``/api/v1/webhooks/deregister?hook=&endpoint=`` (see ``listener.webhooks.runtime``: the
answer comes once every listener process of the node has applied the change).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import grpc

from services.common.config import Config
from services.common.grpcutil import CHANNEL_OPTIONS, samples_from_pb, service_address
from services.common.metrics import SampleValue, render_prometheus
from services.common.supervisor import ChildStatus
from services.listener.config import ssl_listeners, tcp_listeners, ws_listeners
from services.listener.processes import admin_address, child_name
from services.listener.routing.topics import topic_matches
from services.listener.webhooks import runtime
from services.listener.webhooks.client import endpoints
from services.pb import (
    common_pb2,
    common_pb2_grpc,
    gossip_pb2,
    gossip_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

_RPC_TIMEOUT = 2.0
_APPLY_TIMEOUT = 5.0  # a webhook (de)registration waits this long for the listeners

# The node's child processes by service name, as the supervisor sees them now.
ChildrenStatus = Callable[[], dict[str, ChildStatus]]


class NodeClient:
    """Synchronous gRPC access to the node's services, for the HTTP thread."""

    def __init__(self, config: Config) -> None:
        services = ("listener", "registry", "gossip", "msgstore")
        addresses = {name: service_address(config, name) for name in services}
        for k in range(1, config["listener.processes"]):
            addresses[child_name(k)] = admin_address(addresses["listener"], k)
        self.channels = {
            name: grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
            for name, address in addresses.items()
        }

    def status(self, name: str) -> dict[str, Any]:
        stub = common_pb2_grpc.AdminStub(self.channels[name])
        try:
            reply = stub.Status(common_pb2.StatusRequest(), timeout=_RPC_TIMEOUT)
        except grpc.RpcError as exc:
            return {"ready": False, "error": str(exc.code())}  # type: ignore[attr-defined]
        return {
            "ready": reply.ready,
            "started_us": reply.started_us,
            **json.loads(reply.json or "{}"),
        }

    def samples(self) -> list[SampleValue]:
        out: list[SampleValue] = []
        for name, chan in self.channels.items():
            stub = common_pb2_grpc.AdminStub(chan)
            try:
                reply = stub.Metrics(common_pb2.MetricsRequest(), timeout=_RPC_TIMEOUT)
            except grpc.RpcError:
                continue
            for sample in samples_from_pb(reply):
                sample.labels.setdefault("service", name)
                out.append(sample)
        return out

    def sessions(self, client_id: str, local: bool = False) -> list[dict[str, Any]]:
        """Every member's sessions (``local``: this node's only)."""
        stub = registry_pb2_grpc.RegistryStub(self.channels["registry"])
        reply = stub.Sessions(
            registry_pb2.SessionsRequest(client_id=client_id, limit=10000, local=local),
            timeout=_RPC_TIMEOUT,
        )
        return [
            {
                "client_id": s.key.client_id,
                "mountpoint": s.key.mountpoint,
                "node": s.node,
                "online": s.online,
                "epoch": s.epoch,
                "session_expiry": s.session_expiry,
                "peer": s.peer,
                "user": s.username,
                "protocol": s.proto_ver,
                "persistent": s.persistent,
                "replicas": list(s.replicas),
            }
            for s in reply.sessions
        ]

    def retained(self, topic: str | None, payload: bool) -> list[dict[str, Any]]:
        stub = gossip_pb2_grpc.GossipStub(self.channels["gossip"])
        out = []
        call = stub.Watch(gossip_pb2.WatchRequest(prefixes=["retain"]), timeout=_RPC_TIMEOUT)
        try:
            for event in call:
                for u in event.updates:
                    if u.deleted:
                        continue
                    msg = common_pb2.MqttMessage.FromString(u.value)
                    if topic and not topic_matches(topic, msg.topic):
                        continue
                    row: dict[str, Any] = {
                        "mountpoint": msg.mountpoint,
                        "topic": msg.topic,
                        "qos": msg.qos,
                        "size": len(msg.payload),
                    }
                    if payload:
                        row["payload"] = msg.payload.decode("utf-8", "replace")
                    out.append(row)
                if event.snapshot_done:
                    break
        finally:
            call.cancel()
        return out

    def close(self) -> None:
        for chan in self.channels.values():
            chan.close()


class HttpApi:
    """The endpoints, given the node's configuration, the status of its child processes
    (``children``, asked anew on each request) and when the node started."""

    def __init__(self, config: Config, children: ChildrenStatus, started_at: float) -> None:
        self.config = config
        self.children = children
        self.started_at = started_at
        self.client = NodeClient(config)
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None
        # Runtime webhook registrations last until the node stops (VerneMQ's rule).
        self.webhooks_file = runtime.runtime_path(config)
        self.webhooks_lock = threading.Lock()
        runtime.clear(self.webhooks_file)

    def start(self) -> None:
        address = self.config["listener.http.default"]
        if address == "off":
            return
        host, _, port = address.rpartition(":")
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api.handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                return  # access logs are not events

        self.server = ThreadingHTTPServer((host.strip("[]"), int(port)), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="http", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.client.close()

    # -- routing -------------------------------------------------------------------
    def handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urlsplit(req.path)
        query = parse_qs(url.query)
        routes = {
            "/health": self.health,
            "/status": self.status,
            "/metrics": self.metrics,
            "/api/v1/cluster/show": self.cluster_show,
            "/api/v1/cluster/join": self.cluster_join,
            "/api/v1/cluster/leave": self.cluster_leave,
            "/api/v1/session/show": self.session_show,
            "/api/v1/retain/show": self.retain_show,
            "/api/v1/listener/show": self.listener_show,
            "/api/v1/webhooks/show": self.webhooks_show,
            "/api/v1/webhooks/register": self.webhooks_register,
            "/api/v1/webhooks/deregister": self.webhooks_deregister,
            "/api/v1/metrics/show": self.metrics_show,
            "/api/v1/show": self.show,
            "/api/v1/plugin/show": self.plugin_show,
        }
        route = routes.get(url.path)
        if route is None:
            self._reply(req, HTTPStatus.NOT_FOUND, {"error": f"no such endpoint {url.path}"})
            return
        try:
            status, body = route(query)
        except grpc.RpcError as exc:
            status, body = HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(exc)}
        self._reply(req, status, body)

    @staticmethod
    def _reply(req: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        if isinstance(body, str):
            data = body.encode()
            ctype = "text/plain; version=0.0.4; charset=utf-8"
        else:
            data = json.dumps(body, indent=1, default=str).encode()
            ctype = "application/json"
        req.send_response(status)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    # -- endpoints -------------------------------------------------------------------
    def _ready(self) -> tuple[bool, dict[str, Any]]:
        children = self.children()
        services = {name: self.client.status(name) for name in children}
        ok = all(c["running"] for c in children.values()) and all(
            s.get("ready") for s in services.values()
        )
        return ok, services

    def health(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        ok, services = self._ready()
        body = {
            "status": "OK" if ok else "DOWN",
            "services": {k: bool(v.get("ready")) for k, v in services.items()},
        }
        return (HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE), body

    def status(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        ok, services = self._ready()
        return HTTPStatus.OK, {
            "node": self.config["nodename"],
            "ready": ok,
            "uptime_s": round(time.time() - self.started_at, 1),
            "children": self.children(),
            "services": services,
        }

    def metrics(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        samples = self.client.samples()
        for name, child in self.children().items():
            samples.append(
                SampleValue(
                    "ternmq_service_restarts_total",
                    {"service": name},
                    float(child["restarts"]),
                    "counter",
                    "Times the supervisor restarted a service",
                )
            )
            samples.append(
                SampleValue(
                    "ternmq_service_up",
                    {"service": name},
                    1.0 if child["running"] else 0.0,
                    "gauge",
                    "Whether the service process is running",
                )
            )
        return HTTPStatus.OK, render_prometheus(samples)

    def metrics_show(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        return HTTPStatus.OK, [
            {"name": s.name, "labels": s.labels, "value": s.value, "kind": s.kind}
            for s in self.client.samples()
        ]

    def cluster_show(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        """Every member as this node's gossip service sees it, VerneMQ's columns first."""
        gossip = self.client.status("gossip")
        cluster = gossip.get("cluster")
        if not isinstance(cluster, dict):
            return HTTPStatus.SERVICE_UNAVAILABLE, {"error": "the gossip service does not answer"}
        return HTTPStatus.OK, [
            {
                "node": m["node"],
                "running": m["state"] == "up",
                "state": m["state"],
                "address": m["address"],
                "majority": cluster["majority"],
                "joined": cluster["joined"] if m["node"] == cluster["node"] else None,
            }
            for m in cluster["members"]
        ]

    def cluster_join(self, q: dict[str, list[str]]) -> tuple[int, Any]:
        seed = q.get("discovery-node", [""])[0]
        if not seed:
            return HTTPStatus.BAD_REQUEST, {"error": "discovery-node=HOST:PORT is required"}
        stub = gossip_pb2_grpc.GossipStub(self.client.channels["gossip"])
        reply = stub.JoinCluster(gossip_pb2.JoinClusterRequest(seed=seed), timeout=10)
        if not reply.ok:
            return HTTPStatus.CONFLICT, {"error": reply.reason or "not joined"}
        return HTTPStatus.OK, {"joined": True, "members": list(reply.members)}

    def cluster_leave(self, q: dict[str, list[str]]) -> tuple[int, Any]:
        node = q.get("node", [""])[0]
        if not node:
            return HTTPStatus.BAD_REQUEST, {"error": "node=NODENAME is required"}
        stub = gossip_pb2_grpc.GossipStub(self.client.channels["gossip"])
        reply = stub.LeaveCluster(gossip_pb2.LeaveClusterRequest(node=node), timeout=10)
        if not reply.ok:
            return HTTPStatus.CONFLICT, {"error": reply.reason}
        return HTTPStatus.OK, {"left": node, "members": list(reply.members)}

    def session_show(self, q: dict[str, list[str]]) -> tuple[int, Any]:
        local = q.get("local", ["0"])[0] in ("1", "true", "on")
        return HTTPStatus.OK, self.client.sessions(q.get("client_id", [""])[0], local)

    def retain_show(self, q: dict[str, list[str]]) -> tuple[int, Any]:
        topic = q.get("topic", [None])[0]
        payload = q.get("payload", ["0"])[0] in ("1", "true", "on")
        return HTTPStatus.OK, self.client.retained(topic, payload)

    def listener_show(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        running = self.client.status("listener").get("accepting", False)
        kinds = {"tcp": "mqtt", "ssl": "mqtts", "ws": "mqttws", "wss": "mqttwss"}  # VerneMQ's
        listeners = [
            *tcp_listeners(self.config),
            *ssl_listeners(self.config),
            *ws_listeners(self.config),
        ]
        return HTTPStatus.OK, [
            {
                "type": kinds[lst.transport],
                "name": lst.name,
                "address": lst.host,
                "port": lst.port,
                "mountpoint": lst.mountpoint,
                "status": "running" if running else "stopped",
                "max_conns": lst.max_connections,
                "protocols": ",".join(str(v) for v in sorted(lst.allowed_versions)),
            }
            for lst in listeners
        ]

    def _webhooks(self) -> tuple[int, list[dict[str, Any]]]:
        """The node's webhooks now: the runtime file's, or the configuration's."""
        loaded = runtime.load(self.webhooks_file)
        if loaded is not None:
            return loaded
        return 0, [e.row() for e in endpoints(self.config)]

    def webhooks_show(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        return HTTPStatus.OK, self._webhooks()[1]

    def webhooks_register(self, q: dict[str, list[str]]) -> tuple[int, Any]:
        flag = q.get("base64_payload", ["true"])[0].lower()
        if flag not in ("true", "false", "on", "off"):
            return HTTPStatus.BAD_REQUEST, {"error": f"base64_payload={flag}: true or false"}
        return self._webhooks_change(q, "register", flag in ("true", "on"))

    def webhooks_deregister(self, q: dict[str, list[str]]) -> tuple[int, Any]:
        return self._webhooks_change(q, "deregister", True)

    def _webhooks_change(self, q: dict[str, list[str]], op: str, b64: bool) -> tuple[int, Any]:
        hook, endpoint = q.get("hook", [""])[0], q.get("endpoint", [""])[0]
        if not hook or not endpoint:
            return HTTPStatus.BAD_REQUEST, {"error": "hook=NAME and endpoint=URL are required"}
        with self.webhooks_lock:
            generation, current = self._webhooks()
            changed = runtime.change(current, op, hook, endpoint, b64)
            if isinstance(changed, str):
                known = changed.startswith(("already_registered", "not_found"))
                return (HTTPStatus.CONFLICT if known else HTTPStatus.BAD_REQUEST), {
                    "error": f"can't {op} endpoint: {changed}"
                }
            runtime.save(self.webhooks_file, generation + 1, changed)
            late = self._await_listeners(generation + 1)
        if late:
            return HTTPStatus.GATEWAY_TIMEOUT, {
                "error": f"{op}ed, but not yet applied by {', '.join(late)}"
            }
        return HTTPStatus.OK, {"done": op, "hook": hook, "endpoint": endpoint}

    def _await_listeners(self, generation: int) -> list[str]:
        """The running listener processes that have not applied ``generation`` within
        the timeout (empty when all have)."""
        deadline = time.monotonic() + _APPLY_TIMEOUT
        while True:
            late = []
            for name, child in self.children().items():
                if not name.startswith("listener") or not child["running"] or not child["pid"]:
                    continue
                try:
                    seen = int(runtime.ack_path(self.webhooks_file, child["pid"]).read_text())
                except (OSError, ValueError):
                    seen = 0
                if seen < generation:
                    late.append(name)
            if not late or time.monotonic() > deadline:
                return late
            time.sleep(0.05)

    def show(self, q: dict[str, list[str]]) -> tuple[int, Any]:
        keys = q.get("key", [])
        unknown = [k for k in keys if k not in self.config]
        if unknown:
            return HTTPStatus.NOT_FOUND, {"error": f"unknown keys: {', '.join(unknown)}"}
        return HTTPStatus.OK, {k: self.config[k] for k in keys}

    def plugin_show(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        return HTTPStatus.OK, [
            {"plugin": key.split(".", 1)[1], "enabled": bool(value)}
            for key, value in sorted(self.config.items())
            if key.startswith("plugins.")
        ]
