"""MQTT.js (Node) interoperates on 3.1.1 and 5.0: QoS 0/1/2 and retained delivery."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.node import Node

pytestmark = pytest.mark.integration
JS = Path(__file__).resolve().parents[1] / "js"


@pytest.mark.parametrize("version", [4, 5])
def test_mqttjs_pubsub(node: Node, version: int) -> None:
    assert shutil.which("node"), "node is required (installed by the project's CI setup)"
    assert (JS / "node_modules" / "mqtt").is_dir(), "run: npm ci --prefix tests/js"
    out = subprocess.run(
        ["node", str(JS / "pubsub.mjs"), str(node.mqtt_port), str(version)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])["got"]
    assert got[0]["payload"] == "R" and got[0]["retain"] is True
    live = [(m["payload"], m["qos"], m["retain"]) for m in got[1:]]
    assert live == [("q0", 0, False), ("q1", 1, False), ("q2", 2, False)]
