"""When the tombstone of a deleted key may go, and the loop that removes it.

Theory of operation. A delete is a write of a tombstone: a DVV entry whose value is
"deleted". The tombstone exists for anti-entropy. A peer that still holds the old value
and has not seen the delete would send that value back in the next exchange. Without
the tombstone's clock to dominate it, the value would return. So the rule is:

1. **Every peer has it.** A tombstone stays until every other member of the cluster can
   no longer hold the value it deletes. Until anti-entropy tracks what each member has
   acknowledged, that is approximated by time: ``gossip.tombstone_ttl``, the time peers
   get to learn of the delete.
2. **Alone, nobody needs it.** A node without peers (today every node: the gossip
   service has no membership yet) has nobody to send an old value back. Its listeners
   resynchronise from a snapshot of visible values (``Router.keep_only``), not from
   tombstones. A local write always dominates what it overwrites, tombstone or not
   (``store.Txn._write``). So a tombstone goes at the next collection.
   Before this rule every subscription record of an ended clean session stayed for the
   whole ttl, and memory grew with connection churn.
3. **Dots are never reused.** Collection raises ``dot_floor`` past the removed record's
   own counter (``store.Txn.collect_garbage``): a new value of the key is newer than
   any copy of the old one that a later peer may still hold.

``gossip.tombstone_ttl = never`` keeps tombstones forever, alone or not.

Worked example: alone, with ``gc_interval`` 1 min, a clean session's subscription record
deleted at 12:00:10 is gone by 12:01. With peers, and the default ttl of 1 h, it is gone
after 13:00:10, at the first collection after that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial

from services.gossip.committer import CommitError, Committer, ShuttingDown
from services.gossip.config import GossipSettings
from services.gossip.metrics import GossipMetrics
from services.gossip.store import Txn


def no_peers() -> Sequence[str]:
    """The other members of the cluster: none until gossip has membership."""
    return ()


def min_age_us(ttl_s: float | None, peers: Sequence[str]) -> int | None:
    """How old a tombstone must be to go; None: it never goes (``ttl = never``)."""
    if ttl_s is None:
        return None
    if not peers:
        return 0
    return int(ttl_s * 1e6)


async def collect_garbage(
    committer: Committer,
    settings: GossipSettings,
    metrics: GossipMetrics,
    stop: asyncio.Event,
    peers: Callable[[], Sequence[str]] = no_peers,
) -> None:
    """Every ``gc_interval``, remove the tombstones the rule above lets go."""
    while True:
        try:
            await asyncio.wait_for(stop.wait(), settings.gc_interval_s)
            return
        except TimeoutError:
            pass
        age = min_age_us(settings.tombstone_ttl_s, peers())
        if age is None:
            continue
        try:
            collected = await committer.submit(partial(_gc, min_age_us=age))
        except ShuttingDown:
            return
        except CommitError:
            continue  # already logged as store.error; try again next round
        metrics.gc_collected.inc(collected)


def _gc(txn: Txn, min_age_us: int) -> int:
    return txn.collect_garbage(min_age_us)
