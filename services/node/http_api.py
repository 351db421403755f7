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

import functools
import json
import queue
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import grpc

from services.common import live_settings, log
from services.common.config import Config
from services.common.grpcutil import CHANNEL_OPTIONS, samples_from_pb, service_address
from services.common.metrics import SampleValue, render_prometheus
from services.common.runtime_file import RuntimeFile
from services.common.supervisor import ChildStatus
from services.listener import fronts
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
_APPLY_TIMEOUT = 5.0  # a run-time change waits this long for the processes to apply it
SERVICES = ("listener", "registry", "gossip", "msgstore")  # each watches the settings
ADMINS = "admins"  # gossip prefix: node name -> its admin API's HTTP address

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

    def put_admin_address(self, node: str, address: str) -> None:
        stub = gossip_pb2_grpc.GossipStub(self.channels["gossip"])
        op = gossip_pb2.MetaOp(prefix=ADMINS, key=node.encode(), value=address.encode())
        stub.Put(gossip_pb2.PutRequest(ops=[op]), timeout=_RPC_TIMEOUT)

    def admin_address(self, node: str) -> str:
        """Where ``node``'s admin API listens, as it told gossip ("" if it has not)."""
        stub = gossip_pb2_grpc.GossipStub(self.channels["gossip"])
        reply = stub.Get(
            gossip_pb2.GetRequest(prefix=ADMINS, key=node.encode()), timeout=_RPC_TIMEOUT
        )
        return reply.value.decode() if reply.found else ""

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
        # Runtime webhook registrations and settings last until the node stops (VerneMQ's
        # rule).
        self.webhooks_file = runtime.runtime_file(config)
        self.webhooks_lock = threading.Lock()
        self.webhooks_file.clear()
        self.settings_file = live_settings.runtime_file(str(config["data_dir"]))
        self.settings_lock = threading.Lock()
        self.settings_file.clear()
        self.listeners_file = fronts.fronts_file(str(config["data_dir"]))
        self.listeners_lock = threading.Lock()
        self.listeners_file.clear()
        self._announced = threading.Event()

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
        threading.Thread(target=self.announce, name="http-announce", daemon=True).start()

    def stop(self) -> None:
        self._announced.set()  # ends ``announce`` if it still waits for gossip
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        self.client.close()

    # -- routing -------------------------------------------------------------------
    def handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urlsplit(req.path)
        query = parse_qs(url.query)
        routes: dict[str, Callable[[dict[str, list[str]]], tuple[int, Any]]] = {
            "/health": self.health,
            "/status": self.status,
            "/metrics": self.metrics,
            "/api/v1/cluster/show": self.cluster_show,
            "/api/v1/cluster/join": self.cluster_join,
            "/api/v1/cluster/leave": self.cluster_leave,
            "/api/v1/session/show": self.session_show,
            "/api/v1/retain/show": self.retain_show,
            "/api/v1/listener/show": self.listener_show,
            "/api/v1/listener/stop": functools.partial(self.listener_change, "stop"),
            "/api/v1/listener/restart": functools.partial(self.listener_change, "restart"),
            "/api/v1/listener/start": functools.partial(self.listener_change, "start"),
            "/api/v1/listener/delete": functools.partial(self.listener_change, "delete"),
            "/api/v1/webhooks/show": self.webhooks_show,
            "/api/v1/webhooks/register": self.webhooks_register,
            "/api/v1/webhooks/deregister": self.webhooks_deregister,
            "/api/v1/metrics/show": self.metrics_show,
            "/api/v1/show": self.show,
            "/api/v1/set": self.set_values,
            "/api/v1/plugin/show": self.plugin_show,
        }
        if url.path == "/api/v1/trace/client":
            self.trace_client(req, query)  # a stream of lines, not one answer
            return
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

    # -- ternmq-admin trace client ------------------------------------------------
    def trace_client(self, req: BaseHTTPRequestHandler, q: dict[str, list[str]]) -> None:
        """Every listener process's trace lines about one client id, as they come, for
        ``seconds`` (0: until the caller goes away, at most a day)."""
        client_id = q.get("client_id", [""])[0]
        try:
            numbers = {k: int(q.get(k, [str(d)])[0]) for k, d in _TRACE_DEFAULTS.items()}
            if min(numbers.values()) < 0 or numbers["rate_max"] < 1:
                raise ValueError("a negative value, or rate_max below 1")
        except ValueError as exc:
            self._reply(req, HTTPStatus.BAD_REQUEST, {"error": f"bad trace option: {exc}"})
            return
        if not client_id:
            self._reply(req, HTTPStatus.BAD_REQUEST, {"error": "client_id is required"})
            return
        seconds = numbers["seconds"] or _TRACE_MAX_S
        request = common_pb2.TraceRequest(
            mountpoint=q.get("mountpoint", [""])[0],
            client_id=client_id,
            rate_max=numbers["rate_max"],
            rate_interval_ms=numbers["rate_interval_ms"],
            payload_limit=numbers["payload_limit"],
            seconds=min(seconds, _TRACE_MAX_S),
        )
        lines: queue.Queue[str | None] = queue.Queue()
        calls = [
            common_pb2_grpc.AdminStub(self.client.channels[name]).Trace(
                request, timeout=request.seconds + _RPC_TIMEOUT
            )
            for name, child in self.children().items()
            if name.startswith("listener") and child["running"]
        ]
        for call in calls:
            threading.Thread(target=_drain, args=(call, lines), daemon=True).start()
        req.send_response(HTTPStatus.OK)
        req.send_header("Content-Type", "text/plain; charset=utf-8")
        req.end_headers()
        open_calls = len(calls)
        try:
            _write_line(req, f'Tracing client "{client_id}" on {self.config["nodename"]}')
            while open_calls:
                try:
                    line = lines.get(timeout=1.0)
                except queue.Empty:
                    if _gone(req):
                        return
                    continue
                if line is None:
                    open_calls -= 1
                    continue
                _write_line(req, line)
            _write_line(req, f'Trace session for client "{client_id}" stopped')
        except OSError:
            return  # the caller went away
        finally:
            for call in calls:
                call.cancel()

    def _listeners(self) -> tuple[int, list[dict[str, Any]]]:
        """The node's listeners now: the runtime file's rows, or the configuration's."""
        loaded = self.listeners_file.load()
        if loaded is not None:
            return loaded[0], list(loaded[1])
        configured = [
            *tcp_listeners(self.config),
            *ssl_listeners(self.config),
            *ws_listeners(self.config),
        ]
        return 0, [fronts.row_of(lst) for lst in configured]

    def _listening(self) -> set[str] | None:
        """What every running listener process listens on (None: one did not answer)."""
        out: set[str] | None = None
        for name, child in self.children().items():
            if not name.startswith("listener") or not child["running"]:
                continue
            status = self.client.status(name)
            if not status.get("ready"):
                return None
            seen = set(status.get("listening", []))
            out = seen if out is None else out & seen
        return out

    def listener_show(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        listening = self._listening()
        rows = []
        for row in self._listeners()[1]:
            address = f"{row['type']}://{row['address']}:{row['port']}"
            status = row["status"]
            if status == "running" and listening is not None and address not in listening:
                status = "failed"  # wanted, but a process could not listen (listener.changed)
            rows.append({**{k: v for k, v in row.items() if k != "kill"}, "status": status})
        return HTTPStatus.OK, rows

    def listener_change(self, op: str, q: dict[str, list[str]]) -> tuple[int, Any]:
        """``listener stop|restart|start|delete address=.. port=..``: every listener
        process of the node has applied it when this answers."""
        args = {k: v[0] for k, v in q.items()}
        with self.listeners_lock:
            generation, current = self._listeners()
            changed = fronts.change(current, op, args)
            if isinstance(changed, str):
                return HTTPStatus.BAD_REQUEST, {"error": f"can't {op} listener: {changed}"}
            self.listeners_file.save(generation + 1, changed)
            late = self._await_applied(self.listeners_file, generation + 1, ("listener",))
        if late:
            return HTTPStatus.GATEWAY_TIMEOUT, {
                "error": f"{op}: not yet applied by {', '.join(late)}"
            }
        address = f"{args['address']}:{args['port']}"
        listening = self._listening() or set()
        for row in changed:
            if f"{row['address']}:{row['port']}" != address or row["status"] != "running":
                continue
            if f"{row['type']}://{address}" not in listening:
                why = "its listener.changed event says why"
                return HTTPStatus.INTERNAL_SERVER_ERROR, {
                    "error": f"{op}: not listening on {address} ({why})"
                }
        return HTTPStatus.OK, {"done": op, "listener": address}

    def _webhooks(self) -> tuple[int, list[dict[str, Any]]]:
        """The node's webhooks now: the runtime file's, or the configuration's."""
        loaded = self.webhooks_file.load()
        if loaded is not None:
            return loaded[0], list(loaded[1])
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
            self.webhooks_file.save(generation + 1, changed)
            late = self._await_applied(self.webhooks_file, generation + 1, ("listener",))
        if late:
            return HTTPStatus.GATEWAY_TIMEOUT, {
                "error": f"{op}ed, but not yet applied by {', '.join(late)}"
            }
        return HTTPStatus.OK, {"done": op, "hook": hook, "endpoint": endpoint}

    def _await_applied(
        self, file: RuntimeFile, generation: int, services: tuple[str, ...]
    ) -> list[str]:
        """The running processes of ``services`` that have not applied ``generation`` of
        ``file`` within the timeout (empty when all have)."""
        deadline = time.monotonic() + _APPLY_TIMEOUT
        while True:
            late = [
                name
                for name, child in self.children().items()
                if name.startswith(services)
                and child["running"]
                and child["pid"]
                and file.applied(child["pid"]) < generation
            ]
            if not late or time.monotonic() > deadline:
                return late
            time.sleep(0.05)

    # -- ternmq-admin set / show ---------------------------------------------------
    def _settings(self) -> tuple[int, dict[str, str]]:
        loaded = self.settings_file.load()
        return (loaded[0], dict(loaded[1])) if loaded is not None else (0, {})

    def _current(self) -> Config:
        """The configuration as the node runs it: the file's, with the values set since."""
        return self.config.with_overrides(self._settings()[1])

    def set_values(self, q: dict[str, list[str]]) -> tuple[int, Any]:
        """``set=KEY=VALUE`` (repeated) on this node; with ``all=1`` on every member of
        its cluster as well (each answers for itself: ``nodes``)."""
        pairs = q.get("set", [])
        if not pairs:
            return HTTPStatus.BAD_REQUEST, {"error": "KEY=VALUE is required"}
        with self.settings_lock:
            generation, current = self._settings()
            changed = live_settings.change(self.config, current, pairs)
            if isinstance(changed, str):
                return HTTPStatus.BAD_REQUEST, {"error": changed}
            self.settings_file.save(generation + 1, changed)
            applied = self.config.with_overrides(changed)
            log.set_level(str(applied["log.level"]))  # this process logs too
            late = self._await_applied(self.settings_file, generation + 1, SERVICES)
        keys = list(dict.fromkeys(p.partition("=")[0].strip() for p in pairs))
        body: dict[str, Any] = {"node": self.config["nodename"]}
        body["values"] = {k: applied[k] for k in keys}
        status = HTTPStatus.OK
        if late:
            status = HTTPStatus.GATEWAY_TIMEOUT
            body["error"] = f"set, but not yet applied by {', '.join(late)}"
        if q.get("all", ["0"])[0] in ("1", "true", "on"):
            body["nodes"] = self._set_elsewhere(pairs)
            failed = {n: v for n, v in body["nodes"].items() if v != "ok"}
            if failed:
                status = HTTPStatus.BAD_GATEWAY
                body["error"] = "; ".join(
                    [
                        *([body["error"]] if "error" in body else []),
                        *(f"{n}: {v}" for n, v in failed.items()),
                    ]
                )
        return status, body

    def _set_elsewhere(self, pairs: list[str]) -> dict[str, str]:
        """Each other member's answer to the same ``set``: "ok", or why not."""
        answers = self._elsewhere("/api/v1/set", [("set", p) for p in pairs])
        return {node: "ok" if ok else f"not set: {body}" for node, (ok, body) in answers.items()}

    def _elsewhere(self, path: str, query: list[tuple[str, str]]) -> dict[str, tuple[bool, Any]]:
        """Each other member's answer to ``path``: (True, its JSON) or (False, why not)."""
        gossip = self.client.status("gossip").get("cluster")
        if not isinstance(gossip, dict):
            return {"?": (False, "the gossip service does not answer")}
        out: dict[str, tuple[bool, Any]] = {}
        for member in gossip["members"]:
            node = member["node"]
            if node == self.config["nodename"]:
                continue
            if member["state"] != "up":
                out[node] = (False, member["state"])
                continue
            address = self.client.admin_address(node)
            if not address:
                out[node] = (False, "its HTTP address is not known (listener.http.default)")
                continue
            out[node] = _remote_get(address, path, query)
        return out

    def announce(self) -> None:
        """Tell the cluster where this node's admin API listens (gossip prefix
        ``admins``), once its gossip service answers: ``set --all`` finds it there."""
        address = self.config["listener.http.default"]
        if address == "off":
            return
        reachable = advertised(str(address), str(self.config["nodename"]))
        while not self._announced.is_set():
            try:
                self.client.put_admin_address(str(self.config["nodename"]), reachable)
                self._announced.set()
            except grpc.RpcError:
                self._announced.wait(0.5)

    def show(self, q: dict[str, list[str]]) -> tuple[int, Any]:
        """``key=K`` (repeated): the values this node runs with; with ``all=1``, one row
        per member, each as that node tells it (``vmq-admin show ... --all``)."""
        keys = q.get("key", [])
        unknown = [k for k in keys if k not in self.config]
        if unknown:
            return HTTPStatus.NOT_FOUND, {"error": f"unknown keys: {', '.join(unknown)}"}
        current = self._current()
        here = {k: current[k] for k in keys}
        if q.get("all", ["0"])[0] not in ("1", "true", "on"):
            return HTTPStatus.OK, here
        rows = [{"node": self.config["nodename"], **here}]
        for node, (ok, body) in sorted(
            self._elsewhere("/api/v1/show", [("key", k) for k in keys]).items()
        ):
            rows.append({"node": node, **body} if ok else {"node": node, "error": body})
        return HTTPStatus.OK, rows

    def plugin_show(self, _q: dict[str, list[str]]) -> tuple[int, Any]:
        return HTTPStatus.OK, [
            {"plugin": key.split(".", 1)[1], "enabled": bool(value)}
            for key, value in sorted(self.config.items())
            if key.startswith("plugins.")
        ]


def advertised(address: str, nodename: str) -> str:
    """Where other nodes reach an admin API bound to ``address``: a wildcard host
    (0.0.0.0, ::) is replaced by the host of the node's name (``name@host``)."""
    host, _, port = address.rpartition(":")
    if host.strip("[]") in ("", "0.0.0.0", "::"):
        node_host = nodename.partition("@")[2] or "127.0.0.1"
        host = f"[{node_host}]" if ":" in node_host else node_host
    return f"{host}:{port}"


def _remote_get(address: str, path: str, query: list[tuple[str, str]]) -> tuple[bool, Any]:
    """Another node's admin API: (True, its JSON) or (False, its error)."""
    url = f"http://{address}{path}?" + urlencode(query)
    try:
        with urllib.request.urlopen(url, timeout=_APPLY_TIMEOUT + 5) as resp:
            return True, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            return False, str(json.loads(exc.read()).get("error", exc.reason))
        except ValueError:
            return False, str(exc.reason)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, f"unreachable: {exc}"


_TRACE_DEFAULTS = {"rate_max": 10, "rate_interval_ms": 100, "payload_limit": 200, "seconds": 0}
_TRACE_MAX_S = 86_400


def _drain(call: Any, lines: queue.Queue[str | None]) -> None:
    """One listener process's trace lines into ``lines``; None when its stream ends."""
    try:
        for line in call:
            lines.put(line.text)
    except grpc.RpcError as exc:
        if exc.code() not in (grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED):
            lines.put(f"(a listener process stopped tracing: {exc.code().name})")
    finally:
        lines.put(None)


def _write_line(req: BaseHTTPRequestHandler, line: str) -> None:
    req.wfile.write(line.encode("utf-8", errors="replace") + b"\n")
    req.wfile.flush()


def _gone(req: BaseHTTPRequestHandler) -> bool:
    """Whether the caller closed its end (a trace with nothing to write would not know)."""
    sock = req.connection
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return bool(sock.recv(1, socket.MSG_PEEK) == b"")
    except OSError:
        return True
