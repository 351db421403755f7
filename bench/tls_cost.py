"""What TLS and WebSocket cost, side by side in one run: Mosquitto and one ternmq node
under the same mqload load, over plain TCP, TLS, and (ternmq) WebSocket and WebSocket
over TLS.

mqload speaks no TLS, so a local HAProxy carries every connection: to the plain
listeners as they are, and to the TLS ones with HAProxy as the TLS client (``ssl verify
none``). Every path crosses HAProxy, so a ratio to plain TCP is the broker's cost of the
transport, not the bridge's. WebSocket framing is mqload's own (``--ws /mqtt``, patched
in by ``bench/mqload-ws.patch``: one binary frame per write, as MQTT.js sends).
Mosquitto 2.0.11 as Debian builds it cannot open a WebSocket listener here ("Unable to
start any listening sockets"), so WebSocket runs are ternmq's alone. Reported: QoS 0
fan-in and persistent QoS 1 pairs in messages/s, and connects/s (``mqload --conns``:
over TLS every connection is a full handshake at the broker), as ratios to plain TCP
and to Mosquitto's TLS.

Each run also reports the CPU the broker (every process of the ternmq node) and HAProxy
spent per message or connect. Runs on this 2-core VM swing by a third from one to the
next, so ``--rounds N`` repeats every load but the fan-in N times, the fronts taking
turns, and the summary gives medians. The fan-ins run last, Mosquitto's after ternmq's
(see below).

Usage: ``python -m bench.tls_cost --base-dir /tmp/tlsb [--duration 10] [--rounds 3]``;
one JSON line per run, then a summary. Loopback only; every process it starts is
stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.cluster_throughput import build_mqload, mqload, wait_port
from tests.support.certs import make_certs
from tests.support.node import free_port, make_node

MOSQ_TCP, MOSQ_TLS = 18950, 18951


def _cpu_seconds(*, pid: int = 0, pgid: int = 0) -> float:
    """User + system CPU of one process, or of every process in a group (a ternmq node's
    supervisor leads the group of all its services and log converters)."""
    ticks = 0
    for entry in os.listdir("/proc") if pgid else [str(pid)]:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone since the listing
            continue
        if not pgid or int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _haproxy_conf(routes: dict[int, tuple[int, bool]]) -> str:
    """A frontend per local port, to a broker port, over TLS or not."""
    lines = [
        "global",
        "    maxconn 8000",
        "defaults",
        "    mode tcp",
        "    timeout connect 5s",
        "    timeout client 1h",
        "    timeout server 1h",
    ]
    for front, (back, tls) in routes.items():
        lines += [f"listen l{front}", f"    bind 127.0.0.1:{front}"]
        lines += [f"    server s 127.0.0.1:{back}" + (" ssl verify none" if tls else "")]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-dir", type=Path, required=True)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--settle", type=float, default=5.0)
    ap.add_argument("--loads", default="", help="comma-separated subset of the loads")
    ap.add_argument(
        "--rounds", type=int, default=1, help="repeat every load but the fan-in; medians"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a ternmq setting for the node (e.g. listener.processes=2); repeatable",
    )
    args = ap.parse_args()
    base: Path = args.base_dir
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    exe = build_mqload(base / ".build")
    certs = make_certs(base / "certs")
    procs: list[subprocess.Popen[bytes]] = []
    results: dict[str, list[dict[str, Any]]] = {}
    mosq_conf = base / "mosquitto.conf"
    mosq_conf.write_text(
        f"per_listener_settings false\nallow_anonymous true\npersistence false\n"
        f"max_queued_messages 0\nset_tcp_nodelay true\nlistener {MOSQ_TCP} 127.0.0.1\n"
        f"listener {MOSQ_TLS} 127.0.0.1\ncertfile {certs.server.cert}\n"
        f"keyfile {certs.server.key}\n"
    )
    tls_port, ws_port, wss_port = free_port(), free_port(), free_port()
    node = make_node(
        base / "ternmq",
        **{
            "listener.ssl.default": f"127.0.0.1:{tls_port}",
            "listener.ssl.certfile": str(certs.server.cert),
            "listener.ssl.keyfile": str(certs.server.key),
            "listener.ws.default": f"127.0.0.1:{ws_port}",
            "listener.wss.default": f"127.0.0.1:{wss_port}",
            "listener.wss.certfile": str(certs.server.cert),
            "listener.wss.keyfile": str(certs.server.key),
            **dict(kv.split("=", 1) for kv in args.set),
        },
    )
    names = ("mosq-tcp", "mosq-tls", "tnq-tcp", "tnq-tls", "tnq-ws", "tnq-wss")
    fronts = {name: free_port() for name in names}
    try:
        procs.append(
            subprocess.Popen(["mosquitto", "-c", str(mosq_conf)], stderr=subprocess.DEVNULL)
        )
        wait_port(MOSQ_TCP)
        node.start()
        routes = {
            fronts["mosq-tcp"]: (MOSQ_TCP, False),
            fronts["mosq-tls"]: (MOSQ_TLS, True),
            fronts["tnq-tcp"]: (node.mqtt_port, False),
            fronts["tnq-tls"]: (tls_port, True),
            fronts["tnq-ws"]: (ws_port, False),
            fronts["tnq-wss"]: (wss_port, True),
        }
        (base / "haproxy.cfg").write_text(_haproxy_conf(routes))
        procs.append(
            subprocess.Popen(
                ["haproxy", "-db", "-f", str(base / "haproxy.cfg")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        for port in fronts.values():
            wait_port(port)
        # The fan-ins go last, Mosquitto's after ternmq's: Mosquitto 2.0.11's TLS listener
        # spins for minutes after a full-speed QoS 0 fan-in (its subscriber gone, one core
        # busy, every new connection timing out), so any run after it, on any front,
        # would measure that spinning core too.
        loads: dict[str, list[str]] = {
            "qos1_pair": [
                *("--mode", "pair", "--pubs", "10", "--subs", "10"),
                *("--qos", "1", "--clean", "0"),
            ],
            # the transport alone: no session queue (ternmq fsyncs a persistent one's
            # every message, Mosquitto keeps it in memory)
            "qos1_pair_clean": [
                *("--mode", "pair", "--pubs", "10", "--subs", "10"),
                *("--qos", "1", "--clean", "1"),
            ],
            "connects": ["--conns", "500"],
            "qos0_fanin": ["--mode", "fanin", "--pubs", "10", "--subs", "1", "--qos", "0"],
        }
        if args.loads:
            loads = {k: v for k, v in loads.items() if k in args.loads.split(",")}
        runs = [(n, load) for n in names for load in loads if load != "qos0_fanin"] * args.rounds
        if "qos0_fanin" in loads:
            runs += [(name, "qos0_fanin") for name in names[2:] + names[:2]]
        for name, load in runs:
            port, extra = fronts[name], loads[load]
            ws = ["--ws", "/mqtt"] if name.endswith(("-ws", "-wss")) else []
            time.sleep(args.settle)
            tag = f"{name}-{load}".replace("-", "")
            duration = "2" if load == "connects" else str(args.duration)
            size = [] if load == "connects" else ["--size", "64", "--topic", tag]
            assert node.proc is not None
            owner = {"pid": procs[0].pid} if name.startswith("mosq") else {"pgid": node.proc.pid}
            cpu0 = _cpu_seconds(**owner), _cpu_seconds(pid=procs[1].pid)
            row = mqload(exe, port, *extra, *ws, "--duration", duration, *size, "--id", tag)
            # the broker's CPU and HAProxy's, per message (per connect) delivered
            done = row.get("received") or row.get("connected") or 0
            for key, spent in zip(("broker", "haproxy"), cpu0, strict=True):
                now = _cpu_seconds(**owner) if key == "broker" else _cpu_seconds(pid=procs[1].pid)
                row[f"{key}_cpu_s"] = round(now - spent, 2)
                row[f"{key}_cpu_us_each"] = round((now - spent) * 1e6 / max(done, 1), 1)
            results.setdefault(f"{name} {load}", []).append(row)
            print(json.dumps({"run": f"{name} {load}", **row}), flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        if node.proc is not None:
            node.stop()
    summary: dict[str, Any] = {}
    for load, key in (
        ("qos0_fanin", "msgs_per_s"),
        ("qos1_pair", "msgs_per_s"),
        ("qos1_pair_clean", "msgs_per_s"),
        ("connects", "connects_per_s"),
    ):
        if f"tnq-tcp {load}" not in results:
            continue
        got = {
            n: statistics.median(float(r.get(key, 0) or 0) for r in results[f"{n} {load}"])
            for n in fronts
        }
        summary[load] = {
            **{n: round(v) for n, v in got.items()},
            "ternmq_tls_vs_tcp": round(got["tnq-tls"] / max(got["tnq-tcp"], 1), 2),
            "ternmq_ws_vs_tcp": round(got["tnq-ws"] / max(got["tnq-tcp"], 1), 2),
            "ternmq_wss_vs_tcp": round(got["tnq-wss"] / max(got["tnq-tcp"], 1), 2),
            "mosquitto_tls_vs_tcp": round(got["mosq-tls"] / max(got["mosq-tcp"], 1), 2),
            "ternmq_tls_vs_mosquitto_tls": round(got["tnq-tls"] / max(got["mosq-tls"], 1), 2),
        }
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
