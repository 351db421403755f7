"""Store keys: byte order is log order, and one queue's keys never mix with another's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.msgstore import keys

ROOT = Path(__file__).resolve().parents[2]
texts = st.text(max_size=12)  # includes NUL and non-ASCII
sessions = st.tuples(texts, texts)
seqs = st.integers(min_value=0, max_value=keys.SEQ_MAX)


def test_worked_example_from_the_module_doc() -> None:
    sess = keys.session("", "c1")
    assert sess == bytes.fromhex("0001 6331 0001")
    assert keys.entry(sess, 5) == sess + bytes.fromhex("0000000000000005")


@given(st.lists(sessions, min_size=2, max_size=20))
def test_session_byte_order_is_the_order_of_the_pairs(pairs: list[tuple[str, str]]) -> None:
    by_bytes = sorted(pairs, key=lambda p: keys.session(*p))
    assert by_bytes == sorted(pairs)


@given(sessions)
def test_session_round_trips(pair: tuple[str, str]) -> None:
    sess = keys.session(*pair)
    assert keys.split_session(sess) == pair
    assert keys.split_session(keys.entry(sess, keys.SEQ_MAX)) == pair


@given(sessions, sessions, seqs)
def test_an_entry_is_in_exactly_its_own_queue_range(
    a: tuple[str, str], b: tuple[str, str], seq: int
) -> None:
    sa, sb = keys.session(*a), keys.session(*b)
    key = keys.entry(sa, seq)
    in_b = sb <= key < keys.prefix_end(sb)
    assert in_b == (a == b)
    assert sa <= keys.mark(sa, 1, seq) < keys.prefix_end(sa)


@given(sessions, seqs, seqs)
def test_entry_order_is_seq_order(pair: tuple[str, str], x: int, y: int) -> None:
    sess = keys.session(*pair)
    assert (keys.entry(sess, x) < keys.entry(sess, y)) == (x < y)
    assert keys.seq_of(keys.entry(sess, x)) == x


@given(sessions, seqs)
def test_entries_after_covers_exactly_the_later_seqs(pair: tuple[str, str], seq: int) -> None:
    sess = keys.session(*pair)
    start, end = keys.entries_after(sess, seq)
    if seq < keys.SEQ_MAX:
        assert start <= keys.entry(sess, seq + 1) < end
    assert not start <= keys.entry(sess, seq) < end
    assert not start <= keys.entry(sess, 0) < end


def test_marks_round_trip() -> None:
    sess = keys.session("mp", "c")
    assert keys.mark_of(keys.mark(sess, 1, 2**64 - 1)) == (1, 2**64 - 1)


def test_prefix_end() -> None:
    assert keys.prefix_end(b"ab") == b"ac"
    assert keys.prefix_end(b"a\xff\xff") == b"b"
    with pytest.raises(ValueError):
        keys.prefix_end(b"\xff")


def test_a_session_too_long_for_lmdb_is_refused() -> None:
    keys.session("", "x" * (keys.MAX_SESSION_BYTES - 4))
    with pytest.raises(keys.KeyTooLong):
        keys.session("", "x" * keys.MAX_SESSION_BYTES)
    assert keys.MAX_SESSION_BYTES + 9 <= 511  # LMDB's key limit, with the entry suffix


def test_malformed_session_key() -> None:
    with pytest.raises(ValueError):
        keys.split_session(b"ab\x00\x02")


PURE = ["keys.py", "queue.py", "ops.py", "model.py", "engines/base.py"]
FORBIDDEN = {"asyncio", "grpc", "lmdb", "socket", "time", "threading"}


@pytest.mark.parametrize("name", PURE)
def test_the_queue_core_imports_no_io(name: str) -> None:
    path = ROOT / "services" / "msgstore" / name
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN
