"""Where the other nodes' registries take quorum calls, followed from gossip.

Each registry writes a ``RegistryRecord`` under gossip prefix ``registries`` when it
starts (its bound ``cluster.registry_listen`` address and incarnation); every registry
follows the prefix and keeps one channel per peer (:class:`~services.common.peer.book.PeerBook`).
"""

from __future__ import annotations

from services.common.peer.book import PeerBook
from services.pb import quorum_pb2_grpc

PREFIX = "registries"


def record_key(node: str) -> bytes:
    return node.encode()


class Peers(PeerBook[quorum_pb2_grpc.QuorumStub]):
    """Node name -> a Quorum stub to its registry, and the proof every call carries."""

    def __init__(self, node: str, cookie: str, address: str) -> None:
        super().__init__(node, cookie, address, PREFIX, quorum_pb2_grpc.QuorumStub)
