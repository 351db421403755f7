"""The primary sends messages it keeps in memory (``QueuePrimary.held``), not read back
from its store: what a replica receives must be exactly what the store holds, whatever
the batches, lost calls, client acknowledgements and the memory bound do.

A real primary store, committer and ``Replicator``; the replica is a second real store
behind a stand-in for the per-node batcher that applies each append with the replica
servicer's own conversions, and loses calls when told to."""

from __future__ import annotations

import asyncio
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.session_key import SessionKey
from services.msgstore.cluster import replicator as replicator_mod
from services.msgstore.cluster.servicer import replica_reply, replica_write
from services.msgstore.engines.memory import MemoryEngine
from services.msgstore.model import (
    Ack,
    Append,
    BatchResult,
    ReplicaState,
    WriteBatch,
)
from services.msgstore.queue import DBS, QueueStore
from services.pb import msgstore_pb2
from tests.support.replicator import primaries

C1: SessionKey = ("", "c1")


class Replica:
    """Node b's copy, fed as ``ReplicaServicer._append`` feeds it."""

    def __init__(self, rng: random.Random, loss: float) -> None:
        self.store = QueueStore(MemoryEngine(DBS))
        self.rng = rng
        self.loss = loss
        self.calls = 0

    async def call(self, data: bytes) -> msgstore_pb2.ReplicaReply:
        pb = msgstore_pb2.ReplicaAppend.FromString(data)  # as the primary wrote it
        self.calls += 1
        # slow enough, at times, that several batches land while a call is out
        await asyncio.sleep(self.rng.choice((0, 0, 0.002, 0.01)))
        if self.rng.random() < self.loss:
            raise LookupError("lost")
        (state,) = self.store.write_group([replica_write(pb)])
        assert isinstance(state, ReplicaState)
        return replica_reply(state)


def _messages(store: QueueStore) -> dict[int, bytes]:
    return dict(store.read(C1, 0, 0, 100_000).entries)


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.integers(1, 12), min_size=1, max_size=25),
    held_max=st.sampled_from([64, 400, 64 * 1024 * 1024]),
    loss=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**16),
)
def test_a_replica_gets_exactly_what_the_primary_stored(
    batches: list[int], held_max: int, loss: float, seed: int
) -> None:
    rng = random.Random(seed)
    mp = pytest.MonkeyPatch()
    mp.setattr(replicator_mod, "HELD_MAX", held_max)  # from "nothing fits" to "all fits"
    mp.setattr(replicator_mod, "RETRY", 0.001)
    reads: list[tuple[int, int]] = []
    read_entries = replicator_mod.read_entries

    def counted(store: QueueStore, sid: SessionKey, first: int, last: int):  # type: ignore[no-untyped-def]
        reads.append((first, last))
        return read_entries(store, sid, first, last)

    mp.setattr(replicator_mod, "read_entries", counted)

    async def run() -> None:
        async with primaries(timeout=5.0) as p:
            store, committer, peers, rep = p.store, p.committer, p.peers, p.rep
            replica = Replica(rng, loss)
            mp.setattr(peers, "stub", lambda node: object())  # an address is known
            rep._batchers["b"] = replica  # type: ignore[assignment]
            await p.open(C1, 1, ("a", "b"))
            acked: set[int] = set()
            pending: list[asyncio.Future[None]] = []
            biggest = 0
            for i, n in enumerate(batches):
                datas = [rng.randbytes(rng.randint(0, 40)) + b"%d" % i for _ in range(n)]
                result = await committer.submit(
                    WriteBatch(1, appends=tuple(Append(C1, 0, d) for d in datas))
                )
                assert isinstance(result, BatchResult)
                seqs = [r.seq for r in result.results]
                fut = rep.appended(C1, seqs, datas)
                assert fut is not None
                pending.append(fut)
                if rng.random() < 0.3:  # otherwise the next batch lands while this one is out
                    assert await rep.wait({C1: fut}) == set()
                else:
                    await asyncio.sleep(0)
                if rng.random() < 0.4:  # the client acknowledges some, in any order
                    done = rng.sample(seqs, rng.randint(0, len(seqs)))
                    await committer.submit(WriteBatch(2, acks=(Ack(C1, 0, tuple(done)),)))
                    acked.update(done)
                qp = rep.queues[C1]
                # the accounting and the run without a gap
                assert rep.held_bytes == sum(map(len, qp.held.values()))
                assert sorted(qp.held) == list(range(qp.held_low, qp.held_low + len(qp.held)))
                biggest = max(biggest, sum(map(len, datas)))
                assert rep.held_bytes < held_max + biggest  # one batch over, at most
            for fut in pending:
                assert await rep.wait({C1: fut}) == set()
            # committed: the replica holds every message the primary still holds,
            # byte for byte, at the same seq (it may hold more: acknowledged since)
            mine, theirs = _messages(store), _messages(replica.store)
            assert all(theirs.get(seq) == data for seq, data in mine.items())
            assert not set(mine) & acked
        assert rep.held_bytes == 0  # released with the primary
        if held_max > 1024 * 1024:
            assert reads == []  # everything sent came from memory

    try:
        asyncio.run(run())
    finally:
        mp.undo()
