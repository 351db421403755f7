"""Fixtures of the conformance suite: nodes shared by several modules.

Starting a node costs seconds, so modules that need no special setting (02 subpub,
04 retain, 05 will, 07 malformed, 09 takeover, 10 subscribe on read) share one
package-scoped ``node`` with the default configuration; their tests use ``unique()``
client ids and topic roots so they cannot see each other. The two 06 modules and 12
(overlapping subscriptions) share ``mqtt5_node``, whose limits are small enough to hit.
Other modules that need limits of their own override ``node`` with a module-scoped
fixture built by ``helpers.started_node``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conformance.helpers import ALIAS_MAX, PACKET_MAX, RECEIVE_MAX, started_node
from tests.support.node import Node


@pytest.fixture(scope="package")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """The default-configured node shared by the package's modules."""
    yield from started_node(tmp_path_factory.mktemp("conformance"))


@pytest.fixture(scope="package")
def mqtt5_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """Receive Maximum 5, Topic Alias Maximum 4, Maximum Packet Size 4 KB, and
    round-robin shared subscriptions (so a test sees every group member receive)."""
    yield from started_node(
        tmp_path_factory.mktemp("mqtt5"),
        receive_max_broker=str(RECEIVE_MAX),
        topic_alias_max_client=str(ALIAS_MAX),
        max_packet_size=str(PACKET_MAX),
        shared_subscription_policy="round_robin",
    )
