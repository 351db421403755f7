"""A 3-node dev cluster: it forms, detects SIGKILL and SIGSTOP, loses and regains its
majority, takes a node back, refuses a node with the wrong cookie, and stops.

One cluster serves the whole module (starting one costs seconds); the steps run in order
and each leaves the cluster as the next expects. Every wait polls with generous bounds;
the detection times themselves are measured in bench/, not asserted here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.common.pids import alive
from tests.support.admin import admin
from tests.support.clients import Client
from tests.support.cluster import dev_cluster, start_node
from tests.support.node import complete_lines, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIN = Path(sys.executable).parent
N1, N2, N3 = "dev1@127.0.0.1", "dev2@127.0.0.1", "dev3@127.0.0.1"
HTTP = {N1: 10058, N2: 10108, N3: 10158}
BOUND = 20.0  # s: generous, for a loaded CI machine


def get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except OSError:
        return 0, None


def states(node: str) -> dict[str, str]:
    status, rows = get(HTTP[node], "/api/v1/cluster/show")
    return {r["node"]: r["state"] for r in rows} if status == 200 else {}


def health(node: str) -> int:
    return get(HTTP[node], "/health")[0]


def events(base: Path, node: str, name: str) -> list[dict[str, Any]]:
    path = base / node.split("@")[0] / "log" / "gossip.jsonl"
    if not path.exists():
        return []
    lines = [json.loads(line) for line in complete_lines(path) if line.strip()]
    return [e for e in lines if e["event"] == name]


def connack_code(port: int, version: int) -> int:
    """Send a clean CONNECT with a raw socket; the CONNACK's return or reason code."""
    props = b"\x00" if version == 5 else b""
    body = b"\x00\x04MQTT" + bytes([version, 0x02, 0x00, 0x3C]) + props + b"\x00\x03cid"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(bytes([0x10, len(body)]) + body)
        data = b""
        while len(data) < 4:
            chunk = sock.recv(64)
            assert chunk, f"closed after {data!r}"
            data += chunk
    assert data[0] == 0x20, data
    return data[3]


def pid_of(base: Path, node: str) -> int:
    return int((base / node.split("@")[0] / "node.pid").read_text())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with dev_cluster(tmp_path_factory.mktemp("devcluster")) as base:
        yield base


