"""The LWW resolver: a maximum under a total order, whatever the siblings' order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.gossip.crdt.lww import Stamped, winner

stamped = st.builds(
    Stamped,
    st.integers(-5, 5),
    st.sampled_from(["a", "b"]),
    st.one_of(st.none(), st.binary(max_size=2)),
)


def test_examples() -> None:
    assert winner([Stamped(10, "b", b"x"), Stamped(12, "a", None)]) == Stamped(12, "a", None)
    assert winner([Stamped(10, "a", b"x"), Stamped(10, "b", b"y")]).node == "b"
    # same clock and node: a live value beats a tombstone, then the larger bytes
    assert winner([Stamped(1, "a", None), Stamped(1, "a", b"")]).value == b""
    assert winner([Stamped(1, "a", b"x"), Stamped(1, "a", b"y")]).value == b"y"


def test_no_siblings_is_an_error() -> None:
    with pytest.raises(ValueError):
        winner([])


@given(st.lists(stamped, min_size=1), st.randoms())
def test_order_and_duplicates_do_not_matter(siblings: list[Stamped], rnd: object) -> None:
    shuffled = list(siblings) + siblings[:2]
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert winner(shuffled) == winner(siblings)


@given(stamped, stamped, stamped)
def test_winner_is_an_associative_commutative_max(a: Stamped, b: Stamped, c: Stamped) -> None:
    assert winner([a, b]) == winner([b, a])
    assert winner([winner([a, b]), c]) == winner([a, winner([b, c])])
    assert winner([a, a]) == a
    w = winner([a, b, c])
    assert all(w.order_key() >= s.order_key() for s in (a, b, c))


@given(stamped, stamped)
def test_order_key_is_total(a: Stamped, b: Stamped) -> None:
    assert (a.order_key() == b.order_key()) == (a == b)
