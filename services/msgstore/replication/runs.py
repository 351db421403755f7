"""A committed batch's appends, grouped by the replicated queue they went to (compiled).

Why: a store batch answered on the primary is split per queue before it waits for W
copies (``MsgStoreServicer._replicated``), and this loop over every append ran in the
interpreter on each batch, beside the replication it feeds.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from services.common.session_key import SessionKey
from services.msgstore.model import Append, AppendResult, AppendStatus


def opening(sessions: Sequence[SessionKey], rebuilding: Container[SessionKey]) -> set[SessionKey]:
    """The sessions whose primary is being rebuilt (an Open under way)."""
    return {s for s in sessions if s in rebuilding}


def by_queue(
    appends: Sequence[Append],
    results: Sequence[AppendResult],
    queues: Container[SessionKey],
    stepped_down: Container[SessionKey],
) -> dict[SessionKey, tuple[list[int], list[bytes]]]:
    """The seqs and messages of the appends that were stored in a queue replicated from
    here (or that was until a newer primary superseded it), per queue, in batch order."""
    out: dict[SessionKey, tuple[list[int], list[bytes]]] = {}
    for op, res in zip(appends, results, strict=False):
        sid = op.session
        if res.status == AppendStatus.OK and (sid in queues or sid in stepped_down):
            run = out.get(sid)
            if run is None:
                run = out[sid] = ([], [])
            run[0].append(res.seq)
            run[1].append(op.data)
    return out
