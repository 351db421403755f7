"""Whose copy a new primary starts from.

A failover at epoch ``e`` reads the state of the queue's live replicas, fencing each at
``e`` (``ReplicaLog.fence``: the old primary can no longer complete a write through
them). It needs ``r - w + 1`` of them: every committed entry is on ``w`` copies, and
``w + (r - w + 1) > r``, so at least one copy read holds it. Of the copies read, the one
whose last position is highest, ``(epoch, seq)`` compared as a tuple, holds every
committed entry (Raft's up-to-date rule; :mod:`.primary` commits by counting only
entries of the primary's own epoch, which is what makes the rule sound). The new primary
copies that log, writes its barrier and replicates to restore ``r`` copies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.msgstore.replication.log import Position, ReplicaLog


def read_quorum(r: int, w: int) -> int:
    """How many copies a failover must read."""
    return r - w + 1


def choose(lasts: Mapping[str, Position], r: int, w: int, prefer: Sequence[str] = ()) -> str | None:
    """The replica to start from, given the last positions read (node -> position);
    None with fewer than ``read_quorum`` answers. Copies whose logs end at the same
    position hold the same log, but not the same acknowledgements: a client's acks are
    applied one by one on the primary, and its replicas learn only the contiguous
    acknowledged index. So ties go to the earliest of ``prefer`` (the failover's copies
    in its request's order: a live handover names the old primary first), then to the
    lowest node name; every node that reads the same answers for the same request
    chooses the same copy."""
    if len(lasts) < read_quorum(r, w):
        return None
    rank = {node: i for i, node in enumerate(prefer)}
    return min(
        lasts,
        key=lambda node: (tuple(-x for x in lasts[node]), rank.get(node, len(rank)), node),
    )


def acked_upto(bases: Mapping[str, Position], log: ReplicaLog) -> tuple[int, list[str]]:
    """How far the new primary's copy ``log`` (the chosen history) may be acknowledged,
    given the bases of the copies read (each copy's client acknowledged up to its base),
    and the copies whose base is not a position of ``log``.

    Acknowledgements reach the replicas lazily, so the chosen copy may lag the old
    primary's acknowledged index; taking the highest base read fixes that. It is sound
    only for a base that ``log`` holds at the same position: a client acknowledges what
    was delivered, which was committed first, so every later history holds it. A base
    ``log`` does not hold is an acknowledgement of entries that were never committed
    (delivered from a copy no write quorum held): applied here, it would acknowledge,
    and so drop, the different messages this history holds at those seqs. A base at
    epoch 0 is where a copy made again after a delete began, not an acknowledgement."""
    upto, foreign = log.base[1], []
    for node, base in bases.items():
        if base[0] <= 0 or base[1] <= log.base[1]:
            continue
        if log.at(base[1]) == base:
            upto = max(upto, base[1])
        else:
            foreign.append(node)
    return upto, sorted(foreign)
