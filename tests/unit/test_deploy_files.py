"""The deployment files in ``deploy/`` against the config schema: every key they set exists
and parses, and their ports, paths and probes are the ones the configuration gives the
node. (HAProxy's file runs for real in tests/integration/test_haproxy.py.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from services.common.config import Config, load
from services.node.schema import checked, schema

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CLUSTER_PORTS = ("cluster.listen", "cluster.forward_listen", "cluster.registry_listen",
                 "cluster.msgstore_listen")  # fmt: skip


def _sets(args: list[str], env: dict[str, str] | None = None) -> dict[str, str]:
    out = {}
    for arg in args:
        assert arg.startswith("--set="), arg
        key, _, value = arg[len("--set=") :].partition("=")
        for name, val in (env or {}).items():
            value = value.replace(f"$({name})", val)
        out[key] = value
    return out


def _node_config(sets: dict[str, str]) -> Config:
    """The configuration a container's command gives its node, checked as ``ternmq start``
    checks it."""
    return checked(load(schema(), DEPLOY / "cluster.conf", sets))


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def test_the_shared_config_loads() -> None:
    config = _node_config({})
    assert config["data_dir"] == "/var/lib/ternmq"
    assert _port(config["listener.tcp.default"]) == 1883


def test_compose_nodes_configure_valid_distinct_nodes() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services: dict[str, Any] = compose["services"]
    nodes = {name: s for name, s in services.items() if name.startswith("ternmq")}
    assert len(nodes) == 3
    names = set()
    for host, svc in nodes.items():
        config = _node_config(_sets(svc["command"]))
        names.add(config["nodename"])
        assert config["nodename"] == f"ternmq@{host}" and svc["hostname"] == host
        for key in CLUSTER_PORTS:
            assert config[key].startswith(f"{host}:"), (host, key)
        assert config["discovery"] == "redis" and "redis:6379" in config["discovery.redis_url"]
        mounts = {m.split(":")[1] for m in svc["volumes"]}
        assert config["data_dir"] in mounts and "/etc/ternmq/ternmq.conf" in mounts
        assert (ROOT / svc["build"]["dockerfile"]).is_file()
    assert len(names) == 3
    config = _node_config({})
    env = services["haproxy"]["environment"]
    used = set(re.findall(r"\$\{(\w+)\}", (DEPLOY / "haproxy.cfg").read_text()))
    assert used <= set(env), used - set(env)
    for k in (1, 2, 3):
        assert _port(env[f"TERNMQ_NODE{k}"]) == _port(config["listener.tcp.default"])
        assert int(env[f"TERNMQ_NODE{k}_HEALTH"]) == _port(config["listener.http.default"])


def test_the_kubernetes_statefulset_matches_the_config() -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "ternmq.yaml").read_text()))
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) >= {"StatefulSet", "Service", "PodDisruptionBudget"}
    sts = kinds["StatefulSet"]
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    config = _node_config(_sets(container["args"], {"POD_NAME": "ternmq-0"}))
    assert config["nodename"] == "ternmq@ternmq-0.ternmq-headless"
    declared = {p["containerPort"] for p in container["ports"]}
    wanted = {_port(config[k]) for k in ("listener.tcp.default", "listener.ws.default",
                                          "listener.http.default", *CLUSTER_PORTS)}  # fmt: skip
    assert wanted <= declared, wanted - declared
    http = _port(config["listener.http.default"])
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": http}
    assert container["livenessProbe"]["tcpSocket"]["port"] == http
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {config["data_dir"], "/etc/ternmq"} <= mounts
    seeds = config["cluster.seeds"].split(",")
    replicas = sts["spec"]["replicas"]
    assert seeds == [f"ternmq-{i}.ternmq-headless:7946" for i in range(replicas)]
    assert kinds["PodDisruptionBudget"]["spec"]["minAvailable"] == replicas // 2 + 1
    for doc in docs:
        if doc["kind"] == "Service":
            for p in doc["spec"]["ports"]:
                assert p.get("targetPort", p["port"]) in declared, p


def test_the_image_runs_as_a_user_with_the_shipped_config_and_probes_health() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    for src in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for path in src.split():
            assert (ROOT / path).exists(), path
    assert re.search(r"^USER ternmq$", text, re.M)
    config = _node_config({})
    http = _port(config["listener.http.default"])
    assert f"http://127.0.0.1:{http}/health" in text
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", text, re.M).group(1).split()}  # type: ignore[union-attr]
    assert {_port(config["listener.tcp.default"]), http} <= exposed
    assert "COPY deploy/cluster.conf /etc/ternmq/ternmq.conf" in text
    assert '"--config", "/etc/ternmq/ternmq.conf"' in text


def test_the_systemd_unit_starts_a_node_from_its_config() -> None:
    unit = (DEPLOY / "ternmq.service").read_text()
    assert re.search(r"^ExecStart=\S*ternmq start --config \S+$", unit, re.M)
    assert re.search(r"^User=ternmq$", unit, re.M)
