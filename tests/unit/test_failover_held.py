"""A failover says whether any copy it read held the queue (``QueueState.held``): the
registry's retry of a claim that found its own refused attempt resumes the session only
then, and otherwise starts it afresh (session_present 0), since the attempt's register
entry alone does not tell a session that existed from a new one.

A real store, committer and ``Replicator``, this node's copy the only one read."""

from __future__ import annotations

import asyncio

from services.common.session_key import SessionKey
from services.msgstore.cluster.servicer import Failover
from services.msgstore.model import (
    Append,
    AppendStatus,
    BatchResult,
    OpenQueue,
    QueueState,
    WriteBatch,
)
from services.pb import common_pb2, msgstore_pb2
from tests.support.replicator import Primaries, primaries

C1: SessionKey = ("", "c1")


def _request(epoch: int) -> msgstore_pb2.FailoverRequest:
    return msgstore_pb2.FailoverRequest(
        key=common_pb2.SessionKey(mountpoint=C1[0], client_id=C1[1]),
        epoch=epoch,
        copies=["a"],
        replicas=["a", "b"],
    )


def _failover(p: Primaries) -> Failover:
    return Failover("a", p.store, p.committer, p.peers, p.rep, 2, 0.5)  # W = R = 2


def test_a_failover_over_a_copy_with_the_queue_says_it_was_held() -> None:
    async def run() -> None:
        async with primaries(w=1) as p:
            await p.open(C1, 5, ("a", "b"))
            appends = (Append(C1, 0, b"m"), Append(C1, 0, b"n"))
            done = await p.committer.submit(WriteBatch(1, appends=appends))
            assert isinstance(done, BatchResult)
            assert all(r.status == AppendStatus.OK for r in done.results), done
            state = await _failover(p).run(_request(6))
            assert not state.error, state.error
            assert state.held and state.count == 2 and state.epoch == 6

    asyncio.run(run())


def test_a_failover_that_found_no_queue_says_so() -> None:
    async def run() -> None:
        async with primaries(w=1) as p:
            state = await _failover(p).run(_request(6))
            assert not state.error, state.error
            assert not state.held and state.count == 0

    asyncio.run(run())


def test_a_fresh_sessions_open_follows_a_failover_that_found_nothing() -> None:
    """The registry's retry of a lost attempt, told that no copy held the queue, starts
    the session afresh: its plan opens the queue at the claim's epoch, the one the
    failover has just opened it at as primary. The store takes it."""

    async def run() -> None:
        async with primaries(w=1) as p:
            state = await _failover(p).run(_request(6))
            assert not state.error and not state.held
            p.rep.pause(C1)
            fresh = OpenQueue(C1, 6, create=True, clean=True, replicas=("a", "b"))
            opened = await p.committer.submit(fresh)
            await p.rep.opened(C1)
            assert isinstance(opened, QueueState) and not opened.error, opened
            assert opened.exists and opened.epoch == 6 and opened.count == 0

    asyncio.run(run())
