"""The queue core (DESIGN §4 "Queue model"), on LMDB and on the in-memory twin alike."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.session_key import SessionKey
from services.msgstore import keys
from services.msgstore.engines.base import Engine
from services.msgstore.engines.lmdb_engine import LmdbEngine
from services.msgstore.engines.memory import MemoryEngine
from services.msgstore.model import (
    Ack,
    Append,
    AppendResult,
    AppendStatus,
    BatchResult,
    Collected,
    CollectTombstones,
    DeleteQueue,
    Mark,
    MarkKind,
    OpenQueue,
    QueueMeta,
    QueueState,
    WriteBatch,
)
from services.msgstore.ops import META
from services.msgstore.queue import DBS, QueueStore

OK, NO_QUEUE, QUEUE_FULL, STALE, STORE_ERROR = (
    AppendStatus.OK,
    AppendStatus.NO_QUEUE,
    AppendStatus.QUEUE_FULL,
    AppendStatus.STALE_EPOCH,
    AppendStatus.STORE_ERROR,
)
C1: SessionKey = ("", "c1")
C2: SessionKey = ("mp", "c2")


class Harness:
    """A store plus "restart": reopen LMDB from disk, or rebuild the core over the twin."""

    def __init__(self, kind: str, path: Path, limit: int = 0) -> None:
        self.kind = kind
        self.path = path
        self.limit = limit
        self.engine = self._engine()
        self.store = QueueStore(self.engine)

    def _engine(self) -> Engine:
        if self.kind == "memory":
            return MemoryEngine(DBS, limit_bytes=self.limit)
        return LmdbEngine(self.path, DBS, self.limit or 64 * 1024 * 1024, ordered_sync=False)

    def restart(self) -> None:
        if self.kind == "lmdb":
            self.engine.close()
            self.engine = self._engine()
        self.store = QueueStore(self.engine)

    # -- one-job helpers ----------------------------------------------------------

    def open(self, sid: SessionKey = C1, epoch: int = 1, **kw: bool | int) -> QueueState:
        (state,) = self.store.write_group([OpenQueue(sid, epoch, **kw)])  # type: ignore[arg-type]
        assert isinstance(state, QueueState)
        return state

    def delete(self, sid: SessionKey = C1, epoch: int = 0) -> QueueState:
        (state,) = self.store.write_group([DeleteQueue(sid, epoch, "test")])
        assert isinstance(state, QueueState)
        return state

    def batch(self, *ops: Append | Ack | Mark, batch_id: int = 7) -> BatchResult:
        job = WriteBatch(
            batch_id,
            tuple(o for o in ops if isinstance(o, Append)),
            tuple(o for o in ops if isinstance(o, Ack)),
            tuple(o for o in ops if isinstance(o, Mark)),
        )
        (result,) = self.store.write_group([job])
        assert isinstance(result, BatchResult)
        return result

    def append(self, *data: bytes, sid: SessionKey = C1, epoch: int = 1) -> list[AppendResult]:
        return self.batch(*(Append(sid, epoch, d) for d in data)).results

    def ack(self, *seqs: int, sid: SessionKey = C1, epoch: int = 1, upto: int = 0) -> BatchResult:
        return self.batch(Ack(sid, epoch, seqs, upto))

    def entries(self, sid: SessionKey = C1, after: int = 0) -> list[tuple[int, bytes]]:
        return self.store.read(sid, 0, after).entries

    def raw_meta(self, sid: SessionKey = C1) -> bytes | None:
        with self.engine.read() as txn:
            return txn.get(META, keys.session(*sid))


@pytest.fixture(params=["memory", "lmdb"])
def h(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(request.param, tmp_path / "store")
    yield harness
    harness.engine.close()


def test_append_needs_a_queue(h: Harness) -> None:
    assert h.append(b"a") == [(NO_QUEUE, 0)]
    state = h.open(create=False)
    assert not state.exists and not state.created
    assert h.append(b"a") == [(NO_QUEUE, 0)]


def test_open_creates_once_and_appends_get_growing_seqs(h: Harness) -> None:
    first = h.open(epoch=3, create=True)
    assert first.exists and first.created and first.epoch == 3
    again = h.open(epoch=3, create=True)
    assert again.exists and not again.created
    assert h.append(b"a", b"b", epoch=3) == [(OK, 1), (OK, 2)]
    assert h.append(b"c", epoch=3) == [(OK, 3)]
    assert h.entries() == [(1, b"a"), (2, b"b"), (3, b"c")]
    state = h.store.state(C1)
    assert (state.last_seq, state.acked, state.count, state.size) == (3, 0, 3, 3)


def test_seqs_survive_a_restart_and_continue_above(h: Harness) -> None:
    h.open(create=True)
    h.append(b"a", b"b", b"c")
    h.ack(1, 2, 3)
    h.restart()
    assert h.store.state(C1).last_seq == 3
    assert h.append(b"d") == [(OK, 4)]
    assert h.entries() == [(4, b"d")]


def test_acks_delete_entries_and_acked_is_the_highest_contiguous(h: Harness) -> None:
    h.open(create=True)
    h.append(b"1", b"2", b"3", b"4", b"5")
    h.ack(2, 4)
    state = h.store.state(C1)
    assert (state.acked, state.count, state.size) == (0, 3, 3)
    assert h.entries() == [(1, b"1"), (3, b"3"), (5, b"5")]
    h.ack(1)
    assert h.store.state(C1).acked == 2
    h.ack(3)
    assert h.store.state(C1).acked == 4
    h.ack(5)
    state = h.store.state(C1)
    assert (state.acked, state.count, state.size) == (5, 0, 0)
    h.restart()
    assert h.store.state(C1).acked == 5


def test_acks_in_one_batch_in_any_order(h: Harness) -> None:
    h.open(create=True)
    h.append(b"1", b"2", b"3")
    h.ack(3, 2, 1)
    assert h.store.state(C1).acked == 3


def test_acks_for_unknown_or_already_acked_seqs_are_ignored(h: Harness) -> None:
    h.open(create=True)
    h.append(b"1", b"2")
    h.ack(1)
    result = h.ack(1, 0, 99, 2**64 - 1)
    assert result.stale_acks == 0 and not result.error
    state = h.store.state(C1)
    assert (state.acked, state.count, state.last_seq) == (1, 1, 2)


def test_delivered_upto_only_grows_and_stays_below_last_seq(h: Harness) -> None:
    h.open(create=True)
    h.append(b"1", b"2", b"3")
    h.ack(upto=2)
    assert h.store.state(C1).delivered_upto == 2
    h.ack(upto=1)
    assert h.store.state(C1).delivered_upto == 2
    h.ack(upto=50)
    assert h.store.state(C1).delivered_upto == 3


def test_max_len_refuses_appends_until_acks_make_room(h: Harness) -> None:
    h.open(create=True, max_len=2)
    assert h.append(b"1", b"2", b"3") == [(OK, 1), (OK, 2), (QUEUE_FULL, 0)]
    h.ack(1)
    assert h.append(b"4") == [(OK, 3)]  # no seq was spent on the refused message
    h.open(create=True, max_len=0)
    assert h.append(b"5", b"6") == [(OK, 4), (OK, 5)]


def test_an_offline_append_meets_the_offline_limit_an_online_one_the_online_limit(
    h: Harness,
) -> None:
    h.open(epoch=3, create=True, max_len=3, max_offline=1)
    off = h.batch(Append(C1, 0, b"1", True), Append(C1, 0, b"2", True)).results
    assert off == [(OK, 1), (QUEUE_FULL, 0)]  # the session ended: one may wait for it
    assert h.append(b"3", b"4", b"5", epoch=0) == [(OK, 2), (OK, 3), (QUEUE_FULL, 0)]
    h.restart()  # both limits are stored
    assert h.batch(Append(C1, 0, b"6", True)).results == [(QUEUE_FULL, 0)]
    h.ack(1, 2, epoch=3)  # acks make room for either
    assert h.batch(Append(C1, 0, b"7", True)).results == [(QUEUE_FULL, 0)]  # 1 left
    assert h.append(b"8", epoch=0) == [(OK, 4)]
    h.open(epoch=4, max_len=0, max_offline=0)  # the next Open sets both again
    assert h.batch(Append(C1, 0, b"9", True)).results == [(OK, 5)]
    state = h.store.state(C1)
    assert (state.max_len, state.max_offline, state.count) == (0, 0, 3)


def test_a_record_written_before_offline_limits_uses_its_limit_for_both(
    h: Harness,
) -> None:
    """An upgraded store: a queue whose session is offline had its one limit set to the
    offline limit, so that limit bounds its offline appends until the next Open."""
    h.open(create=True, max_len=2, max_offline=5)
    raw = h.raw_meta()
    assert raw is not None
    old = QueueMeta.decode(raw)
    v1 = struct.pack(
        ">BQQQQQQII", 1, old.epoch, old.last_seq, old.acked, old.count, old.size,
        old.delivered_upto, old.max_len, old.marks,
    )  # fmt: skip
    with h.engine.write() as txn:
        txn.put(META, keys.session(*C1), v1)
    h.restart()
    assert (h.store.state(C1).max_len, h.store.state(C1).max_offline) == (2, 2)
    assert h.batch(*(Append(C1, 0, b"x", True) for _ in range(3))).results[-1] == (
        QUEUE_FULL,
        0,
    )
    raw = h.raw_meta()
    assert raw is not None and len(raw) == struct.calcsize(">BQQQQQQIII")  # written anew
    assert QueueMeta.decode(raw).max_offline == 2


def test_open_refuses_an_older_epoch_and_keeps_the_stored_one(h: Harness) -> None:
    h.open(epoch=5, create=True)
    refused = h.open(epoch=4, create=True, clean=True)
    assert "stale epoch" in refused.error and refused.epoch == 5 and refused.exists
    h.append(b"x", epoch=5)
    assert h.store.state(C1).count == 1  # the refused clean start wiped nothing
    assert h.open(epoch=6).epoch == 6
    h.restart()
    assert "stale epoch" in h.open(epoch=5).error


def test_writes_from_an_older_epoch_are_refused_epoch_zero_is_unfenced(h: Harness) -> None:
    h.open(epoch=2, create=True)
    assert h.append(b"old", epoch=1) == [(STALE, 0)]
    assert h.append(b"new", epoch=2) == [(OK, 1)]
    assert h.append(b"pub", epoch=0) == [(OK, 2)]
    assert h.append(b"future", epoch=3) == [(OK, 3)]
    result = h.batch(
        Ack(C1, 1, (1,)),
        Mark(C1, 1, MarkKind.INBOUND_QOS2, 10, True),
        Ack(C1, 2, (2,)),
    )
    assert result.stale_acks == 2
    state = h.store.state(C1)
    assert [seq for seq, _ in h.entries()] == [1, 3]
    assert state.inbound_qos2 == ()


def test_a_stale_read_returns_nothing(h: Harness) -> None:
    h.open(epoch=2, create=True)
    h.append(b"x", epoch=2)
    refused = h.store.read(C1, 1, 0)
    assert refused.entries == [] and "stale epoch" in refused.state.error
    assert len(h.store.read(C1, 2, 0).entries) == 1
    assert len(h.store.read(C1, 0, 0).entries) == 1


def test_clean_start_wipes_entries_and_marks_but_seqs_keep_growing(h: Harness) -> None:
    h.open(create=True)
    h.append(b"1", b"2")
    h.batch(Mark(C1, 1, MarkKind.INBOUND_QOS2, 7, True))
    state = h.open(epoch=2, create=True, clean=True)
    assert (state.count, state.acked, state.last_seq, state.inbound_qos2) == (0, 2, 2, ())
    assert h.entries() == []
    assert h.append(b"3", epoch=2) == [(OK, 3)]


def test_marks_are_set_and_cleared_and_pubrel_marks_end_with_the_ack(h: Harness) -> None:
    h.open(create=True)
    h.append(b"1", b"2")
    h.batch(
        Mark(C1, 1, MarkKind.INBOUND_QOS2, 10, True),
        Mark(C1, 1, MarkKind.INBOUND_QOS2, 11, True),
        Mark(C1, 1, MarkKind.INBOUND_QOS2, 11, True),
        Mark(C1, 1, MarkKind.OUTBOUND_PUBREL, 1, True),
        Mark(C1, 1, MarkKind.OUTBOUND_PUBREL, 2, True),
    )
    h.restart()
    state = h.store.state(C1)
    assert state.inbound_qos2 == (10, 11) and state.outbound_pubrel == (1, 2)
    h.batch(Mark(C1, 1, MarkKind.INBOUND_QOS2, 10, False), Ack(C1, 1, (1,)))
    state = h.store.state(C1)
    assert state.inbound_qos2 == (11,) and state.outbound_pubrel == (2,)


def test_delete_leaves_a_tombstone_that_fences_and_keeps_seqs(h: Harness) -> None:
    h.open(epoch=4, create=True)
    h.append(b"1", b"2", epoch=4)
    assert "stale epoch" in h.delete(epoch=3).error
    deleted = h.delete(epoch=4)
    assert deleted.deleted and not deleted.exists
    assert h.append(b"3") == [(NO_QUEUE, 0)]
    assert h.entries() == []
    assert not h.delete().deleted  # deleting twice is harmless
    assert "stale epoch" in h.open(epoch=3, create=True).error
    revived = h.open(epoch=5, create=True)
    assert revived.created and revived.last_seq == 2 and revived.count == 0
    assert h.append(b"4", epoch=5) == [(OK, 3)]


def test_collecting_a_tombstone_removes_its_record_and_the_queue_starts_afresh(
    h: Harness,
) -> None:
    h.open(epoch=4, create=True)
    h.append(b"1", b"2", epoch=4)
    h.delete(epoch=4)
    h.restart()
    assert h.store.tombstones_at_open == [(keys.session(*C1), 4)]
    (done,) = h.store.write_group([CollectTombstones(((keys.session(*C1), 4),))])
    assert done == Collected(1)
    assert h.raw_meta() is None
    assert h.store.state(C1) == QueueState(C1)
    h.restart()
    assert h.store.tombstones_at_open == []
    again = h.open(epoch=9, create=True)
    assert again.created and again.last_seq == 0
    assert h.append(b"3", epoch=9) == [(OK, 1)]


def test_collect_leaves_a_queue_created_again_or_deleted_again(h: Harness) -> None:
    sess = keys.session(*C1)
    h.open(epoch=4, create=True)
    h.delete(epoch=4)
    h.open(epoch=5, create=True)  # revived before its grace passed
    assert h.store.write_group([CollectTombstones(((sess, 4),))]) == [Collected(0)]
    assert h.store.state(C1).exists
    h.delete(epoch=6)  # a newer tombstone: the old grave does not name it
    assert h.store.write_group([CollectTombstones(((sess, 4),))]) == [Collected(0)]
    assert h.raw_meta() is not None
    assert h.store.write_group([CollectTombstones(((sess, 6),))]) == [Collected(1)]
    assert h.store.totals.queues == 0


def test_collect_and_recreate_in_one_group(h: Harness) -> None:
    sess = keys.session(*C1)
    h.open(epoch=2, create=True)
    h.append(b"a", epoch=2)
    h.delete(epoch=2)
    results = h.store.write_group([CollectTombstones(((sess, 2),)), OpenQueue(C1, 3, create=True)])
    assert results[0] == Collected(1)
    state = results[1]
    assert isinstance(state, QueueState) and state.created and state.last_seq == 0
    assert h.store.totals.queues == 1


def test_queues_are_independent(h: Harness) -> None:
    h.open(C1, create=True)
    h.open(C2, create=True)
    h.append(b"a", sid=C1)
    h.append(b"b", b"c", sid=C2)
    h.delete(C1)
    assert h.entries(C2) == [(1, b"b"), (2, b"c")]
    assert h.append(b"d", sid=C2) == [(OK, 3)]


def test_read_after_seq_and_limits(h: Harness) -> None:
    h.open(create=True)
    h.append(*(bytes([65 + i]) * 10 for i in range(10)))
    h.ack(1)
    assert [s for s, _ in h.store.read(C1, 0, 0).entries] == list(range(2, 11))
    assert [s for s, _ in h.store.read(C1, 0, 5).entries] == list(range(6, 11))
    assert [s for s, _ in h.store.read(C1, 0, 5, max_entries=2).entries] == [6, 7]
    assert [s for s, _ in h.store.read(C1, 0, 0, max_bytes=25).entries] == [2, 3]
    assert [s for s, _ in h.store.read(C1, 0, 0, max_bytes=1).entries] == [2]  # at least one
    assert h.store.read(C1, 0, 10).entries == []
    assert h.store.read(C1, 0, 2**64 - 1).entries == []


def test_a_read_says_whether_live_entries_follow_its_page(h: Harness) -> None:
    """A reader pages on ``more``, not on the count: a page cut by size is short."""
    h.open(create=True)
    h.append(*(bytes([65 + i]) * 10 for i in range(10)))
    assert not h.store.read(C1, 0, 0).more
    assert h.store.read(C1, 0, 0, max_entries=3).more
    assert not h.store.read(C1, 0, 0, max_entries=10).more  # exactly the rest
    cut = h.store.read(C1, 0, 0, max_bytes=25)
    assert len(cut.entries) == 2 and cut.more
    after, pages = 0, 0
    while True:
        page = h.store.read(C1, 0, after, max_bytes=25)
        pages += 1
        after = page.entries[-1][0]
        if not page.more:
            break
    assert (after, pages) == (10, 5)


def test_queues_pages_existing_queues_in_key_order_without_tombstones(h: Harness) -> None:
    names = [("", f"q{i}") for i in range(5)] + [("mp", "a")]
    for sid in names:
        h.open(sid, epoch=3, create=True)
    h.delete(("", "q2"), epoch=3)
    h.append(b"x", b"y", sid=("", "q4"), epoch=3)
    seen: list[QueueState] = []
    after = b""
    pages = 0
    while True:
        page, after = h.store.queues(after, 2)
        assert len(page) <= 2
        seen.extend(page)
        pages += 1
        if not after:
            break
    assert [s.session for s in seen] == [
        ("", "q0"),
        ("", "q1"),
        ("", "q3"),
        ("", "q4"),
        ("mp", "a"),
    ]
    assert pages == 3
    assert all(s.exists and s.epoch == 3 for s in seen)
    assert [s.count for s in seen if s.session == ("", "q4")] == [2]
    everything, after = h.store.queues(b"", 100)
    assert len(everything) == 5 and after == b""
    with pytest.raises(ValueError):
        h.store.queues(b"", 0)


def test_stats_totals_and_longest_queues_survive_restart(h: Harness) -> None:
    h.open(C1, create=True)
    h.open(C2, create=True)
    h.open(("", "gone"), create=True)
    h.delete(("", "gone"))
    h.append(b"aa", sid=C1)
    h.append(b"b", b"c", b"d", sid=C2)
    h.ack(1, sid=C2)
    for _ in range(2):
        stats = h.store.stats(max_queues=1)
        assert (stats.queues, stats.entries, stats.bytes) == (2, 3, 4)
        assert [s.session for s in stats.top] == [C2]
        assert [s.session for s in h.store.stats(10).top] == [C2, C1]
        assert h.store.stats().top == []
        h.restart()


def test_a_session_too_long_for_a_key_is_refused_cleanly(h: Harness) -> None:
    sid = ("", "x" * 600)
    assert "exceeds" in h.open(sid, create=True).error
    assert h.append(b"a", sid=sid) == [(NO_QUEUE, 0)]
    assert h.store.read(sid, 0, 0).entries == []


def test_a_group_gets_one_result_per_job_in_order(h: Harness) -> None:
    results = h.store.write_group(
        [
            OpenQueue(C1, 1, create=True),
            WriteBatch(1, (Append(C1, 1, b"a"),)),
            OpenQueue(C2, 1, create=True),
            WriteBatch(2, (Append(C2, 1, b"b"), Append(C1, 1, b"c"))),
            DeleteQueue(C1, 1),
            WriteBatch(3, (Append(C1, 1, b"d"),)),
        ]
    )
    assert [type(r).__name__ for r in results] == [
        "QueueState", "BatchResult", "QueueState", "BatchResult", "QueueState", "BatchResult",
    ]  # fmt: skip
    assert [r.batch_id for r in results if isinstance(r, BatchResult)] == [1, 2, 3]
    assert [r.results for r in results if isinstance(r, BatchResult)] == [
        [(OK, 1)], [(OK, 1), (OK, 2)], [(NO_QUEUE, 0)],
    ]  # fmt: skip


def test_a_full_store_refuses_appends_clearly_and_drains(tmp_path: Path, kind: str) -> None:
    h = Harness(kind, tmp_path / "small", limit=1024 * 1024)
    try:
        h.open(create=True)
        seqs: list[int] = []
        error = ""
        for _ in range(2000):
            result = h.batch(*(Append(C1, 1, b"m" * 300) for _ in range(10)))
            seqs += [r.seq for r in result.results if r.status == OK]
            if result.error:
                error = result.error
                assert {r.status for r in result.results} <= {OK, STORE_ERROR}
                break
        assert "store full" in error and seqs
        # Nothing acknowledged was lost, reads work, and acks drain the store.
        assert [s for s, _ in h.store.read(C1, 0, 0, max_entries=10**6).entries] == seqs
        for start in range(0, len(seqs), 50):
            result = h.ack(*seqs[start : start + 50])
            assert not result.error, result.error
        assert h.store.state(C1).count == 0
        assert h.append(b"again")[0].status == OK
    finally:
        h.engine.close()


def test_acks_in_a_batch_whose_appends_do_not_fit_still_apply(tmp_path: Path, kind: str) -> None:
    h = Harness(kind, tmp_path / "small", limit=1024 * 1024)
    try:
        h.open(create=True)
        h.append(b"first")
        big = b"x" * (2 * 1024 * 1024)  # more than the store can ever hold: the put fails
        result = h.batch(Append(C1, 1, big), Ack(C1, 1, (1,)))
        assert result.results == [(STORE_ERROR, 0)] and "full" in result.error
        assert h.store.state(C1).acked == 1
        assert h.append(b"small") == [(OK, 2)]
    finally:
        h.engine.close()


@pytest.fixture(params=["memory", "lmdb"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)
