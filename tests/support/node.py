"""Starting and stopping real ternmq nodes for tests (real processes, loopback ports).

A node is started with ``ternmq start`` in its own process group, so a test can kill
the whole node (supervisor and services) with one ``killpg(SIGKILL)``, as an operator's
``kill -9`` of a container would.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from services.common import logspool
from services.common.pids import group_alive

VENV_BIN = Path(sys.executable).parent
TERNMQ = str(VENV_BIN / "ternmq")


STARTED: list[subprocess.Popen[bytes]] = []  # every node process a test started


def stop_leftovers() -> list[int]:
    """SIGKILL the process group of every node a test started and left running (a failed
    test must not leave servers behind); returns their pids."""
    left = [p for p in STARTED if p.poll() is None]
    for proc in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    STARTED.clear()
    return [p.pid for p in left]


_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()
_ports = random.Random(os.getpid() ^ time.monotonic_ns())


def _listening_ports() -> range:
    """Ports outside the kernel's ephemeral range. A port found by binding to 0 is an
    ephemeral one, and between the test picking it and a server binding it an outgoing
    connection (another node's, starting at the same time) may take it as its source port:
    a CI run failed that way (``address already in use``). The kernel never gives a
    connecting socket a port outside that range."""
    try:
        low, high = map(int, _PORT_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    if 65535 - high >= 2000:
        return range(high + 1, 65536)
    return range(max(1024, low - 8000), low)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, outside the ephemeral range, and not handed out
    before by this process (two servers of one test never get the same one)."""
    ports = _listening_ports()
    start = _ports.randrange(len(ports))
    for i in range(len(ports)):
        port = ports[(start + i) % len(ports)]
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {ports} on {host}")


def wait_for(predicate: object, timeout: float, interval: float = 0.05, what: str = "") -> None:
    """Poll ``predicate`` until true; fail after ``timeout`` seconds (generous bounds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


@dataclass
class Node:
    base: Path
    mqtt_port: int
    http_port: int
    settings: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    ports: dict[str, int] = field(default_factory=dict)  # more listeners a test declares

    @property
    def conf(self) -> Path:
        return self.base / "ternmq.conf"

    @property
    def log_dir(self) -> Path:
        return self.base / "log"

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    def write_conf(self) -> None:
        lines = {
            "nodename": f"test{self.mqtt_port}@127.0.0.1",
            "data_dir": str(self.data_dir),
            "log_dir": str(self.log_dir),
            "listener.tcp.default": f"127.0.0.1:{self.mqtt_port}",
            "listener.http.default": f"127.0.0.1:{self.http_port}",
            "log.console": "off",
            **self.settings,
        }
        self.base.mkdir(parents=True, exist_ok=True)
        self.conf.write_text("".join(f"{k} = {v}\n" for k, v in lines.items()))

    def start(self, wait: bool = True) -> None:
        self.write_conf()
        out = open(self.base / "node.out", "ab")  # noqa: SIM115 - lives as long as the node
        self.proc = subprocess.Popen(
            [TERNMQ, "start", "--config", str(self.conf)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        STARTED.append(self.proc)
        if wait:
            self.wait_healthy()

    def health(self) -> int:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}/health", timeout=2
            ) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0

    def wait_healthy(self, timeout: float = 60) -> None:
        def ok() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"node exited with {self.proc.returncode}:\n" + self.output())
            return self.health() == 200

        wait_for(ok, timeout, 0.1, "node /health 200")

    def output(self) -> str:
        path = self.base / "node.out"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def get_json(self, path: str) -> object:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as resp:
            return json.loads(resp.read())

    def get_text(self, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as resp:
            return str(resp.read().decode())

    def kill(self) -> None:
        """SIGKILL the node's whole process group (supervisor and every service)."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        # children die with the group; make sure none lingers holding the store
        wait_for(lambda: not group_alive(self.proc.pid), 30, 0.1, "node group gone")

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM and wait; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                raise AssertionError("node did not stop within timeout") from None
        return int(self.proc.returncode)

    def settle_logs(self, timeout: float = 10) -> None:
        """Wait until the event logs hold what the services logged so far: a service hands
        its events to the spool at least every 200 ms, and the spool's converters
        (services/common/logspool.py) write them to the .jsonl files soon after. For a
        check that an event was *not* logged, which polling cannot make."""
        time.sleep(0.3)

        def settled() -> bool:
            return all(logspool.converted(d) for d in (self.log_dir / "spool").glob("*"))

        wait_for(settled, timeout, 0.05, "event logs written")

    def events(self, name: str | None = None) -> Iterator[dict[str, object]]:
        """Every JSON event line in the node's logs (optionally one event name)."""
        for path in sorted(self.log_dir.glob("*.jsonl*")):
            for line in complete_lines(path):
                if not line.strip():
                    continue
                rec = json.loads(line)
                if name is None or rec.get("event") == name:
                    yield rec


def complete_lines(path: Path) -> list[str]:
    """The lines of a log file that are whole: the converters write while tests read, and
    the last line may still be on its way (a fresh-clone run read half of one)."""
    text = path.read_text(errors="replace")
    return text.split("\n")[:-1]  # the last piece is "" or a line being written


def make_node(base: Path, **settings: str) -> Node:
    return Node(base=base, mqtt_port=free_port(), http_port=free_port(), settings=settings)
