"""Sequential connect latency: one client at a time, as a shell loop of mosquitto_pub does.

Each cycle opens a TCP connection, sends CONNECT (MQTT 3.1.1), reads the CONNACK and, with
``--publish``, sends one QoS 1 PUBLISH and reads its PUBACK, then DISCONNECT and close.
Nothing overlaps, so batching cannot hide latency: this is what a PHP script, a serverless
function or a flaky device reconnecting all day feels.

Prints one JSON line: p50/p90/p99/max of CONNECT -> CONNACK (and of the whole cycle) in
microseconds, cycles per second, and the count of failures (a refused CONNACK or a closed
socket counts; the run goes on).

    python bench/connect_latency.py --port 1883 --count 2000 [--clean 0] [--publish]

``bench/connect_latency.sh`` runs it against Mosquitto and a fresh ternmq node, for each cycle.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time


def _str(s: bytes) -> bytes:
    return len(s).to_bytes(2, "big") + s


def _packet(first: int, body: bytes) -> bytes:
    out = bytearray([first])
    n = len(body)
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            break
    return bytes(out) + body


def connect_frame(client_id: str, clean: bool) -> bytes:
    flags = 0x02 if clean else 0x00
    body = _str(b"MQTT") + bytes([4, flags]) + (60).to_bytes(2, "big") + _str(client_id.encode())
    return _packet(0x10, body)


def publish_frame(topic: str, packet_id: int, payload: bytes) -> bytes:
    return _packet(0x32, _str(topic.encode()) + packet_id.to_bytes(2, "big") + payload)


DISCONNECT = b"\xe0\x00"


def read_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed by the broker")
        buf += chunk
    return buf


def cycle(host: str, port: int, client_id: str, clean: bool, publish: bool) -> tuple[float, float]:
    """One cycle; returns (connect_s, whole_s)."""
    start = time.perf_counter()
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(connect_frame(client_id, clean))
        connack = read_exact(sock, 4)
        connected = time.perf_counter()
        if connack[0] != 0x20 or connack[3] != 0:
            raise ConnectionError(f"CONNACK refused: {connack.hex()}")
        if publish:
            sock.sendall(publish_frame("bench/seq", 1, b"x" * 32))
            puback = read_exact(sock, 4)
            if puback[0] != 0x40:
                raise ConnectionError(f"expected PUBACK, got {puback.hex()}")
        sock.sendall(DISCONNECT)
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(4096):  # until the broker closes: the cycle is really over
            pass
    return connected - start, time.perf_counter() - start


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=1883)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--clean", type=int, default=1, choices=(0, 1))
    ap.add_argument("--publish", action="store_true", help="connect, publish QoS 1, disconnect")
    ap.add_argument("--ids", type=int, default=100, help="distinct client ids, used in turn")
    ap.add_argument("--id-prefix", default="seq-", help="client ids are PREFIX0, PREFIX1, ...")
    ap.add_argument("--label", default="")
    ap.add_argument("--max-seconds", type=float, default=300.0)
    ap.add_argument("--samples", help="also write each cycle's CONNACK and whole time (µs) here")
    args = ap.parse_args()
    connects: list[float] = []
    wholes: list[float] = []
    failures = 0
    deadline = time.monotonic() + args.max_seconds
    for i in range(args.warmup + args.count):
        if time.monotonic() > deadline:
            break
        cid = f"{args.id_prefix}{i % args.ids}"
        try:
            c, w = cycle(args.host, args.port, cid, bool(args.clean), args.publish)
        except (OSError, ConnectionError) as exc:
            failures += 1
            print(f"cycle {i}: {exc}", file=sys.stderr)
            continue
        if i >= args.warmup:
            connects.append(c)
            wholes.append(w)
    if not connects:
        print(json.dumps({"label": args.label, "failures": failures}))
        return 1
    us = 1e6
    if args.samples:
        with open(args.samples, "w") as out:
            out.writelines(
                f"{c * us:.0f} {w * us:.0f}\n" for c, w in zip(connects, wholes, strict=True)
            )
    print(
        json.dumps(
            {
                "label": args.label,
                "clean": args.clean,
                "publish": args.publish,
                "count": len(connects),
                "failures": failures,
                "connack_p50_us": round(pct(connects, 50) * us),
                "connack_p90_us": round(pct(connects, 90) * us),
                "connack_p99_us": round(pct(connects, 99) * us),
                "connack_max_us": round(max(connects) * us),
                "cycle_p50_us": round(pct(wholes, 50) * us),
                "cycle_p99_us": round(pct(wholes, 99) * us),
                "cycle_mean_us": round(statistics.fmean(wholes) * us),
                "cycles_per_s": round(len(wholes) / sum(wholes), 1),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