def test_the_command_returns_with_every_node_joined_and_healthy(cluster: Path) -> None:
    for node in (N1, N2, N3):
        assert states(node) == {N1: "up", N2: "up", N3: "up"}
        assert health(node) == 200
        assert (cluster / node.split("@")[0] / "ternmq.conf").exists()
    shown = subprocess.run(
        [str(BIN / "ternmq-admin"), "--node", "127.0.0.1:10058", "cluster", "show"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shown.returncode == 0, shown.stderr
    for node in (N1, N2, N3):
        assert node in shown.stdout
    as_json = subprocess.run(
        [str(BIN / "ternmq-admin"), "--node", "127.0.0.1:10058", "--json", "cluster", "show"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    rows = json.loads(as_json.stdout)
    assert {r["node"]: (r["state"], r["majority"]) for r in rows} == {
        n: ("up", True) for n in (N1, N2, N3)
    }


def test_a_killed_node_is_down_on_the_others_and_the_majority_serves(cluster: Path) -> None:
    assert connack_code(10053, 4) == 0x00
    os.killpg(pid_of(cluster, N3), signal.SIGKILL)
    wait_for(lambda: states(N1).get(N3) == "down" and states(N2).get(N3) == "down", BOUND)
    assert health(N1) == 200 and health(N2) == 200  # 2 of 3 members: a majority
    assert connack_code(10053, 4) == 0x00 and connack_code(10103, 5) == 0x00
    wait_for(lambda: any(e["peer"] == N3 for e in events(cluster, N1, "node.down")), BOUND)


class Acks:
    """A paho client's acknowledgements, by message id: reason codes as ints."""

    def __init__(self, client: Client) -> None:
        self.codes: dict[int, list[int]] = {}
        client.paho.on_publish = lambda _c, _u, mid, rc, _p: self._got(mid, [rc])
        client.paho.on_subscribe = lambda _c, _u, mid, rcs, _p: self._got(mid, rcs)
        client.paho.on_unsubscribe = lambda _c, _u, mid, rcs, _p: self._got(mid, rcs)

    def _got(self, mid: int, codes: Any) -> None:
        self.codes[mid] = [int(getattr(c, "value", c)) for c in codes]

    def wait(self, mid: int) -> list[int]:
        wait_for(lambda: mid in self.codes, BOUND, what=f"the ack of message {mid}")
        return self.codes[mid]


def test_a_paused_node_is_found_by_heartbeats_and_the_minority_says_503(cluster: Path) -> None:
    pid = pid_of(cluster, N2)
    healed_before = len(events(cluster, N1, "netsplit.healed"))
    # connected before the split: they stay connected, and what they ask is refused
    v5 = Client("split-v5", 10053, version=5).connect()
    v4 = Client("split-v4", 10053).connect()
    v5.subscribe("split/kept", 1)
    acks5, acks4 = Acks(v5), Acks(v4)
    os.killpg(pid, signal.SIGSTOP)  # nothing closes: only the probes can tell
    try:
        wait_for(lambda: states(N1).get(N2) == "down", BOUND)
        wait_for(lambda: health(N1) == 503, BOUND)  # n1 alone sees 1 of 3 members
        # (a node that is forming a cluster logs netsplits too: wait for this one)
        wait_for(
            lambda: any(
                set(e["unreachable"]) == {N2, N3} for e in events(cluster, N1, "netsplit.detected")
            ),
            BOUND,
        )
        # I3: the minority refuses CONNECT: 3.1.1 return code 3, 5.0 reason 0x88
        wait_for(lambda: connack_code(10053, 4) == 0x03, BOUND)
        assert connack_code(10053, 5) == 0x88
        # ... and PUBLISH, SUBSCRIBE and UNSUBSCRIBE (allow_*_during_netsplit off):
        # 5.0 hears 0x83 (valid, but not accepted now) on PUBACK, SUBACK and UNSUBACK
        assert acks5.wait(v5.paho.publish("split/t", b"x", 1).mid) == [0x83]
        assert acks5.wait(v5.paho.subscribe("split/new", 1)[1]) == [0x83]
        assert acks5.wait(v5.paho.unsubscribe("split/kept")[1]) == [0x83]
        # 3.1.1 hears SUBACK 0x80; it cannot refuse a PUBLISH, so it is closed unacked
        assert acks4.wait(v4.paho.subscribe("split/new", 1)[1]) == [0x80]
        unacked = v4.paho.publish("split/t", b"y", 1)
        wait_for(v4.disconnected.is_set, BOUND, what="the 3.1.1 publisher closed")
        assert unacked.mid not in acks4.codes
    finally:
        os.killpg(pid, signal.SIGCONT)
        v4.disconnect()
    wait_for(lambda: states(N1).get(N2) == "up" and health(N1) == 200, BOUND)
    wait_for(lambda: len(events(cluster, N1, "netsplit.healed")) > healed_before, BOUND)
    assert events(cluster, N1, "netsplit.healed")[-1]["duration_s"] > 0
    wait_for(lambda: connack_code(10053, 5) == 0x00, BOUND)  # serving again
    try:
        assert acks5.wait(v5.paho.publish("split/t", b"z", 1).mid) in ([0x00], [0x10])
        assert acks5.wait(v5.paho.subscribe("split/new", 1)[1]) == [1]
    finally:
        v5.disconnect()


def _restart_n3(cluster: Path) -> None:
    start_node(cluster, N3)


def test_a_restarted_node_comes_back_with_its_data(cluster: Path) -> None:
    _restart_n3(cluster)
    for node in (N1, N2, N3):
        wait_for(lambda node=node: set(states(node).values()) == {"up"}, BOUND * 2)
    wait_for(lambda: health(N3) == 200, BOUND)


def test_a_dead_member_can_be_removed_and_joins_again_only_when_told(cluster: Path) -> None:
    refused = admin(HTTP[N1], "cluster", "leave", f"node={N2}")
    assert refused.returncode != 0 and "is up" in refused.stdout + refused.stderr
    os.killpg(pid_of(cluster, N3), signal.SIGKILL)
    wait_for(lambda: states(N1).get(N3) == "down", BOUND)
    done = admin(HTTP[N1], "cluster", "leave", f"node={N3}")
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for(lambda: states(N1).get(N3) == "left" and states(N2).get(N3) == "left", BOUND)
    assert health(N1) == 200 and health(N2) == 200  # 2 of the 2 members
    # membership is explicit: restarted with its data, it learns it was removed and
    # serves nobody until it is told to join again
    _restart_n3(cluster)
    wait_for(lambda: get(HTTP[N3], "/health")[0] == 503 and states(N3).get(N3) == "left", BOUND)
    assert states(N1).get(N3) == "left"
    back = admin(HTTP[N3], "cluster", "join", "discovery-node=127.0.0.1:10054")
    assert back.returncode == 0, back.stdout + back.stderr
    for node in (N1, N2, N3):
        wait_for(lambda node=node: set(states(node).values()) == {"up"}, BOUND * 2)
    wait_for(lambda: health(N3) == 200, BOUND)


def test_a_node_with_the_wrong_cookie_is_refused_and_changes_nothing(
    cluster: Path, tmp_path: Path
) -> None:
    conf = tmp_path / "intruder.conf"
    http = free_port()
    conf.write_text(
        "\n".join(
            [
                "nodename = intruder@127.0.0.1",
                f"listener.tcp.default = 127.0.0.1:{free_port()}",
                f"listener.http.default = 127.0.0.1:{http}",
                "cluster.seeds = 127.0.0.1:10054",
                "distributed_cookie = not-the-cookie",
                f"data_dir = {tmp_path / 'data'}",
                f"log_dir = {tmp_path / 'log'}",
                "log.console = off",
            ]
        )
        + "\n"
    )
    proc = subprocess.Popen(
        [str(BIN / "ternmq"), "start", "--config", str(conf)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: any(
                e["peer"] == "intruder@127.0.0.1" for e in events(cluster, N1, "cluster.refused")
            ),
            BOUND * 2,
        )
        refused = [e for e in events(cluster, N1, "cluster.refused")][-1]
        assert refused["reason"] == "wrong distributed_cookie"
        assert get(http, "/health")[0] == 503  # it never joined
        assert set(states(N1)) == {N1, N2, N3}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_stop_stops_every_node(cluster: Path) -> None:
    pids = [pid_of(cluster, n) for n in (N1, N2, N3)]
    done = subprocess.run(
        [str(BIN / "ternmq"), "dev-cluster", "stop", "--base-dir", str(cluster)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    for node in (N1, N2, N3):
        assert node in done.stdout
    for pid in pids:
        wait_for(lambda pid=pid: not alive(pid), BOUND)


def test_the_etl_fills_its_netsplits_table_from_this_run(cluster: Path, tmp_path: Path) -> None:
    """The logs this module's cluster wrote (n1 lost its majority while n2 was paused)
    give the ETL's netsplits table a healed split that n1 saw, with n2 in it."""
    out = tmp_path / "tables"
    run = subprocess.run(
        [str(BIN / "ternmq"), "etl", "run", "--logs", str(cluster), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    sql = "SELECT observers, nodes, duration_s FROM netsplits WHERE healed"
    query = subprocess.run(
        [str(BIN / "ternmq"), "etl", "query", "--out", str(out), "--json", sql],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert query.returncode == 0, query.stdout + query.stderr
    rows = [json.loads(line) for line in query.stdout.splitlines() if line.startswith("{")]
    assert any(N1 in r["observers"] and N2 in r["nodes"] and r["duration_s"] > 0 for r in rows), (
        rows
    )
