"""Shared fixtures: a real ternmq node per test module where integration needs one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.node import Node, make_node, stop_leftovers

ROOT = Path(__file__).resolve().parent.parent

# No ETL run of the tests (nor the processes they start) writes a class archive to the
# user's cache; the one test of it names its own directory.
os.environ.setdefault("TERNMQ_ETL_CLASS_CACHE", "off")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to test a compiled module older than its source (README, "Compiled
    modules"): the extension would be imported instead of the edited ``.py``."""
    stale = []
    for ext in (ROOT / "services").rglob("*.so"):
        source = ext.with_name(ext.name.split(".")[0] + ".py")
        if source.exists() and source.stat().st_mtime > ext.stat().st_mtime:
            stale.append(str(source.relative_to(ROOT)))
    if stale:
        pytest.exit(f"compiled modules older than their source (run make install): {stale}", 2)


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
