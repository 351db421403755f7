"""Where each member takes inter-node calls, kept as a small state-based CRDT.

Why a CRDT: addresses travel with the member list between nodes in any order. Per node
the entry with the higher identity incarnation wins (a node whose data directory was
wiped comes back with a new incarnation, possibly at a new address); at equal
incarnation the greater address string wins, so any two copies merge to the same
result. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Entry:
    address: str
    incarnation: int

    @property
    def rank(self) -> tuple[int, str]:
        return (self.incarnation, self.address)


def put(book: Mapping[str, Entry], node: str, entry: Entry) -> dict[str, Entry]:
    """``book`` with ``entry`` for ``node`` if it ranks higher than what is there."""
    out = dict(book)
    old = out.get(node)
    if old is None or entry.rank > old.rank:
        out[node] = entry
    return out


def merge(a: Mapping[str, Entry], b: Mapping[str, Entry]) -> dict[str, Entry]:
    """Pointwise maximum: commutative, associative, idempotent."""
    out = dict(a)
    for node, entry in b.items():
        old = out.get(node)
        if old is None or entry.rank > old.rank:
            out[node] = entry
    return out


def merge_all(books: Iterable[Mapping[str, Entry]]) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    for b in books:
        out = merge(out, b)
    return out
