"""Redis discovery against a real redis-server started here: nodes that only know the
Redis find each other and form one cluster, a stopped node takes its registration with
it, and a node with another cookie in the same Redis stays apart."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from services.gossip.cluster.discovery import PREFIX, cluster_id
from tests.support.node import Node, free_port, make_node, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COOKIE = "rd-cookie"
BOUND = 60.0


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = shutil.which("redis-server")
    assert server, "redis-server is required (installed by .ci/run)"
    port = free_port()
    work = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
         "no", "--dir", str(work)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port, socket_timeout=2)
    try:
        wait_for(lambda: _pings(client), 30, 0.1, "redis-server answering")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _node(base: Path, name: str, url: str, cookie: str = COOKIE) -> Node:
    return make_node(
        base / name,
        **{
            "nodename": f"{name}@127.0.0.1",
            "discovery": "redis",
            "discovery.redis_url": url,
            "discovery.redis_ttl": "3s",
            "distributed_cookie": cookie,
        },
    )


def _members(node: Node) -> dict[str, str]:
    rows: Any = node.get_json("/api/v1/cluster/show")
    return {r["node"]: r["state"] for r in rows}


def test_nodes_that_know_only_the_redis_form_one_cluster(redis_url: str, tmp_path: Path) -> None:
    nodes = [_node(tmp_path, f"rd{k}", redis_url) for k in (1, 2, 3)]
    loner = _node(tmp_path, "apart", redis_url, cookie="another-cookie")
    try:
        for n in [*nodes, loner]:
            n.start(wait=False)
        names = {f"rd{k}@127.0.0.1" for k in (1, 2, 3)}
        for n in nodes:
            n.wait_healthy(BOUND)
            wait_for(lambda n=n: _members(n) == dict.fromkeys(names, "up"), BOUND)
        loner.wait_healthy(BOUND)  # alone in its own cluster: it started it
        assert _members(loner) == {"apart@127.0.0.1": "up"}
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        ours = f"{PREFIX}{cluster_id(COOKIE)}:"
        assert {k[len(ours) :] for k in client.scan_iter(match=ours + "*")} == names
        assert nodes[2].stop() == 0  # a graceful stop takes its registration with it
        assert client.get(ours + "rd3@127.0.0.1") is None
        wait_for(lambda: _members(nodes[0]).get("rd3@127.0.0.1") == "down", BOUND)
    finally:
        for n in [*nodes, loner]:
            if n.proc is not None and n.proc.poll() is None:
                n.stop()
