"""Shared fixtures: a real ternmq node per test module where integration needs one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.node import Node, make_node, stop_leftovers


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One node shared by a test module (tests use distinct client ids and topics)."""
    n = make_node(tmp_path_factory.mktemp("node"))
    n.start()
    yield n
    code = n.stop()
    assert code == 0, n.output()


@pytest.fixture
def fresh_node(tmp_path: Path) -> Iterator[Node]:
    """A node of the test's own, for tests that kill or reconfigure it."""
    n = make_node(tmp_path / "node")
    yield n
    if n.proc is not None and n.proc.poll() is None:
        n.stop()


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_nodes() -> Iterator[None]:
    yield
    stop_leftovers()
