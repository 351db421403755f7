"""``ternmq start``: the node's four services as supervised child processes.

Children start in dependency order (msgstore, gossip, registry, listener), so each finds
the services it calls already there, and stop in reverse (the listener first: nothing it
still writes finds the store gone). Each is given the node's effective configuration,
written to ``data_dir/run/node.conf`` (the file plus any ``--set`` overrides), so a
child started alone with that file behaves the same.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from services.common import log
from services.common.config import Config
from services.common.service import setup_logging
from services.common.supervisor import ChildSpec, RestartPolicy, Supervisor
from services.listener.processes import child_name
from services.node.http_api import HttpApi

SERVICES = ("msgstore", "gossip", "registry", "listener")


def write_node_conf(config: Config) -> Path:
    run_dir = Path(config["data_dir"]) / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "node.conf"
    path.write_text("\n".join(config.to_lines()) + "\n", encoding="utf-8")
    return path


def children(conf_path: Path, listeners: int = 1) -> list[ChildSpec]:
    """The node's services, the listener as ``listeners`` processes (``listener``,
    ``listener-1``, …), each started with the node's effective configuration."""
    out = []
    for name in SERVICES:
        argv = (sys.executable, "-m", f"services.{name}", "--config", str(conf_path))
        if name != "listener":
            out.append(ChildSpec(name, argv))
            continue
        for k in range(max(listeners, 1)):
            out.append(ChildSpec(child_name(k), (*argv, "--process", str(k))))
    return out


def restart_policy(config: Config) -> RestartPolicy:
    return RestartPolicy(
        max_restarts=config["supervisor.max_restarts"],
        restart_window=config["supervisor.restart_window"],
        shutdown_timeout=config["supervisor.shutdown_timeout"],
    )


def start_node(config: Config) -> int:
    """Run a node in the foreground until SIGTERM/SIGINT; return the exit status."""
    setup_logging("node", config)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        specs = children(write_node_conf(config), config["listener.processes"])
        sup = Supervisor(specs, restart_policy(config))
        api = HttpApi(config, sup.status, sup.started_at)
        api.start()
        log.emit("service.started", address=str(config["listener.http.default"]), pid=os.getpid())
        try:
            return await sup.run(stop)
        finally:
            api.stop()

    try:
        # The stdlib loop, not uvloop: this process only starts, watches and stops four
        # children and answers the HTTP API, and uvloop's subprocess path (its own fork
        # handling and process handles) is the part of it with a history of crashes.
        code = asyncio.run(main())
    except OSError as exc:
        print(f"ternmq: {exc}", file=sys.stderr)
        code = 1
    log.emit(
        "service.stopping",
        reason="stopped",
    )
    log.shutdown()
    return code
