"""The soak tool, run briefly against a fresh node: its output is well formed and the node
survives it. Not a memory bound: judging RSS takes the long run (docs/soak.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.node import Node, complete_lines, make_node

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BENCH = Path(__file__).resolve().parents[2] / "bench"
SERVICES = {"supervisor", "listener", "registry", "gossip", "msgstore"}


@pytest.fixture
def soak_node(tmp_path: Path) -> Iterator[Node]:
    node = make_node(tmp_path / "node", persistent_client_expiration="60s")
    node.start()
    yield node
    assert node.stop() == 0, node.output()


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in complete_lines(path)]


def test_short_soak_is_well_formed_and_restarts_nothing(soak_node: Node, tmp_path: Path) -> None:
    out = tmp_path / "soak.jsonl"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH / "soak.py"),
            *("--port", str(soak_node.mqtt_port), "--http", str(soak_node.http_port)),
            *("--clients", "50", "--minutes", "0.2", "--interval", "2", "--drain", "5"),
            *("--expiry", "60", "--sleep-min", "0.5", "--sleep-max", "3", "--timeout", "10"),
            *("--out", str(out)),
        ],
        capture_output=True,
        timeout=90,
    )
    # exit 0: no service restarted and every acknowledged inbox message was delivered
    assert run.returncode == 0, run.stdout.decode() + run.stderr.decode()[-3000:]

    records = _records(out)
    start, samples, end = records[0], records[1:-1], records[-1]
    assert start["kind"] == "start" and start["args"]["clients"] == 50
    assert end["kind"] == "end"
    assert len(samples) >= 5 and all(s["kind"] == "sample" for s in samples)
    assert [s["t"] for s in samples] == sorted(s["t"] for s in samples)
    assert {s["phase"] for s in samples} >= {"start", "load", "drain", "end"}
    for s in samples:
        assert s["problems"] == [], s["problems"]
        assert s["rss_kb"].keys() >= SERVICES
        assert all(isinstance(kb, int) and kb > 1000 for kb in s["rss_kb"].values())
        assert isinstance(s["state"]["sessions"], int)
        assert isinstance(s["state"]["retained"], int)
        assert "subscriptions" in s["state"] and "msgstore_queues" in s["state"]
    assert max(s["state"]["sessions"] for s in samples) > 0
    assert end["load"]["cycles"] > 50 and end["load"]["inbox_acked"] > 0
    assert all(isinstance(s["load"]["sessions_expected"], int) for s in samples)
    assert end["lost"] == 0 and end["node_alive_at_end"]
    assert set(end["restarts"].values()) == {0}

    status: Any = soak_node.get_json("/status")
    assert {c["restarts"] for c in status["children"].values()} == {0}
    assert soak_node.health() == 200

    png, summary = tmp_path / "soak.png", tmp_path / "summary.md"
    plot_args = [str(out), "--png", str(png), "--summary", str(summary)]
    plot = subprocess.run(
        [sys.executable, str(BENCH / "soak_plot.py"), *plot_args],
        capture_output=True,
        timeout=60,
    )
    assert plot.returncode == 0, plot.stderr.decode()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = summary.read_text()
    assert "slope MB/10 min" in text
    for name in SERVICES:
        assert f"| {name} |" in text
