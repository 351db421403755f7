"""The cluster's cost, side by side in one run: Mosquitto, one ternmq node, a 3-node dev
cluster.

* **cross-node QoS 0 and QoS 1**: ``mqload --mode pair`` with publishers on node 1 and
  subscribers on node 2 (``--sub-port``, a small patch to the shared mqload:
  ``bench/mqload-sub-port.patch``), against the same load on one node and on Mosquitto;
* **persistent connects/s**: ``mqload --conns K --clean 0`` (every CONNECT claims its
  client id through the session directory on the cluster);
* **sequential CONNECT latency**, persistent sessions (``bench/connect_latency.py``);
* **takeover after a failure**: a client's session lives on node 3; node 3 is killed
  (SIGKILL) or paused (SIGSTOP); time from the signal until node 1 accepts a clean
  CONNECT of that client id (CONNECTs retried every 20 ms).

Usage: ``python -m bench.cluster_throughput --base-dir /tmp/ct [--duration 10]``; one JSON
line per measurement, then a summary with the ratios. Loopback only; every process it
starts is stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from services.node import dev_cluster as dc

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MQLOAD_SRC = Path("/work/shared/tools/mqload/mqload.c")
MOSQ_PORT, SINGLE_PORT, SINGLE_HTTP = 18930, 18940, 18941
RUN_TIMEOUT = 180


def build_mqload(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    src = out / "mqload.c"
    shutil.copy(MQLOAD_SRC, src)
    for patch in ("mqload-sub-port.patch", "mqload-ws.patch"):  # --sub-port, then --ws
        subprocess.run(["patch", "-s", str(src), str(ROOT / "bench" / patch)], check=True)
    exe = out / "mqload-sub-port"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def mqload(exe: Path, port: int, *args: str, sub_port: int = 0) -> dict[str, Any]:
    cmd = [str(exe), "--port", str(port), *args]
    if sub_port:
        cmd += ["--sub-port", str(sub_port)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open")


def start_mosquitto(base: Path) -> subprocess.Popen[bytes]:
    conf = base / "mosquitto.conf"
    conf.write_text(
        f"listener {MOSQ_PORT} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        "max_queued_messages 0\nset_tcp_nodelay true\n"
    )
    proc = subprocess.Popen(["mosquitto", "-c", str(conf)], stderr=subprocess.DEVNULL)
    wait_port(MOSQ_PORT)
    return proc


def start_single(base: Path) -> subprocess.Popen[bytes]:
    d = base / "single"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    (d / "ternmq.conf").write_text(
        "\n".join(
            [
                "nodename = single@127.0.0.1",
                f"data_dir = {d}/data",
                f"log_dir = {d}/log",
                f"listener.tcp.default = 127.0.0.1:{SINGLE_PORT}",
                f"listener.http.default = 127.0.0.1:{SINGLE_HTTP}",
                "log.console = off",
                "",
            ]
        )
    )
    proc = subprocess.Popen(
        [str(BIN / "ternmq"), "start", "--config", str(d / "ternmq.conf")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_port(SINGLE_PORT)
    return proc


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def latency(port: int, count: int) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "connect_latency.py"),
            "--port",
            str(port),
            "--count",
            str(count),
            "--clean",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _connack(port: int, client_id: str) -> int:
    """A clean 3.1.1 CONNECT; the CONNACK's return code (-1: no answer)."""
    cid = client_id.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(bytes([0x10, len(body)]) + body)
            data = sock.recv(4)
    except OSError:
        return -1
    return data[3] if len(data) == 4 and data[0] == 0x20 else -1


def takeover_after(base: Path, sig: signal.Signals, devs: list[dc.DevNode]) -> float:
    """Seconds from ``sig`` to node 3 until node 1 accepts the id whose session was on 3."""
    cid = f"ct-{sig.name.lower()}"
    holder = socket.create_connection(("127.0.0.1", devs[2].mqtt_port), timeout=5)
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid.encode()
    holder.sendall(bytes([0x10, len(body)]) + body)
    assert holder.recv(4)[3] == 0
    pid = dc.running_pid(devs[2])
    assert pid is not None
    t0 = time.monotonic()
    os.killpg(pid, sig)
    try:
        while time.monotonic() - t0 < 30:
            if _connack(devs[0].mqtt_port, cid) == 0:
                return time.monotonic() - t0
            time.sleep(0.02)
        raise RuntimeError("no takeover within 30 s")
    finally:
        holder.close()
        if sig == signal.SIGSTOP:
            os.killpg(pid, signal.SIGCONT)


