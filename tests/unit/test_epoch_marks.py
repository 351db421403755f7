"""EpochMarks: the highest epoch per id, the oldest ids forgotten first past the limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.registry.epoch_marks import EpochMarks


def test_a_mark_only_rises_and_can_be_discarded() -> None:
    m = EpochMarks(10)
    m.raise_to(("", "a"), 5)
    m.raise_to(("", "a"), 3)
    assert m.get(("", "a")) == 5 and m.get(("", "b")) == 0
    m.discard(("", "a"))
    assert m.get(("", "a")) == 0 and len(m) == 0


def test_past_the_limit_the_least_recently_raised_is_forgotten() -> None:
    m = EpochMarks(2)
    m.raise_to(("", "a"), 1)
    m.raise_to(("", "b"), 1)
    m.raise_to(("", "a"), 2)  # raised again: newest now
    m.raise_to(("", "c"), 1)
    assert (m.get(("", "a")), m.get(("", "b")), m.get(("", "c"))) == (2, 0, 1)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 20)), max_size=60))
def test_within_the_limit_each_mark_is_the_maximum_raised(ops: list[tuple[int, int]]) -> None:
    m = EpochMarks(100)
    best: dict[int, int] = {}
    for ident, epoch in ops:
        m.raise_to(("", str(ident)), epoch)
        best[ident] = max(best.get(ident, 0), epoch)
    for ident, epoch in best.items():
        assert m.get(("", str(ident))) == epoch
    assert len(m) <= 100
