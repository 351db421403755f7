"""``ternmq-admin cluster join discovery-node=HOST:PORT``: two nodes started alone become one
cluster; a join to an address where no member answers fails with a clear error."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.node import Node, free_port, make_node, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ADMIN = str(Path(sys.executable).parent / "ternmq-admin")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    a, b = make_node(tmp_path / "a"), make_node(tmp_path / "b")
    a.start()
    b.start()
    try:
        yield a, b
    finally:
        a.stop()
        b.stop()


def members(node: Node) -> dict[str, Any]:
    rows = node.get_json("/api/v1/cluster/show")
    assert isinstance(rows, list)
    return {r["node"]: r for r in rows}


def admin(node: Node, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ADMIN, "--node", f"127.0.0.1:{node.http_port}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_two_nodes_started_alone_join_into_one_cluster(pair: tuple[Node, Node]) -> None:
    a, b = pair
    (a_name,) = members(a)
    (b_name,) = members(b)
    a_address = members(a)[a_name]["address"]  # cluster.listen port 0: the bound one
    done = admin(b, "cluster", "join", f"discovery-node={a_address}")
    assert done.returncode == 0, done.stderr
    assert a_name in done.stdout and b_name in done.stdout
    for node in (a, b):
        wait_for(
            lambda node=node: (
                {n: r["state"] for n, r in members(node).items()} == {a_name: "up", b_name: "up"}
            ),
            20,
        )
        # healthy once its registry has caught up with the other's votes (catchup.py)
        wait_for(lambda node=node: node.health() == 200, 20)


def test_a_join_where_no_member_answers_fails_and_says_why(pair: tuple[Node, Node]) -> None:
    _, b = pair
    done = admin(b, "cluster", "join", f"discovery-node=127.0.0.1:{free_port()}")
    assert done.returncode != 0
    assert "UNAVAILABLE" in done.stderr or "DEADLINE" in done.stderr, done.stderr
    assert len(members(b)) == 1 and b.health() == 200
    bad = admin(b, "cluster", "join", "127.0.0.1:1")
    assert bad.returncode != 0 and "discovery-node=HOST:PORT" in bad.stderr
