"""Metadata convergence on a 3-node dev cluster: how soon a burst of subscriptions made
on node 1 is known on nodes 2 and 3, by broadcast, and after node 3 missed it.

For each round: start a dev cluster, then
* **burst**: N persistent clients connect to node 1 and subscribe (one filter each) as
  fast as they can; time from the last SUBACK until nodes 2 and 3 both hold every
  record (gossip's key count, polled every 5 ms);
* **missed**: SIGSTOP node 3 (a pause: it hears nothing), wait until the others see it
  down, make N more subscriptions on node 1, SIGCONT node 3; time from the SIGCONT until
  node 3 holds every record (anti-entropy, as after a healed partition).

Usage: ``python -m bench.cluster_converge --base-dir /tmp/cc --subs 1000 --rounds 3``
prints one JSON line per round and a summary. Loopback only, on the dev cluster's fixed
ports (DESIGN §3).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import struct
import sys
import time
from pathlib import Path

import grpc

from bench.cluster_detect import run_rounds, states, time_until
from services.common.config import load
from services.common.grpcutil import service_address
from services.node import dev_cluster as dc
from services.node.schema import schema
from services.pb import common_pb2, common_pb2_grpc

CONCURRENCY = 50


def _utf8(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!H", len(b)) + b


def _packet(first: int, body: bytes) -> bytes:
    out, n = bytearray([first]), len(body)
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out) + body


async def _subscribe(port: int, client_id: str, topic: str) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    connect = _utf8("MQTT") + bytes([4, 0x00, 0, 60]) + _utf8(client_id)  # clean 0
    subscribe = struct.pack("!H", 1) + _utf8(topic) + b"\x01"
    writer.write(_packet(0x10, connect) + _packet(0x82, subscribe))
    await writer.drain()
    connack = await reader.readexactly(4)
    if connack[3] != 0:
        raise SystemExit(f"cluster_converge: CONNACK {connack[3]} for {client_id}")
    suback = await reader.readexactly(5)
    if suback[0] != 0x90 or suback[4] > 2:
        raise SystemExit(f"cluster_converge: SUBACK {suback!r} for {client_id}")
    writer.write(b"\xe0\x00")  # DISCONNECT: the session stays (clean 0)
    writer.close()


async def _burst(port: int, prefix: str, n: int) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        async with gate:
            await _subscribe(port, f"{prefix}{i}", f"conv/{prefix}{i}")

    await asyncio.gather(*(one(i) for i in range(n)))


def _gossip_subs(node: dc.DevNode) -> int:
    address = service_address(load(schema(), str(node.conf), {}), "gossip")
    with grpc.insecure_channel(address) as ch:
        reply = common_pb2_grpc.AdminStub(ch).Status(common_pb2.StatusRequest(), timeout=2)
    return int(json.loads(reply.json)["keys"]["subs"])


def _subs(node: dc.DevNode) -> int:
    try:
        return _gossip_subs(node)
    except grpc.RpcError:
        return -1


def one_round(base: Path, n: int) -> dict[str, float]:
    nodes = dc.nodes(base, 3)
    problem = dc.start(base, 3, {})
    if problem:
        raise SystemExit(f"cluster_converge: {problem}")
    try:
        n1, n2, n3 = nodes
        before = _subs(n1)
        asyncio.run(_burst(n1.mqtt_port, "b", n))
        want = before + n
        burst_s = time_until(lambda: _subs(n2) >= want and _subs(n3) >= want, "burst")
        pid = dc.running_pid(n3)
        assert pid is not None
        os.killpg(pid, signal.SIGSTOP)
        try:
            time_until(lambda: states(n1.http_port).get(n3.name) == "down", "n3 down")
            asyncio.run(_burst(n1.mqtt_port, "m", n))
            want += n
        finally:
            os.killpg(pid, signal.SIGCONT)
        resumed = time.monotonic()
        time_until(lambda: _subs(n3) >= want, "catch-up")
        missed_s = time.monotonic() - resumed
        return {"burst_s": burst_s, "missed_s": missed_s}
    finally:
        dc.stop(base)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-dir", required=True, type=Path)
    ap.add_argument("--subs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ns = ap.parse_args()
    run_rounds(ns.rounds, lambda i: one_round(ns.base_dir / f"round{i}", ns.subs), subs=ns.subs)
    sys.exit(0)


if __name__ == "__main__":
    main()
