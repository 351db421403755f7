"""gRPC plumbing shared by every service: addresses, servers, channels, the Admin servicer.

Addresses set to ``auto`` become unix sockets under ``data_dir/run/`` — no port to
collide with when several nodes or test runs share a machine, and faster than TCP.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc

from services.common import log
from services.common.config import Config
from services.common.framed import LaneError
from services.common.metrics import MetricsRegistry, SampleValue
from services.pb import common_pb2, common_pb2_grpc

SERVICES = ("listener", "registry", "gossip", "msgstore")

# Keepalives detect a dead peer on a quiet long-lived stream; large messages carry batches.
CHANNEL_OPTIONS: Sequence[tuple[str, Any]] = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.enable_retries", 0),
    # a sibling service restarted by the supervisor is back within a second or two;
    # gRPC's default backoff (up to 2 minutes) would leave us disconnected far longer
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
SERVER_OPTIONS: Sequence[tuple[str, Any]] = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
)


def service_address(config: Config, service: str) -> str:
    """The gRPC address of ``service`` on this node, resolving ``auto``."""
    key = "listener.admin_address" if service == "listener" else f"{service}.address"
    value: str = config[key]
    if value == "auto":
        run_dir = Path(config["data_dir"]).resolve() / "run"
        path = run_dir / f"{service}.sock"
        # sun_path is limited to 107 bytes; fall back to a short path under /tmp.
        if len(str(path)) > 100:
            # hash() is salted per process: every service must derive the same path
            digest = hashlib.sha256(str(run_dir).encode()).hexdigest()[:16]
            path = Path(f"/tmp/ternmq-{digest}") / f"{service}.sock"
        return f"unix:{path}"
    return value


def prepare_bind(address: str) -> None:
    """Make the socket directory and remove a stale socket file left by a killed process."""
    if address.startswith("unix:"):
        path = Path(address[5:])
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.unlink()


def create_server() -> grpc.aio.Server:
    return grpc.aio.server(options=SERVER_OPTIONS)


def bind(server: grpc.aio.Server, address: str) -> int:
    prepare_bind(address)
    port = server.add_insecure_port(address)
    if port == 0 and not address.startswith("unix:"):
        raise OSError(f"cannot bind gRPC address {address}")
    return int(port)


def channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


class AdminServicer(common_pb2_grpc.AdminServicer):  # type: ignore[misc]
    """Status and metrics of one service, for the node's HTTP endpoints."""

    def __init__(
        self,
        service: str,
        node: str,
        metrics: MetricsRegistry,
        details: Callable[[], dict[str, Any]],
        ready: Callable[[], bool],
        trace: Callable[[common_pb2.TraceRequest, Any], AsyncIterator[common_pb2.TraceLine]]
        | None = None,
    ) -> None:
        self.trace = trace  # a listener's ``trace client`` (the others have none)
        self.service = service
        self.node = node
        self.metrics = metrics
        self.details = details
        self.ready = ready
        self.started_us = int(time.time() * 1e6)

    async def Status(
        self, request: common_pb2.StatusRequest, context: Any
    ) -> common_pb2.StatusReply:
        return common_pb2.StatusReply(
            service=self.service,
            node=self.node,
            ready=self.ready(),
            started_us=self.started_us,
            json=json.dumps(self.details(), default=str),
        )

    async def Metrics(
        self, request: common_pb2.MetricsRequest, context: Any
    ) -> common_pb2.MetricsReply:
        reply = common_pb2.MetricsReply()
        for s in self.metrics.samples():
            reply.samples.add(name=s.name, labels=s.labels, value=s.value, kind=s.kind, help=s.help)
        return reply

    async def Trace(
        self, request: common_pb2.TraceRequest, context: Any
    ) -> AsyncIterator[common_pb2.TraceLine]:
        if self.trace is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{self.service} does not trace")
            return
        async for line in self.trace(request, context):
            yield line


def samples_from_pb(reply: common_pb2.MetricsReply) -> list[SampleValue]:
    """A service's samples as its ``Admin.Metrics`` sent them (the reverse of the above)."""
    return [SampleValue(s.name, dict(s.labels), s.value, s.kind, s.help) for s in reply.samples]


CallFailed = (grpc.aio.AioRpcError, LaneError)
"""What a call to a sibling service raises when it fails, over gRPC or a local lane."""


def status_of(exc: grpc.aio.AioRpcError | LaneError) -> tuple[str, str]:
    """A failed call's status code name and details, whichever transport carried it."""
    if isinstance(exc, LaneError):
        return exc.code, exc.details
    return exc.code().name, exc.details() or ""


def rpc_failed(
    target: str, method: str, exc: grpc.aio.AioRpcError | LaneError, level: str = "warning"
) -> None:
    """Log a failed call to a sibling service as the catalogue's ``rpc.failed``."""
    code, details = status_of(exc)
    rpc_failed_as(target, method, code, details, level)


def rpc_failed_as(target: str, method: str, code: str, reason: str, level: str = "warning") -> None:
    """:func:`rpc_failed` for failures that are not an ``AioRpcError`` (a refused write,
    a stream that ended, a deadline of our own)."""
    log.emit("rpc.failed", level, target=target, method=method, code=code, reason=reason)


class Pacer:
    """When the next batch may leave a long-lived stream: at once when the stream is idle,
    gathered while it is busy. Used on both sides of ``Registry.Connections``.

    Idle (the last batch carried no more than ``LONE`` ops): a batch leaves at once when
    none is in flight, and what arrives while one is gathers until it is answered. A
    client that connects alone has at most its CONNECT and its previous connection's end
    on the stream, so it never waits for a timer. Busy (the last batch carried more): a
    connect storm. Batches leave ``window`` apart, answered or not, as many in flight as
    that makes: a stream message costs each side about 0.3 ms of CPU however few ops it
    carries (``bench/rpc_cost.py``), and a round trip alone gathers only a few ops of a
    storm, while waiting for answers as well would hold 200 handshakes in parallel to
    the other side's round trip when it is slower than the window.

    Pure bookkeeping: the sender asks :meth:`delay` with the time, and waits for an answer
    (None) or sleeps (> 0). Worked example (window 5 ms): op a arrives at an idle stream
    and leaves at once; b and c arrive before a is answered and gather; the answer comes
    and [b, c] leaves with it (two ops: still idle). A storm's batch of 30 leaves at t;
    the next leaves at t + 5 ms.
    """

    LONE = 2

    __slots__ = ("_inflight", "_last_ops", "_last_sent", "max_inflight", "window")

    def __init__(self, window: float, max_inflight: int = 1) -> None:
        self.window = window
        self.max_inflight = max(1, max_inflight)
        self._inflight = 0
        self._last_sent = 0.0
        self._last_ops = 0

    @property
    def inflight(self) -> int:
        return self._inflight

    def delay(self, now: float) -> float | None:
        """How long the next batch gathers: None until an answer comes, else seconds
        (0: it leaves now)."""
        if self._last_ops > self.LONE:
            return max(0.0, self._last_sent + self.window - now)
        if self._inflight >= self.max_inflight:
            return None
        return 0.0

    def sent(self, ops: int, now: float) -> None:
        self._inflight += 1
        self._last_sent = now
        self._last_ops = ops

    def answered(self, batches: int = 1) -> None:
        """The other side answered ``batches`` of the batches in flight. One answer may
        stand for several (read while the previous answer was being written) or for none
        (late results only): counting answers instead of receipts would leave batches in
        flight forever, and an idle stream waiting for an answer that never comes. More
        receipts than batches in flight (an answer from before a restart) are not banked."""
        self._inflight = max(0, self._inflight - batches)
