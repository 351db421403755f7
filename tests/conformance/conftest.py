"""Fixtures of the conformance suite: one default node shared by the whole package.

Starting a node costs seconds, so modules that need no special setting (02 subpub,
04 retain, 05 will, 07 malformed, 09 takeover) share one package-scoped ``node`` with
the default configuration; their tests use ``unique()`` client ids and topic roots so
they cannot see each other. Modules that need limits of their own override ``node``
with a module-scoped fixture built by ``started_node``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.node import Node, make_node

pytestmark = pytest.mark.integration


def started_node(base: Path, **settings: str) -> Iterator[Node]:
    """Start a node with ``settings``; stop it afterwards, and fail if it did not exit 0."""
    node = make_node(base, **settings)
    node.start()
    try:
        yield node
    finally:
        code = node.stop()
        assert code == 0, node.output()


@pytest.fixture(scope="package")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """The default-configured node shared by the package's modules."""
    yield from started_node(tmp_path_factory.mktemp("conformance"))
