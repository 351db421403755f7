"""An append to a replicated queue that no primary here leads is refused, not answered.

The CI fault run of 2026-11-28 (seed 20261126) lost an acknowledged message this way.
A node led a subscriber's queue at epoch 2052; its primary left the replicator (its
rebuild found the copy was not this node's to lead), while the store still took appends
for the queue. Appends that found no primary were answered at once, as if the queue
were not replicated: committed on that copy alone, delivered, acknowledged by the
client. The next failover read that copy's acknowledged index and applied it to the
chosen history, whose message at one of those seqs was another one, acknowledged to
its publisher: dropped. Now the store names the replicated queues each batch touched
(``BatchResult.replicated``) and the servicer fails the appends and marks of those no
primary leads; and a failover applies only acknowledgements of its own history
(``failover.acked_upto``).

A real store, committer and ``Replicator``; the replicas are unknown peers (no address),
so nothing is sent anywhere.
"""

from __future__ import annotations

import asyncio

from services.common.session_key import SessionKey
from services.msgstore.convert import result_to_pb
from services.msgstore.model import (
    Append,
    AppendStatus,
    BatchResult,
    Mark,
    MarkKind,
    OpenQueue,
    QueueState,
    WriteBatch,
)
from services.msgstore.replication.failover import acked_upto
from services.msgstore.replication.log import ReplicaLog
from services.msgstore.servicer import MsgStoreServicer
from tests.support.replicator import primaries

LED: SessionKey = ("", "led-elsewhere")
PLAIN: SessionKey = ("", "plain")


def test_appends_and_marks_of_an_unled_replicated_queue_fail() -> None:
    async def run() -> None:
        async with primaries() as p:
            committer, rep = p.committer, p.rep
            # replicated, but its record names another node first: not led from here
            await p.open(LED, 5, ("b", "a", "c"))
            assert LED not in rep.queues and LED not in rep.stepped_down
            state = await committer.submit(OpenQueue(PLAIN, 5, True))
            assert isinstance(state, QueueState) and not state.error

            appends = (Append(LED, 5, b"m1"), Append(PLAIN, 5, b"m2"))
            marks = (Mark(LED, 5, MarkKind.OUTBOUND_PUBREL, 1, True),)
            result = await committer.submit(WriteBatch(1, appends=appends, marks=marks))
            assert isinstance(result, BatchResult)
            # the store took both (it cannot tell who leads) and says which is replicated
            assert [r.status for r in result.results] == [AppendStatus.OK] * 2
            assert result.replicated == {LED}
            await MsgStoreServicer._replicated(rep, appends, result, marks)
            assert [r.status for r in result.results] == [
                AppendStatus.STORE_ERROR,
                AppendStatus.OK,
            ]
            assert result.marks_error

            # a batch of the plain queue alone is answered as before
            alone = (Append(PLAIN, 5, b"m3"),)
            result = await committer.submit(WriteBatch(2, appends=alone))
            assert isinstance(result, BatchResult) and not result.replicated
            await MsgStoreServicer._replicated(rep, alone, result)
            assert [r.status for r in result.results] == [AppendStatus.OK]
            assert not result.error and not result.marks_error

    asyncio.run(run())


def test_marks_refused_for_an_older_epoch_are_a_marks_error() -> None:
    async def run() -> None:
        async with primaries() as p:
            state = await p.committer.submit(OpenQueue(PLAIN, 5, True))
            assert isinstance(state, QueueState) and not state.error
            ok = (Mark(PLAIN, 5, MarkKind.INBOUND_QOS2, 7, True),)
            result = await p.committer.submit(WriteBatch(1, marks=ok))
            assert isinstance(result, BatchResult) and not result.marks_error
            stale = (Mark(PLAIN, 4, MarkKind.INBOUND_QOS2, 8, True),)
            result = await p.committer.submit(WriteBatch(2, marks=stale))
            assert isinstance(result, BatchResult) and result.marks_error
            assert result.stale_acks == 1

    asyncio.run(run())


def test_a_stale_mark_fails_only_its_own_sessions_marks() -> None:
    """One batch carries a mark of a session taken over since (an older epoch) and one of
    a live session: the store names the first alone, so the listener closes only its
    connection (before, every connection whose mark rode the batch was closed)."""
    other: SessionKey = ("", "other")

    async def run() -> None:
        async with primaries() as p:
            for sid in (PLAIN, other):
                state = await p.committer.submit(OpenQueue(sid, 5, True))
                assert isinstance(state, QueueState) and not state.error
            marks = (
                Mark(PLAIN, 4, MarkKind.INBOUND_QOS2, 8, True),
                Mark(other, 5, MarkKind.INBOUND_QOS2, 9, True),
            )
            result = await p.committer.submit(WriteBatch(1, marks=marks))
            assert isinstance(result, BatchResult) and result.marks_error
            assert result.marks_failed == {PLAIN}
            reply = result_to_pb(result)
            assert [(k.mountpoint, k.client_id) for k in reply.marks_failed] == [PLAIN]

    asyncio.run(run())


def test_marks_failed_for_narrows_nothing_once_every_mark_failed() -> None:
    whole = BatchResult(1, [], marks_error="the store failed")  # every mark: None
    whole.marks_failed_for({PLAIN})
    assert whole.marks_error == "the store failed" and whole.marks_failed is None
    fresh = BatchResult(2, [])
    fresh.marks_failed_for({PLAIN})
    assert fresh.marks_error and fresh.marks_failed == {PLAIN}
    fresh.marks_failed_for({LED})
    assert fresh.marks_failed == {PLAIN, LED}


def test_a_failover_applies_only_acknowledgements_of_its_own_history() -> None:
    # the chosen history: epoch 3 from seq 360 on (the old primary at epoch 3)
    chosen = ReplicaLog.of([(2, s) for s in range(300, 360)] + [(3, s) for s in range(360, 373)],
                           epoch=4, base=(2, 299))  # fmt: skip
    bases = {
        "f1": (3, 365),  # acknowledged within this history
        "f2": (2, 380),  # delivered from its own uncommitted epoch-2 tail, acknowledged
        "f3": (2, 372),  # an epoch-2 entry at a seq this history holds at epoch 3
        "gone": (0, 500),  # a copy made again after a delete: not an acknowledgement
    }
    assert acked_upto(bases, chosen) == (365, ["f2", "f3"])
    # an acknowledgement at or below the chosen copy's own base changes nothing
    assert acked_upto({"f1": (2, 250)}, chosen) == (299, [])
    # at the base itself, and at the last entry
    assert acked_upto({"a": (2, 299), "b": (3, 372)}, chosen) == (372, [])
