"""A primary that a newer one supersedes refuses every append from then on.

The fault test caught one that did not: superseded (its replicas answered that they
follow a failover's newer epoch), it dropped the queue from its primaries, and the
appends that reached its own copy next were committed there alone and answered as a
success at once. The handover to the new primary then deleted that copy, and two
acknowledged messages with it. Now the queue is remembered as stepped down (such
appends fail, their publishers are refused and send again) and the local copy is fenced
at the newer epoch (the store refuses them itself).

A real store, committer and ``Replicator``; the replicas are unknown peers (no address),
so nothing is sent anywhere."""

from __future__ import annotations

import asyncio

from services.common.session_key import SessionKey
from services.msgstore.committer import Committer
from services.msgstore.model import Append, AppendStatus, BatchResult, WriteBatch
from tests.support.replicator import primaries

C1: SessionKey = ("", "c1")


async def _append(committer: Committer, epoch: int = 0) -> tuple[AppendStatus, int]:
    result = await committer.submit(WriteBatch(1, appends=(Append(C1, epoch, b"m"),)))
    assert isinstance(result, BatchResult)
    (res,) = result.results
    return res.status, res.seq


def test_a_superseded_primary_fails_what_reaches_its_copy_and_fences_it() -> None:
    async def run() -> None:
        async with primaries() as p:
            committer, rep = p.committer, p.rep
            await p.open(C1, 5, ("a", "b", "c"))
            assert C1 in rep.queues
            # an append in flight: waits for W copies, which never come
            status, seq = await _append(committer)
            assert status == AppendStatus.OK
            waiting = rep.appended(C1, [seq])
            assert waiting is not None and not waiting.done()

            rep.superseded(C1, 6)  # a failover elsewhere, at epoch 6
            assert C1 not in rep.queues and rep.stepped_down == {C1: 6}
            assert await rep.wait({C1: waiting}) == {C1}
            # committed here before the fence lands: failed, never a bare success
            late = rep.appended(C1, [seq + 1])
            assert late is not None and await rep.wait({C1: late}) == {C1}
            # and once the fence is in, the store refuses them itself
            for _ in range(100):
                status, _seq = await _append(committer)
                if status != AppendStatus.OK:
                    break
                await asyncio.sleep(0.01)
            assert status == AppendStatus.STALE_EPOCH
            # a rebuild under way from before (an append out of step spawns one) finds
            # the fenced copy and leads nothing: the queue stays stepped down
            await rep.opened(C1)
            assert C1 not in rep.queues and rep.stepped_down == {C1: 6}
            # an Open here makes this node the primary again
            await p.open(C1, 7, ("a", "b"))
            assert C1 in rep.queues and C1 not in rep.stepped_down

    asyncio.run(run())
