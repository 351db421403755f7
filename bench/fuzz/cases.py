"""One fuzz case: the bytes one connection sends, how they are split, how it ends.

A case is a pure function of ``(run seed, index)``: ``make_case(7, 12345, pools)``
returns the same bytes on every machine and every Python 3.11+, so a case that hurt the
broker is replayed with ``python -m bench.fuzz --replay 7:12345``. ``random.Random``
seeded with an int is documented to give the same stream across versions.

Endings: ``eof`` half-closes the socket after the last byte and waits for the broker to
close (a client that sent everything it had); ``close`` waits briefly for answers, then
closes; ``reset`` aborts with an RST (SO_LINGER 0): a client that vanished.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from bench.fuzz.generate import Generator, Pools
from bench.fuzz.mutate import mutate

ENDINGS = ("eof", "eof", "close", "close", "reset")


@dataclass(frozen=True, slots=True)
class Case:
    seed: int
    index: int
    chunks: tuple[bytes, ...]  # one write each
    mutations: tuple[str, ...]  # () for a valid sequence
    ending: str

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    @property
    def ref(self) -> str:
        return f"{self.seed}:{self.index}"


def case_rng(seed: int, index: int) -> random.Random:
    return random.Random(seed * 1_000_000_007 + index)


def make_case(seed: int, index: int, pools: Pools, valid_share: float = 0.1) -> Case:
    rng = case_rng(seed, index)
    gen = Generator(rng, pools)
    packets, names = mutate(rng, gen.sequence(), gen, valid_share)
    data = b"".join(packets)
    cuts = (
        sorted(rng.randrange(1, len(data)) for _ in range(rng.randrange(4)))
        if len(data) > 1
        else []
    )
    bounds = [0, *cuts, len(data)]
    chunks = tuple(data[a:b] for a, b in itertools.pairwise(bounds) if b > a)
    return Case(seed, index, chunks or (b"",), tuple(names), rng.choice(ENDINGS))
