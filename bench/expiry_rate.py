"""How fast a node expires sessions: N MQTT 5 sessions with a 1 s expiry connect and leave,
then the registry's ``registry_sessions`` gauge is polled until it reads 0.

Usage: ``python -m bench.expiry_rate --port 1883 --http 127.0.0.1:8888 --sessions 1000``
against a fresh node (nothing else connected); prints the seconds past the 1 s expiry and
the rate. Bounded: it gives up after ``--limit`` seconds.
"""

from __future__ import annotations

import argparse
import re
import socket
import struct
import time
import urllib.request

GAUGE = re.compile(r"^(?:ternmq_)?registry_sessions(?:\{[^}]*\})? ([0-9.e+]+)", re.M)


def connect_and_leave(port: int, client_id: str) -> None:
    props = b"\x05\x11\x00\x00\x00\x01"  # properties: Session Expiry Interval = 1 s
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x05\x00\x00\x3c" + props + struct.pack("!H", len(cid)) + cid
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(bytes([0x10, len(body)]) + body)
        connack = s.recv(64)
        if len(connack) < 4 or connack[3] != 0:
            raise SystemExit(f"expiry_rate: CONNECT of {client_id} refused: {connack!r}")
        s.sendall(b"\xe0\x00")  # DISCONNECT: the session stays for its expiry


def sessions(http: str) -> float:
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=5) as r:
        m = GAUGE.search(r.read().decode())
    if m is None:
        raise SystemExit("expiry_rate: no registry_sessions gauge in /metrics")
    return float(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=1883)
    ap.add_argument("--http", default="127.0.0.1:8888")
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--limit", type=float, default=300.0)
    ns = ap.parse_args()
    for i in range(ns.sessions):
        connect_and_leave(ns.port, f"expiry-rate-{i}")
    start = time.monotonic()
    time.sleep(1.0)
    while sessions(ns.http) > 0:
        if time.monotonic() - start > ns.limit:
            raise SystemExit(
                f"expiry_rate: {sessions(ns.http):g} sessions left after {ns.limit:g}s"
            )
        time.sleep(0.05)
    took = time.monotonic() - start - 1.0
    print(
        f"{ns.sessions} sessions expired {took:.2f}s after their expiry: {ns.sessions / took:.0f}/s"
    )


if __name__ == "__main__":
    main()
