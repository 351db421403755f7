"""Throughput of the msgstore service as a listener drives it: appends plus their acks.

Starts ``python -m services.msgstore`` in a temporary data_dir (or uses ``--address``),
opens ``--queues`` queues, and runs ``--streams`` Stream RPCs. Each stream keeps up to
``--window`` batches in flight; a batch carries ``--batch`` appends spread over the
queues plus the acks of every append confirmed since the previous batch — the QoS 1
pattern (append before PUBACK, ack on the subscriber's PUBACK). Reports operations
(appends + acks) per second and batch round-trip latency.

    .venv/bin/python bench/msgstore_bench.py --fsync always --duration 10

The client runs in this process with grpc.aio, sharing the machine's cores with the
server; the figure is therefore a lower bound for the store.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.common.config import load  # noqa: E402
from services.common.grpcutil import channel, service_address  # noqa: E402
from services.node.schema import schema  # noqa: E402
from services.pb import common_pb2, common_pb2_grpc, msgstore_pb2, msgstore_pb2_grpc  # noqa: E402


@dataclass
class Totals:
    appends: int = 0
    acks: int = 0
    batches: int = 0
    errors: int = 0
    latency: list[float] = field(default_factory=list)


def start_server(base: Path, fsync: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    conf = base / "ternmq.conf"
    lines = [
        f"data_dir = {base / 'data'}",
        f"log_dir = {base / 'log'}",
        "log.console = off",
        "log.message_events = off",
        f"msgstore.fsync = {fsync}",
        *extra,
    ]
    conf.write_text("\n".join(lines) + "\n")
    address = service_address(load(schema(), conf), "msgstore")
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.msgstore", "--config", str(conf)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return proc, address


async def wait_ready(address: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            async with channel(address) as ch:
                await msgstore_pb2_grpc.MsgStoreStub(ch).Stats(
                    msgstore_pb2.StatsRequest(), timeout=1.0
                )
                return
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.1)
    raise TimeoutError(f"msgstore at {address} not ready after {timeout}s")


def delivery(i: int, payload: bytes) -> common_pb2.Delivery:
    msg = common_pb2.MqttMessage(
        msg_id=f"bench-{i}", topic="bench/topic", payload=payload, qos=1, publisher="pub"
    )
    return common_pb2.Delivery(msg=msg, qos=1)


async def run_stream(
    stub: msgstore_pb2_grpc.MsgStoreStub,
    keys: list[common_pb2.SessionKey],
    args: argparse.Namespace,
    stop_at: float,
    totals: Totals,
) -> None:
    template = delivery(0, os.urandom(args.payload))
    window = asyncio.Semaphore(args.window)
    to_ack: dict[int, list[int]] = {}
    sent: dict[int, tuple[float, list[int]]] = {}
    counter = 0

    async def requests() -> AsyncIterator[msgstore_pb2.StoreBatch]:
        nonlocal counter
        batch_id = 0
        while time.monotonic() < stop_at:
            await window.acquire()
            batch = msgstore_pb2.StoreBatch(batch_id=batch_id)
            targets = []
            for _ in range(args.batch):
                q = counter % len(keys)
                counter += 1
                targets.append(q)
                append = batch.appends.add(key=keys[q], epoch=1, delivery=template)
                append.delivery.msg.msg_id = f"bench-{counter}"
            for q, seqs in to_ack.items():
                batch.acks.add(key=keys[q], epoch=1, seqs=seqs)
                totals.acks += len(seqs)
            to_ack.clear()
            sent[batch_id] = (time.monotonic(), targets)
            batch_id += 1
            yield batch

    async for result in stub.Stream(requests()):
        started, targets = sent.pop(result.batch_id)
        totals.latency.append(time.monotonic() - started)
        totals.batches += 1
        for q, status, seq in zip(targets, result.statuses, result.seqs, strict=True):
            if status == msgstore_pb2.APPEND_OK:
                totals.appends += 1
                to_ack.setdefault(q, []).append(seq)
            else:
                totals.errors += 1
        window.release()


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process (Linux /proc), 0 when unknown."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def bench(args: argparse.Namespace, address: str, pid: int | None = None) -> Totals:
    await wait_ready(address)
    totals = Totals()
    cpu_start = time.process_time()
    server_cpu_start = cpu_seconds(pid)
    async with channel(address) as ch:
        stub = msgstore_pb2_grpc.MsgStoreStub(ch)
        keys = [
            common_pb2.SessionKey(mountpoint="", client_id=f"bench-{i}") for i in range(args.queues)
        ]
        for key in keys:
            await stub.Open(msgstore_pb2.OpenRequest(key=key, epoch=1, create=True, clean=True))
        per_stream = [keys[i :: args.streams] for i in range(args.streams)]
        # warm up, then measure
        start = time.monotonic()
        stop_at = start + args.duration
        await asyncio.gather(*(run_stream(stub, ks, args, stop_at, totals) for ks in per_stream))
        elapsed = time.monotonic() - start
        stats = await stub.Stats(msgstore_pb2.StatsRequest())
        reply = await common_pb2_grpc.AdminStub(ch).Metrics(common_pb2.MetricsRequest())
        m = {s.name.removeprefix("ternmq_msgstore_"): s.value for s in reply.samples}
    client_cpu = time.process_time() - cpu_start
    server_cpu = cpu_seconds(pid) - server_cpu_start
    ops = totals.appends + totals.acks
    lat = sorted(totals.latency) or [0.0]
    print(
        f"fsync={args.fsync} streams={args.streams} batch={args.batch} window={args.window} "
        f"queues={args.queues} payload={args.payload}B duration={elapsed:.1f}s\n"
        f"  appends/s {totals.appends / elapsed:10.0f}\n"
        f"  acks/s    {totals.acks / elapsed:10.0f}\n"
        f"  ops/s     {ops / elapsed:10.0f}   (appends + acks)\n"
        f"  batch rtt p50 {lat[len(lat) // 2] * 1e3:.1f} ms"
        f"  p99 {lat[int(len(lat) * 0.99)] * 1e3:.1f} ms"
        f"  errors {totals.errors}  left in store {stats.entries}\n"
        f"  client cpu {client_cpu / elapsed:.0%} of one core\n"
        f"  server: {m['commits_total']:.0f} group commits, "
        f"{m['writes_total'] / max(1, m['commits_total']):.0f} ops/commit, "
        f"commit {m['commit_seconds_sum'] / max(1, m['commits_total']) * 1e3:.2f} ms, "
        f"fsync {m['fsync_seconds_sum'] / max(1, m['fsync_seconds_count']) * 1e3:.2f} ms "
        f"(max {m['fsync_seconds_max'] * 1e3:.1f} ms)"
    )
    if pid is not None and ops:
        print(
            f"  server cpu {server_cpu / elapsed:.0%} of one core, "
            f"{server_cpu / ops * 1e6:.1f} us per op -> {ops / server_cpu:,.0f} ops/s per "
            f"core of server CPU (load average now {os.getloadavg()[0]:.1f} on "
            f"{os.cpu_count()} cores)"
        )
    return totals


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", help="use a running msgstore instead of starting one")
    p.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--batch", type=int, default=100, help="appends per batch")
    p.add_argument("--window", type=int, default=8, help="batches in flight per stream")
    p.add_argument("--queues", type=int, default=200)
    p.add_argument("--payload", type=int, default=100)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    if args.address:
        asyncio.run(bench(args, args.address))
        return
    with tempfile.TemporaryDirectory(prefix="msgstore-bench-") as tmp:
        extra = [item.replace("=", " = ", 1) for item in args.set]
        proc, address = start_server(Path(tmp), args.fsync, extra)
        try:
            asyncio.run(bench(args, address, proc.pid))
        finally:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.returncode not in (0, -signal.SIGKILL):
                assert proc.stderr is not None
                print(proc.stderr.read().decode(errors="replace"), file=sys.stderr)


if __name__ == "__main__":
    main()
