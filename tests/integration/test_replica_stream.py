"""A primary's appends reach its replica over ``Replica.AppendStream``, through real gRPC
on loopback and the cookie check: committed on both copies; a replica node that does
not serve the stream (an older version) gets ``AppendMany`` calls; and a replica whose
server goes away fails what was out, and is fed again over a new stream once it is
back, in order, with nothing lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import pytest

from services.common.peer import channel as peer_channel
from services.common.peer.book import PeerBook
from services.common.session_key import SessionKey
from services.msgstore.cluster import stream as stream_mod
from services.msgstore.cluster.replicator import ReplicaPeerStub, Replicator
from services.msgstore.cluster.servicer import SERVICE, ReplicaServicer, add_to_server
from services.msgstore.committer import Committer
from services.msgstore.engines.memory import MemoryEngine
from services.msgstore.model import Append, BatchResult, OpenQueue, QueueState, WriteBatch
from services.msgstore.queue import DBS, QueueStore
from services.pb import msgstore_pb2 as pb
from services.pb.msgstore_pb2_grpc import ReplicaStub

pytestmark = pytest.mark.integration

C1: SessionKey = ("", "c1")
COOKIE = "stream-test-cookie"


class Node:
    def __init__(self, name: str) -> None:
        self.name = name
        self.store = QueueStore(MemoryEngine(DBS))
        self.committer = Committer(self.store, fsync="never")


@asynccontextmanager
async def replica_server(
    node: Node, rep: Replicator, port: int, stream: bool
) -> AsyncIterator[int]:
    """``node``'s Replica service on 127.0.0.1 (``stream`` False: as an older version,
    without AppendStream); yields the port."""
    server = peer_channel.create_server(COOKIE)
    servicer = ReplicaServicer(node.store, node.committer, rep)
    if stream:
        add_to_server(servicer, server)
    else:
        handlers = {
            "Append": grpc.unary_unary_rpc_method_handler(
                servicer.Append, pb.ReplicaAppend.FromString, pb.ReplicaReply.SerializeToString
            ),
            "AppendMany": grpc.unary_unary_rpc_method_handler(
                servicer.AppendMany,
                pb.ReplicaAppends.FromString,
                pb.ReplicaReplies.SerializeToString,
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        yield bound
    finally:
        await server.stop(None)


@asynccontextmanager
async def nodes() -> AsyncIterator[tuple[Node, Node, Replicator]]:
    """Nodes ``a`` (the primary) and ``b`` (its replica, with ``b``'s own replicator),
    their committers running."""
    a, b = Node("a"), Node("b")
    a.committer.start()
    b.committer.start()
    rep_b = Replicator(
        "b", b.store, b.committer, PeerBook("b", COOKIE, "", "m", ReplicaStub), 2, 5.0
    )
    try:
        yield a, b, rep_b
    finally:
        await a.committer.close()
        await b.committer.close()


async def _append(a: Node, rep: Replicator, n: int, tag: bytes) -> tuple[list[int], Any]:
    datas = [tag + b"%d" % i for i in range(n)]
    result = await a.committer.submit(WriteBatch(1, appends=tuple(Append(C1, 0, d) for d in datas)))
    assert isinstance(result, BatchResult)
    seqs = [r.seq for r in result.results]
    return seqs, rep.appended(C1, seqs, datas)


def _messages(store: QueueStore) -> dict[int, bytes]:
    return dict(store.read(C1, 0, 0, 100_000).entries)


async def _primary(a: Node, port: int) -> tuple[Replicator, PeerBook[ReplicaStub]]:
    peers: PeerBook[ReplicaStub] = PeerBook(
        "a", COOKIE, "127.0.0.1:1", "msgstores", ReplicaPeerStub
    )
    peers.addresses["b"] = f"127.0.0.1:{port}"
    rep = Replicator("a", a.store, a.committer, peers, 2, timeout=10.0, rpc_timeout=1.0)
    rep.pause(C1)
    state = await a.committer.submit(OpenQueue(C1, 1, True, replicas=("a", "b")))
    assert isinstance(state, QueueState) and not state.error
    await rep.opened(C1)
    return rep, peers


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "older-replica"])
def test_appends_commit_on_the_replica(stream: bool) -> None:
    async def run() -> None:
        async with (
            nodes() as (a, b, rep_b),
            replica_server(b, rep_b, 0, stream) as port,
        ):
            rep, peers = await _primary(a, port)
            try:
                for round_ in range(5):
                    futs = [(await _append(a, rep, 20, b"r%d-" % round_))[1] for _ in range(3)]
                    assert await rep.wait({C1: asyncio.gather(*futs)}) == set()  # type: ignore[dict-item]
                assert _messages(b.store) == _messages(a.store) and len(_messages(a.store)) == 300
                if stream:
                    assert rep._streams["b"].opened == 1 and "b" not in rep._unary
                else:
                    assert "b" in rep._unary and "b" not in rep._legacy
            finally:
                await rep.close()
                await peers.close()

    asyncio.run(run())


def test_a_replica_that_goes_away_is_fed_again_over_a_new_stream() -> None:
    async def run() -> None:
        mp = pytest.MonkeyPatch()
        mp.setattr(stream_mod, "BACKOFF_MIN", 0.05)
        async with nodes() as (a, b, rep_b):
            async with replica_server(b, rep_b, 0, True) as port:
                rep, peers = await _primary(a, port)
                _, fut = await _append(a, rep, 10, b"before-")
                assert await rep.wait({C1: fut}) == set()
            try:
                # the replica's server is gone: what goes out now waits, uncommitted
                _, fut = await _append(a, rep, 10, b"while-down-")
                await asyncio.sleep(0.5)
                assert not fut.done()
                qp = rep.queues[C1]
                assert qp.notes["b"] != "ok"  # the failure recorded, as for a failed call
                async with replica_server(b, rep_b, port, True):
                    assert await rep.wait({C1: fut}) == set()  # committed over a new stream
                    _, fut = await _append(a, rep, 10, b"after-")
                    assert await rep.wait({C1: fut}) == set()
                    assert rep._streams["b"].opened >= 2
                    assert _messages(b.store) == _messages(a.store)
                    assert len(_messages(b.store)) == 30
            finally:
                await rep.close()
                await peers.close()
                mp.undo()

    asyncio.run(run())


def test_a_primary_without_the_cookie_is_refused_and_commits_nothing() -> None:
    async def run() -> None:
        async with nodes() as (a, b, rep_b), replica_server(b, rep_b, 0, True) as port:
            rep, peers = await _primary(a, port)
            peers.caller.cookie = "another cluster's cookie"
            try:
                _, fut = await _append(a, rep, 5, b"x-")
                await asyncio.sleep(0.5)
                assert not fut.done()  # not committed: the replica took nothing
                assert "UNAUTHENTICATED" in rep.queues[C1].notes["b"]
                assert _messages(b.store) == {}
                assert "b" not in rep._unary  # refused, not taken for an older version
            finally:
                await rep.close()
                await peers.close()

    asyncio.run(run())
