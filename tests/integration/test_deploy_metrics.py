"""Every metric the shipped Grafana dashboard and Prometheus alert rules query exists in a
running node's ``/metrics``, and Prometheus scrapes every node of the compose file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.support.node import Node

pytestmark = pytest.mark.integration
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"\b(ternmq_[a-z0-9_]+)\b")


def _queries() -> dict[str, str]:
    """Where each PromQL expression comes from -> the expression."""
    out = {}
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "ternmq.json").read_text())
    for panel in dash["panels"]:
        for target in panel["targets"]:
            out[f"dashboard: {panel['title']}"] = target["expr"]
    rules = yaml.safe_load((DEPLOY / "prometheus" / "ternmq-rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            out[f"alert: {rule['alert']}"] = str(rule["expr"])
    return out


def test_every_queried_metric_is_served(node: Node) -> None:
    served = set(re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", node.get_text("/metrics"), re.M))
    queries = _queries()
    assert len(queries) >= 10
    missing = {
        where: sorted(set(METRIC.findall(expr)) - served)
        for where, expr in queries.items()
        if set(METRIC.findall(expr)) - served
    }
    assert not missing, missing
    assert all(METRIC.search(expr) or "up{" in expr for expr in queries.values())


def test_prometheus_scrapes_every_compose_node() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    nodes = sorted(name for name in compose["services"] if name.startswith("ternmq"))
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = prom["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert sorted(job["static_configs"][0]["targets"]) == [f"{n}:8888" for n in nodes]
    assert prom["rule_files"] == ["/etc/prometheus/ternmq-rules.yml"]
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./prometheus/ternmq-rules.yml:/etc/prometheus/ternmq-rules.yml:ro" in mounts
