"""Which copies a failover reads: the register's, widened by the sets the copies read say
their primaries fed, and the register's owner. A read quorum counted over fewer copies
than a primary feeds meets none of its write quorums (the two-lineage hole)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from services.msgstore.cluster.servicer import Failover
from services.msgstore.model import ReplicaState
from services.registry.cluster.claims import queue_copies
from services.registry.quorum.register import ONLINE, Entry

SID = ("", "c")


def _failover(sets: dict[str, tuple[str, ...]], down: frozenset[str] = frozenset()) -> Failover:
    """A failover on ``x`` whose fence of node N answers with ``sets[N]`` as the set
    N's primary fed (None for a node in ``down``)."""
    f = Failover("x", cast(Any, None), cast(Any, None), cast(Any, None), cast(Any, None), 2, 1.0)
    fenced: list[str] = []

    async def fence(sid: Any, node: str, epoch: int) -> ReplicaState | None:
        fenced.append(node)
        if node in down:
            return None
        return ReplicaState(SID, True, True, epoch, 5, (1, 5), (0, 0), "", (0, 0), sets[node])

    f._fence = fence  # type: ignore[method-assign]
    f.fenced = fenced  # type: ignore[attr-defined]
    return f


def test_copies_a_read_copy_names_are_read_too() -> None:
    """The register names (a, b); b was last fed by a primary of (c, a, b): the read
    quorum is counted over all three, so c (or a) is fenced as well as b."""
    f = _failover({"a": ("a", "b"), "b": ("c", "a", "b"), "c": ("c", "a", "b")}, down={"a"})
    copies, read = asyncio.run(f._read_copies(SID, ["a", "b"], 9))
    assert copies == ["a", "b", "c"]
    assert set(read) == {"b", "c"}


def test_without_a_second_answer_the_widened_quorum_is_not_met() -> None:
    """Only b answers: one read of three is no read quorum (R - W + 1 = 2); before,
    counted over the register's two copies, it was enough."""
    f = _failover({"b": ("c", "a", "b")}, down={"a", "c"})
    copies, read = asyncio.run(f._read_copies(SID, ["a", "b"], 9))
    assert copies == ["a", "b", "c"] and set(read) == {"b"}


def test_copies_that_name_nothing_new_leave_the_request_as_it_was() -> None:
    f = _failover({"a": ("a", "b"), "b": ("a", "b")})
    copies, read = asyncio.run(f._read_copies(SID, ["a", "b"], 9))
    assert copies == ["a", "b"] and set(read) == {"a", "b"}


def test_the_registers_owner_is_read_with_the_holders() -> None:
    moved = Entry("c", 7, ("a", "b"), ONLINE, True)  # c's claim, its move not recorded
    assert queue_copies(moved) == ("a", "b", "c")
    assert queue_copies(moved, "b") == ("b", "a", "c")
    assert queue_copies(Entry("a", 7, ("a", "b"), ONLINE, True)) == ("a", "b")
