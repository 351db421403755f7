"""RabbitMQ with quorum session queues, the peer the replication-cost goal is set against.

A local 3-node RabbitMQ cluster (Debian's ``rabbitmq-server``, ``apt-get install
rabbitmq-server``) with the MQTT plugin and ``mqtt.durable_queue_type = quorum``: a
persistent session's QoS 1 subscription is a Raft-replicated queue on all three nodes,
so a publisher's PUBACK waits for a majority of them, as ternmq's does with R = 3.
``mqtt.prefetch`` is raised from 10 to 100 (``PREFETCH``); everything else is stock.

Everything binds 127.0.0.1 on its own ports (epmd 25600, AMQP 2561k, distribution 2562k,
MQTT 2563k for node k, CLI tools 25640-25659), far from the dev cluster's 10000-10300 and
from a system RabbitMQ's 4369/5672/1883. Node k is ``tnqbenchK@localhost`` with its
config, data and logs under ``BASE/nK``; the Erlang cookie is ``BASE/.erlang.cookie``.
The package's own service is not used. Every process started is stopped by pid,
also on error.

Usage alone: ``python -m bench.rabbitmq_peer --base-dir /tmp/rq [--duration 10]``: the
same ``mqload --mode pair --qos 1 --clean 0`` run as ``bench.replication_cost``, one JSON
line with the queues' type and members checked after the run. ``--set KEY=VALUE`` adds
a ``rabbitmq.conf`` line (``--set mqtt.prefetch=10``: the stock window).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

RMQ_BIN = Path("/usr/lib/rabbitmq/bin")
RMQ_LIB = Path("/usr/lib/rabbitmq/lib")
NODES = 3
EPMD_PORT = 25600
CTL_DIST_PORTS = (25640, 25659)
LOCK = Path("/tmp/ternmq-rabbitmq-peer.lock")  # the ports are fixed: runs queue, not clash
BOOT_TIMEOUT = 180  # s; three Erlang VMs booting on 2 busy cores are slow
STOP_TIMEOUT = 60
CTL_TIMEOUT = 120
LOOPBACK_DIST = "-kernel inet_dist_use_interface {127,0,0,1}"
# Unacknowledged deliveries per MQTT subscriber. The default, 10 (and 20, ternmq's own
# max_inflight_messages), left three quarters of the run's copies queued after the drain
# (~340 msg/s delivered); with 100, mqload's own window per publisher, RabbitMQ delivers
# every copy it acknowledged. The peer is given the setting it does best with.
PREFETCH = 100


def available() -> bool:
    """Whether Debian's rabbitmq-server (server script, CLI tools, epmd) is installed."""
    return (RMQ_BIN / "rabbitmq-server").exists() and shutil.which("epmd") is not None


def version() -> str:
    """The installed server's version, from its release directory's name."""
    dirs = sorted(RMQ_LIB.glob("rabbitmq_server-*"))
    return dirs[-1].name.removeprefix("rabbitmq_server-") if dirs else "unknown"


def node_name(k: int) -> str:
    return f"tnqbench{k}@localhost"


def amqp_port(k: int) -> int:
    return EPMD_PORT + 10 + k


def dist_port(k: int) -> int:
    return EPMD_PORT + 20 + k


def mqtt_port(k: int) -> int:
    return EPMD_PORT + 30 + k


def _env(base: Path, k: int) -> dict[str, str]:
    """Node k's environment; also used for CLI calls, which need the same epmd and cookie."""
    d = base / f"n{k}"
    env = dict(os.environ)
    env.update(
        {
            "HOME": str(base),  # the Erlang cookie: BASE/.erlang.cookie, not ~root's
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),  # not /etc/rabbitmq's
            "RABBITMQ_NODENAME": node_name(k),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_PID_FILE": str(d / "rabbitmq.pid"),
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(amqp_port(k)),
            "RABBITMQ_DIST_PORT": str(dist_port(k)),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": LOOPBACK_DIST,
            "RABBITMQ_CTL_ERL_ARGS": LOOPBACK_DIST,
            "RABBITMQ_CTL_DIST_PORT_MIN": str(CTL_DIST_PORTS[0]),
            "RABBITMQ_CTL_DIST_PORT_MAX": str(CTL_DIST_PORTS[1]),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(EPMD_PORT),
        }
    )
    return env


