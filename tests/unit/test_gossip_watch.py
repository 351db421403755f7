"""Watch batching: per-key coalescing (latest wins), bounded backlog, size limits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.gossip.store import Update
from services.gossip.watch import DeltaBuffer, chunks, update_size


def test_coalesces_per_key_latest_wins_first_position_kept() -> None:
    buf = DeltaBuffer({"subs"})
    buf.add([Update("subs", b"a", b"1"), Update("subs", b"b", b"1"), Update("retain", b"t", b"m")])
    buf.add([Update("subs", b"a", b"2"), Update("subs", b"b", None)])
    assert len(buf) == 2
    assert buf.drain(100, 1 << 20) == [Update("subs", b"a", b"2"), Update("subs", b"b", None)]
    assert len(buf) == 0 and buf.drain(100, 1 << 20) == []


def test_add_counts_only_watched_prefixes() -> None:
    buf = DeltaBuffer({"retain"})
    assert buf.add([Update("subs", b"a", b"1")]) == 0
    assert buf.add([Update("retain", b"a", b"1")]) == 1


def test_drain_respects_limits_but_always_moves() -> None:
    buf = DeltaBuffer({"retain"})
    big = Update("retain", b"big", b"x" * 5000)
    buf.add([big, Update("retain", b"s1", b"y"), Update("retain", b"s2", b"y")])
    assert buf.drain(100, 1000) == [big]  # larger than the limit alone: sent alone
    assert buf.drain(1, 1000) == [Update("retain", b"s1", b"y")]
    assert buf.drain(1, 1000) == [Update("retain", b"s2", b"y")]


@given(
    st.lists(
        st.tuples(
            st.sampled_from([b"a", b"b", b"c", b"d"]), st.one_of(st.none(), st.binary(max_size=3))
        )
    )
)
def test_backlog_is_bounded_by_distinct_keys_and_ends_at_the_latest(
    changes: list[tuple[bytes, bytes | None]],
) -> None:
    buf = DeltaBuffer({"subs"})
    latest: dict[bytes, bytes | None] = {}
    for key, value in changes:
        buf.add([Update("subs", key, value)])
        latest[key] = value
        assert len(buf) <= 4
    out = buf.drain(1000, 1 << 20)
    assert {u.key: u.value for u in out} == latest
    assert len(out) == len(latest)


@given(st.lists(st.binary(max_size=50)), st.integers(1, 5), st.integers(1, 200))
def test_chunks_keep_order_and_limits(values: list[bytes], n: int, max_bytes: int) -> None:
    updates = [Update("retain", i.to_bytes(2, "big"), v) for i, v in enumerate(values)]
    batches = list(chunks(updates, n, max_bytes))
    assert [u for b in batches for u in b] == updates
    for b in batches:
        assert 1 <= len(b) <= n
        assert len(b) == 1 or sum(map(update_size, b)) <= max_bytes
