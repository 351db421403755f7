"""Soak: a thousand MQTT clients churning against one node for half an hour, RSS sampled.

Clients connect (clean or persistent, MQTT 3.1.1 or 5), subscribe and unsubscribe in a
bounded topic space, publish QoS 0/1, set and clear retained messages, disconnect, sleep
and come back; some persistent sessions are never resumed and must expire
(``soak_workload.py`` tells the mix). Memory should level off once the working set is
reached; ``soak_plot.py`` plots the samples and judges that.

Every ``--interval`` seconds a sample (RSS per process, sessions, retained, subscriptions,
queues: ``soak_sample.py``) and the load counters go to ``--out`` as a JSON line. At the
end the persistent clients come back once to collect their inboxes and end their
sessions, the run's retained topics are cleared, ``--settle`` seconds are sampled with no
load, and an ``end`` line gives totals, errors and lost inbox messages.

    bench/soak.py --start --minutes 30 --settle 180              # a fresh node of its own
    bench/soak.py --port 1883 --http 8888 --minutes 5            # a running node

A started node gets free ports (unless named) and must prove to be the one answering:
the listener binds with SO_REUSEPORT, so a fixed port can be shared with another bench's
node without an error. Each sample also records the connections the clients hold, so
connections from anyone else show up as the node's count above it.

With ``--start`` the node (``persistent_client_expiration = --expiry``, plus ``--set``
lines) runs in its own process group and is stopped by its pid at the end; a running node
is only read (``/proc``, its HTTP endpoints), never signalled. Every phase is bounded in
time. Exit status 1 when a service restarted, the node died or an inbox message was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from soak_sample import NodeHttp, processes, sample_node
from soak_workload import Plan, Workload

ROOT = Path(__file__).resolve().parent.parent
FINISH_WAIT = 60.0  # seconds the clients get to finish their cycle after the deadline


class StartedNode:
    """A node this run started: its own process group, stopped by its pid."""

    def __init__(self, base: Path, port: int, http: int, lines: list[str]) -> None:
        self.base = base
        self.conf = [
            "nodename = soak@127.0.0.1",
            f"data_dir = {base / 'data'}",
            f"log_dir = {base / 'log'}",
            f"listener.tcp.default = 127.0.0.1:{port}",
            f"listener.http.default = 127.0.0.1:{http}",
            "log.console = off",
            *lines,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, http: NodeHttp, timeout: float = 60) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        conf = self.base / "ternmq.conf"
        conf.write_text("".join(line + "\n" for line in self.conf))
        ternmq = Path(sys.executable).parent / "ternmq"
        with open(self.base / "node.out", "ab") as out:
            self.proc = subprocess.Popen(
                [str(ternmq), "start", "--config", str(conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while not http.healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"node did not become healthy; see {self.base / 'node.out'}")
            time.sleep(0.2)
        answering = processes(http.json("/status")).get("supervisor")
        if self.proc.poll() is not None or answering != self.proc.pid:
            self.stop()
            raise SystemExit(
                f"the node answering on port {http.base} is not ours (supervisor {answering}, "
                f"ours {self.proc.pid}): another node holds the port"
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM to the supervisor; SIGKILL to its group if it is not gone in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        return self.proc.returncode


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.decode().strip()


def _start_record(args: argparse.Namespace, plan: Plan, node: StartedNode | None) -> dict[str, Any]:
    return {
        "kind": "start",
        "ts": time.time(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "compiled": any((ROOT / "services").rglob("*.so")),
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "tag": plan.tag,
        "conf": node.conf if node else None,
        "nproc": os.cpu_count(),
    }


class Sampler:
    def __init__(self, http: NodeHttp, out: TextIO, workload: Workload, t0: float) -> None:
        self.http = http
        self.out = out
        self.workload = workload
        self.t0 = t0
        self.pids: dict[str, int] | None = None
        self.restarts: dict[str, int] = {}
        self.problems = 0

    async def sample(self, phase: str) -> dict[str, Any]:
        rec = await asyncio.to_thread(sample_node, self.http, self.pids)
        self.pids = rec.get("pids", self.pids)
        for name, n in rec.get("restarts", {}).items():
            self.restarts[name] = max(self.restarts.get(name, 0), int(n))
        self.problems += len(rec["problems"])
        rec.update(
            t=round(time.monotonic() - self.t0, 2),
            ts=round(time.time(), 2),
            phase=phase,
            loadavg=os.getloadavg()[0],
            load=self.workload.stats.load(),
        )
        self.out.write(json.dumps(rec, sort_keys=True) + "\n")
        self.out.flush()
        return rec

    async def every(
        self, interval: float, until: float, phase: str, task: asyncio.Task[Any] | None = None
    ) -> None:
        """Sample every ``interval`` seconds until ``until``, or until ``task`` is done."""
        while time.monotonic() < until and not (task and task.done()):
            start = time.monotonic()
            await self.sample(phase)
            left = min(until - time.monotonic(), interval - (time.monotonic() - start))
            if left > 0:
                await asyncio.wait(
                    [task or asyncio.ensure_future(asyncio.sleep(left))], timeout=left
                )


async def run(args: argparse.Namespace, plan: Plan, out: TextIO) -> dict[str, Any]:
    http = NodeHttp("127.0.0.1", args.http)
    workload = Workload(plan)
    t0 = time.monotonic()
    workload.stop_at = t0 + plan.seconds
    sampler = Sampler(http, out, workload, t0)
    await sampler.sample("start")
    tasks = [asyncio.create_task(workload.client_loop(c)) for c in workload.clients]
    await sampler.every(args.interval, workload.stop_at, "load")
    _, pending = await asyncio.wait(tasks, timeout=FINISH_WAIT)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    await sampler.sample("load")
    drain = asyncio.create_task(workload.drain(args.drain))
    await sampler.every(args.interval, time.monotonic() + args.drain + 5, "drain", drain)
    await drain
    try:
        await workload.clear_retained()
    except Exception as exc:  # reported in the end line, not fatal
        workload.stats.errors[f"clear retained: {exc}"] += 1
    await sampler.every(args.interval, time.monotonic() + args.settle, "settle")
    last = await sampler.sample("end")
    lost = workload.lost()
    return {
        "kind": "end",
        "t": round(time.monotonic() - t0, 2),
        "ts": time.time(),
        "load": workload.stats.load(),
        "inbox_dups": workload.stats.inbox_dups,
        "lost": len(lost),
        "lost_examples": lost[:10],
        "unfinished_clients": len(pending),
        "restarts": sampler.restarts,
        "sample_problems": sampler.problems,
        "rss_kb": last.get("rss_kb", {}),
        "state": last.get("state", {}),
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0, help="length of the churn")
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--port", type=int, help="the node's MQTT port (--start: a free one)")
    ap.add_argument("--http", type=int, help="the node's HTTP port (--start: a free one)")
    ap.add_argument("--out", type=Path, help="JSON lines (default bench/results/soak-<ts>.jsonl)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--expiry", type=int, default=120, help="session expiry seconds")
    ap.add_argument("--sleep-min", type=float, default=1.0, help="between cycles, seconds")
    ap.add_argument("--sleep-max", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=15.0, help="for each broker reply")
    ap.add_argument("--drain", type=float, default=30.0, help="seconds to collect inboxes")
    ap.add_argument("--settle", type=float, default=0.0, help="seconds sampled after the load")
    ap.add_argument("--start", action="store_true", help="start a fresh node of our own")
    ap.add_argument("--dir", type=Path, help="the started node's directory (default: a temp dir)")
    ap.add_argument("--set", action="append", default=[], help="extra conf line for --start")
    args = ap.parse_args(argv)
    if not args.start and (args.port is None or args.http is None):
        ap.error("--port and --http name the running node to drive (or --start one)")
    if args.start:  # never a fixed port: another bench's node may hold it (SO_REUSEPORT)
        args.port = args.port or _free_port()
        args.http = args.http or _free_port()
    if args.sleep_max + 4 * args.timeout >= args.expiry:
        ap.error(
            "--sleep-max + 4 x --timeout must stay under --expiry: persistent clients "
            "must come back before their sessions could expire"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.clients * 2 + 256)), hard))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_path = args.out or ROOT / "bench" / "results" / f"soak-{stamp}.jsonl"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    plan = Plan(
        host="127.0.0.1",
        port=args.port,
        clients=args.clients,
        seconds=args.minutes * 60,
        seed=args.seed,
        expiry=args.expiry,
        sleep_min=args.sleep_min,
        sleep_max=args.sleep_max,
        timeout=args.timeout,
        tag=f"{args.seed}x{int(time.time()) % 100000}",
    )
    http = NodeHttp("127.0.0.1", args.http)
    node = None
    if args.start:
        base = args.dir or Path(tempfile.mkdtemp(prefix="ternmq-soak-"))
        lines = [f"persistent_client_expiration = {args.expiry}s", *args.set]
        node = StartedNode(base, args.port, args.http, lines)
    elif not http.healthy():
        print(f"no healthy node at http://127.0.0.1:{args.http} (or use --start)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` stops the node
    try:
        uvloop: Any = __import__("uvloop")
        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run
    with open(out_path, "w") as out:
        try:
            if node is not None:
                node.start(http)
            out.write(json.dumps(_start_record(args, plan, node), default=str) + "\n")
            out.flush()
            end = runner(run(args, plan, out))
        finally:
            alive = node is None or node.alive()
            exit_code = node.stop() if node is not None else None
        end["node_alive_at_end"] = alive
        end["node_exit"] = exit_code
        end["out"] = str(out_path)
        out.write(json.dumps(end, sort_keys=True) + "\n")
    print(json.dumps({k: end[k] for k in ("lost", "restarts", "node_exit", "out")}))
    print(json.dumps(end["load"]))
    failed = end["lost"] or any(end["restarts"].values()) or not alive or exit_code not in (None, 0)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
