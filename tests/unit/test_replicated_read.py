"""A resume's read of a replicated queue serves what is committed, not what merely sits
in the primary's copy.

An append is in the primary's store before its batch is committed on W copies (its
publisher's answer, and a live delivery, wait for that). A read that handed it out would
deliver a message a failover can lose, and a QoS 2 publisher that was never answered
sends again: delivered twice. ``Replicator.readable_upto`` waits for the commit (at most
``msgstore.failover_timeout``) and says how far a read may go.

A real store, committer and ``Replicator``; the replicas are unknown peers (no address),
so nothing is sent anywhere and nothing commits on more than this copy."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from services.common.session_key import SessionKey
from services.msgstore.committer import Committer
from services.msgstore.model import Append, AppendStatus, BatchResult, WriteBatch
from services.msgstore.servicer import MsgStoreServicer
from services.pb import common_pb2, msgstore_pb2
from tests.support.replicator import primaries

C1: SessionKey = ("", "c1")


async def _append(committer: Committer, n: int) -> list[int]:
    appends = tuple(Append(C1, 0, b"m") for _ in range(n))
    result = await committer.submit(WriteBatch(1, appends=appends))
    assert isinstance(result, BatchResult)
    assert all(r.status == AppendStatus.OK for r in result.results), result
    return [r.seq for r in result.results]


def test_a_read_waits_for_the_commit_and_is_cut_where_none_came() -> None:
    async def run() -> None:
        async with primaries(w=2, timeout=0.3) as p:
            await p.open(C1, 5, ("a", "b", "c"))
            seqs = await _append(p.committer, 2)
            p.rep.appended(C1, seqs)
            t0 = time.monotonic()
            upto = await p.rep.readable_upto(C1, seqs[-1])
            assert upto == 0, "on this copy alone: nothing may be served"
            assert time.monotonic() - t0 >= 0.25, "it waited for a commit first"
            assert await p.rep.readable_upto(("", "other"), 7) is None, "not led here"

    asyncio.run(run())


def test_a_committed_read_is_served_at_once_and_stays_so_across_an_open() -> None:
    async def run() -> None:
        async with primaries(w=1, timeout=5.0) as p:
            await p.open(C1, 5, ("a", "b"))
            seqs = await _append(p.committer, 3)
            fut = p.rep.appended(C1, seqs)
            assert fut is not None and await p.rep.wait({C1: fut}) == set()
            upto = await asyncio.wait_for(p.rep.readable_upto(C1, seqs[-1]), 0.2)
            assert upto == seqs[-1]
            # the client reconnects here: an Open at a newer epoch rebuilds the primary,
            # which stays this node's; what it committed needs no new round
            await p.open(C1, 6, ("a", "b"))
            upto = await asyncio.wait_for(p.rep.readable_upto(C1, seqs[-1]), 0.2)
            assert upto == seqs[-1]

    asyncio.run(run())


def test_a_read_cut_short_answers_more_so_the_resume_reads_on() -> None:
    """Served entries come out; the uncommitted rest makes ``more`` true, so the resume
    reads again (and waits) rather than replaying without them while newer live
    messages overtake them."""

    async def run() -> None:
        async with primaries(w=2, timeout=0.2) as p:
            await p.open(C1, 5, ("a", "b", "c"))
            servicer = MsgStoreServicer(p.store, p.committer)
            servicer.cluster = SimpleNamespace(replicator=p.rep)  # type: ignore[assignment]
            request = msgstore_pb2.ReadRequest(
                key=common_pb2.SessionKey(mountpoint=C1[0], client_id=C1[1]), epoch=5
            )
            seqs = await _append(p.committer, 2)
            p.rep.appended(C1, seqs)
            reply = await servicer.Read(request, None)
            assert [e.seq for e in reply.entries] == [] and reply.more
            assert reply.state.last_seq == seqs[-1]

    asyncio.run(run())
