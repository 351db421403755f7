"""A msgstore's replication side in one process, for unit tests: a memory store, its
committer and a ``Replicator`` whose replicas are unknown peers (no address), so nothing
is sent anywhere unless a test puts a replica in its place."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from services.common.peer.book import PeerBook
from services.common.session_key import SessionKey
from services.msgstore.cluster.replicator import Replicator
from services.msgstore.committer import Committer
from services.msgstore.engines.memory import MemoryEngine
from services.msgstore.model import OpenQueue, QueueState
from services.msgstore.queue import DBS, QueueStore
from services.pb import msgstore_pb2_grpc


@dataclass
class Primaries:
    store: QueueStore
    committer: Committer
    peers: PeerBook[msgstore_pb2_grpc.ReplicaStub]
    rep: Replicator

    async def open(self, sid: SessionKey, epoch: int, replicas: tuple[str, ...]) -> None:
        """Open ``sid`` here as an Open RPC does (the primary paused, then rebuilt)."""
        self.rep.pause(sid)
        state = await self.committer.submit(OpenQueue(sid, epoch, True, replicas=replicas))
        assert isinstance(state, QueueState) and not state.error, state
        await self.rep.opened(sid)


@contextlib.asynccontextmanager
async def primaries(node: str = "a", w: int = 2, timeout: float = 0.5) -> AsyncIterator[Primaries]:
    store = QueueStore(MemoryEngine(DBS))
    committer = Committer(store, fsync="never")
    committer.start()
    peers: PeerBook[msgstore_pb2_grpc.ReplicaStub] = PeerBook(
        node, "cookie", "127.0.0.1:1", "msgstores", msgstore_pb2_grpc.ReplicaStub
    )
    rep = Replicator(node, store, committer, peers, w, timeout=timeout, rpc_timeout=0.5)
    try:
        yield Primaries(store, committer, peers, rep)
    finally:
        await rep.close()
        await committer.close()
        await peers.close()