def _write_node_files(base: Path, k: int, extra: Mapping[str, str]) -> None:
    d = base / f"n{k}"
    settings = {"mqtt.prefetch": str(PREFETCH), **extra}
    (d / "log").mkdir(parents=True)
    (d / "mnesia").mkdir()
    (d / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
    (d / "rabbitmq.conf").write_text(
        "\n".join(
            [
                f"listeners.tcp.default = 127.0.0.1:{amqp_port(k)}",
                f"mqtt.listeners.tcp.default = 127.0.0.1:{mqtt_port(k)}",
                # a persistent session's QoS 1 queue is a quorum (Raft) queue
                "mqtt.durable_queue_type = quorum",
                "mqtt.allow_anonymous = true",
                *(f"{key} = {value}" for key, value in settings.items()),
                "",
            ]
        )
    )


def ctl(base: Path, *args: str, k: int = 1, timeout: float = CTL_TIMEOUT) -> str:
    """``rabbitmqctl -n tnqbenchK@localhost ARGS``; its stdout, raising on failure."""
    done = subprocess.run(
        [str(RMQ_BIN / "rabbitmqctl"), "-n", node_name(k), *args],
        env=_env(base, k),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {' '.join(args)} on node {k}: {done.stderr.strip()}")
    return done.stdout


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _port_open(port):
        if time.monotonic() > deadline:
            raise RuntimeError(f"port {port} did not open within {timeout:.0f} s")
        time.sleep(0.2)


def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """``sig`` to the process's own group: a node's script, its beam and their children."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Wait for a SIGTERMed group to exit, then SIGKILL whatever is still in it."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(STOP_TIMEOUT)
    _signal(proc, signal.SIGKILL)
    proc.wait(10)


@contextlib.contextmanager
def rabbitmq_cluster(base: Path, extra: Mapping[str, str] | None = None) -> Iterator[int]:
    """A fresh 3-node cluster under ``base`` (wiped first); yields node 1's MQTT port.

    Node 1 forms the cluster, nodes 2 and 3 ``join_cluster`` it, so the quorum queues
    the MQTT plugin declares on node 1 get all three nodes as members. ``extra``:
    further ``rabbitmq.conf`` settings, e.g. ``{"mqtt.prefetch": "10"}`` for the stock one.
    """
    base = base.resolve()
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        busy = [p for p in _all_ports() if _port_open(p)]
        if busy:
            raise RuntimeError(f"ports already in use on 127.0.0.1: {busy}")
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir(parents=True)
        cookie = base / ".erlang.cookie"
        cookie.write_text(secrets.token_hex(16))
        cookie.chmod(0o400)
        (base / "rabbitmq-env.conf").write_text("")
        started: list[subprocess.Popen[bytes]] = []
        try:
            # our own epmd, in the foreground, so it is ours to stop by pid
            started.append(
                subprocess.Popen(
                    ["epmd", "-address", "127.0.0.1", "-port", str(EPMD_PORT)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            _wait_port(EPMD_PORT, 10)
            for k in range(1, NODES + 1):
                _write_node_files(base, k, extra or {})
                with (base / f"n{k}" / "console.log").open("wb") as out:
                    started.append(
                        subprocess.Popen(
                            [str(RMQ_BIN / "rabbitmq-server")],
                            env=_env(base, k),
                            cwd=base,
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                    )
            for k in range(1, NODES + 1):
                # waits for the pid file, then for the node to have booted
                pid_file = str(base / f"n{k}" / "rabbitmq.pid")
                ctl(
                    base,
                    "wait",
                    pid_file,
                    "--timeout",
                    str(BOOT_TIMEOUT),
                    k=k,
                    timeout=BOOT_TIMEOUT + 30,
                )
            for k in range(2, NODES + 1):
                ctl(base, "stop_app", k=k)
                ctl(base, "join_cluster", node_name(1), k=k)
                ctl(base, "start_app", k=k)
            status = json.loads(ctl(base, "cluster_status", "--formatter", "json"))
            running = sorted(status.get("running_nodes", []))
            if running != sorted(node_name(k) for k in range(1, NODES + 1)):
                raise RuntimeError(f"cluster did not form, running nodes: {running}")
            _wait_port(mqtt_port(1), BOOT_TIMEOUT)
            yield mqtt_port(1)
        finally:
            nodes, epmd = started[1:], started[:1]
            for proc in nodes:  # all at once: each node's shutdown waits for no other
                _signal(proc, signal.SIGTERM)
            for proc in nodes:
                _reap(proc)
            for proc in epmd:  # last: a stopping node still talks to it
                _signal(proc, signal.SIGTERM)
                _reap(proc)


def _all_ports() -> list[int]:
    ports = [EPMD_PORT]
    for k in range(1, NODES + 1):
        ports += [amqp_port(k), dist_port(k), mqtt_port(k)]
    return ports


def queue_check(base: Path) -> dict[str, Any]:
    """What the run's session queues are: how many are quorum queues on all three nodes.

    The sessions are persistent, so their queues outlive mqload's connections and are
    read after the run, on the same cluster, without a CLI VM booting during it.
    """
    rows = json.loads(
        ctl(
            base.resolve(),
            "list_queues",
            "name",
            "type",
            "members",
            "online",
            "--formatter",
            "json",
        )
    )
    every = sorted(node_name(k) for k in range(1, NODES + 1))
    on_all = [
        r
        for r in rows
        if r.get("type") == "quorum"
        and sorted(r.get("members") or []) == every
        and sorted(r.get("online") or []) == every
    ]
    return {
        "queues": len(rows),
        "quorum_on_3_online": len(on_all),
        "types": sorted({str(r.get("type")) for r in rows}),
    }


def main() -> None:
    from bench.cluster_throughput import build_mqload, mqload

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-dir", type=Path, required=True)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--settle", type=float, default=10.0, help="idle seconds before the run")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="extra rabbitmq.conf"
    )
    args = ap.parse_args()
    if not available():
        raise SystemExit("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
    base: Path = args.base_dir
    base.mkdir(parents=True, exist_ok=True)
    exe = build_mqload(base / ".build")
    load = ["--mode", "pair", "--pubs", str(args.pairs), "--subs", str(args.pairs)]
    load += ["--duration", str(args.duration), "--size", "64", "--qos", "1", "--clean", "0"]
    extra = dict(kv.split("=", 1) for kv in args.set)
    with rabbitmq_cluster(base / "rabbitmq", extra) as port:
        time.sleep(args.settle)
        row = mqload(exe, port, *load, "--topic", "rq", "--id", "rq")
        row["rabbitmq"] = version()
        row["queue_check"] = queue_check(base / "rabbitmq")
        row["rabbitmq_conf"] = extra
    print(json.dumps({"run": "rabbitmq-quorum", **row}), flush=True)


if __name__ == "__main__":
    main()