def restart_third(devs: list[dc.DevNode]) -> None:
    dc.start_node(devs[2])
    msg = dc.wait_ready(devs, 120)
    if msg:
        raise RuntimeError(msg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-dir", type=Path, required=True)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--conns", type=int, default=2000)
    ap.add_argument("--latency-count", type=int, default=1000)
    ap.add_argument("--settle", type=float, default=15.0, help="idle seconds before a run")
    args = ap.parse_args()
    base: Path = args.base_dir
    base.mkdir(parents=True, exist_ok=True)
    exe = build_mqload(base / ".build")
    load = ["--mode", "pair", "--pubs", str(args.pairs), "--subs", str(args.pairs)]
    load += ["--duration", str(args.duration), "--size", "64"]
    results: dict[str, dict[str, Any]] = {}

    def record(name: str, row: dict[str, Any]) -> None:
        results[name] = row
        print(json.dumps({"run": name, **row}), flush=True)

    def runs(tag: str, port: int, sub_port: int = 0) -> None:
        for qos in (0, 1):
            time.sleep(args.settle)  # what the last run left queued drains first
            row = mqload(
                exe,
                port,
                *load,
                "--qos",
                str(qos),
                "--topic",
                f"{tag}q{qos}",
                "--id",
                f"{tag}q{qos}",
                sub_port=sub_port,
            )
            record(f"{tag}.qos{qos}", row)
        conns = ["--conns", str(args.conns), "--clean", "0", "--duration", "1"]
        record(f"{tag}.conns", mqload(exe, port, *conns, "--id", f"{tag}c"))
        record(f"{tag}.latency", latency(port, args.latency_count))

    mosq = start_mosquitto(base)
    try:
        runs("mosquitto", MOSQ_PORT)
    finally:
        mosq.terminate()
        mosq.wait(10)
    single = start_single(base)
    try:
        runs("single", SINGLE_PORT)
    finally:
        stop_group(single)
    cluster_dir = base / "cluster"
    shutil.rmtree(cluster_dir, ignore_errors=True)
    msg = dc.start(cluster_dir, 3, {})
    devs = dc.existing(cluster_dir)
    try:
        if msg:
            raise RuntimeError(msg)
        runs("cluster", devs[0].mqtt_port, devs[1].mqtt_port)
        record("cluster.takeover_sigkill", {"s": takeover_after(base, signal.SIGKILL, devs)})
        restart_third(devs)
        record("cluster.takeover_sigstop", {"s": takeover_after(base, signal.SIGSTOP, devs)})
    finally:
        dc.stop(cluster_dir)
    summary = {
        "cross_node_qos0_vs_single": _ratio(results, "cluster.qos0", "single.qos0"),
        "cross_node_qos1_vs_single": _ratio(results, "cluster.qos1", "single.qos1"),
        "single_qos0_vs_mosquitto": _ratio(results, "single.qos0", "mosquitto.qos0"),
        "single_qos1_vs_mosquitto": _ratio(results, "single.qos1", "mosquitto.qos1"),
        "persistent_connects_cluster_vs_single": _ratio(
            results, "cluster.conns", "single.conns", "connects_per_s"
        ),
        "connack_p50_us": {
            k: results[f"{k}.latency"]["connack_p50_us"] for k in ("mosquitto", "single", "cluster")
        },
        "takeover_sigkill_s": results["cluster.takeover_sigkill"]["s"],
        "takeover_sigstop_s": results["cluster.takeover_sigstop"]["s"],
    }
    print(json.dumps({"summary": summary}), flush=True)


def _ratio(results: dict[str, dict[str, Any]], a: str, b: str, field: str = "msgs_per_s") -> float:
    return round(float(results[a][field]) / max(float(results[b][field]), 1e-9), 3)


if __name__ == "__main__":
    main()
