"""``replication.runs``: a committed batch split per replicated queue, in batch order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.msgstore.model import Append, AppendResult, AppendStatus
from services.msgstore.replication import runs

KEYS = [("", "a"), ("", "b"), ("m", "a"), ("", "c")]
STATUS = st.sampled_from(list(AppendStatus))


def test_only_stored_appends_of_replicated_queues_are_kept_in_order() -> None:
    a, b, ma, c = KEYS
    appends = [Append(a, 1, b"1"), Append(b, 1, b"2"), Append(a, 1, b"3"), Append(ma, 1, b"4")]
    appends.append(Append(c, 1, b"5"))
    results = [
        AppendResult(AppendStatus.OK, 7),
        AppendResult(AppendStatus.OK, 3),
        AppendResult(AppendStatus.OK, 8),
        AppendResult(AppendStatus.QUEUE_FULL),
        AppendResult(AppendStatus.OK, 1),
    ]
    got = runs.by_queue(appends, results, {a: object(), ma: object()}, {c: 4})
    assert got == {a: ([7, 8], [b"1", b"3"]), c: ([1], [b"5"])}
    assert runs.opening([a, b, a], {b: None}) == {b}
    assert runs.opening([], {b: None}) == set()


@given(
    st.lists(st.tuples(st.sampled_from(KEYS), STATUS, st.integers(0, 99)), max_size=20),
    st.sets(st.sampled_from(KEYS)),
    st.sets(st.sampled_from(KEYS)),
)
def test_the_split_is_the_batch_filtered_and_grouped(
    rows: list[tuple[tuple[str, str], AppendStatus, int]],
    queues: set[tuple[str, str]],
    stepped_down: set[tuple[str, str]],
) -> None:
    appends = [Append(k, 1, str(i).encode()) for i, (k, _, _) in enumerate(rows)]
    results = [AppendResult(status, seq) for _, status, seq in rows]
    got = runs.by_queue(appends, results, queues, stepped_down)
    kept = [
        (k, seq, str(i).encode())
        for i, (k, status, seq) in enumerate(rows)
        if status == AppendStatus.OK and (k in queues or k in stepped_down)
    ]
    assert set(got) == {k for k, _, _ in kept}
    for key, (seqs, datas) in got.items():
        assert seqs == [seq for k, seq, _ in kept if k == key]
        assert datas == [d for k, _, d in kept if k == key]
