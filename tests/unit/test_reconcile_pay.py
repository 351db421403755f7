"""What a claiming node owes others it could not reach (``cluster.reconcile``): paid in
order, the unpaid kept, and a node nobody reaches costs one attempt per round, not one
per session it held."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from services.common.session_key import SessionKey
from services.registry.cluster.reconcile import Reconciler


def _reconciler(reachable: set[SessionKey] | None, tried: list[SessionKey]) -> Reconciler:
    async def evict(node: str, key: SessionKey, epoch: int) -> bool:
        tried.append(key)
        return reachable is None or key in reachable

    async def merge(*_: Any) -> str:
        return ""

    none = cast(Any, None)
    return Reconciler(none, none, none, evict, merge)


KEYS = [("", f"c{i}") for i in range(5)]


def test_every_debt_is_paid_in_order_when_the_node_answers() -> None:
    tried: list[SessionKey] = []
    rec = _reconciler(None, tried)
    for i, key in enumerate(KEYS):
        rec.owe("n1", key, i + 1)
    asyncio.run(rec._pay("n1", rec.owed.pop("n1")))
    assert tried == KEYS
    assert rec.owed == {}


def test_the_first_unpaid_debt_keeps_it_and_the_rest_owed_untried() -> None:
    tried: list[SessionKey] = []
    rec = _reconciler(set(KEYS[:2]), tried)
    for i, key in enumerate(KEYS):
        rec.owe("n1", key, i + 1)
    asyncio.run(rec._pay("n1", rec.owed.pop("n1")))
    assert tried == KEYS[:3]  # stopped at the first that failed
    assert rec.owed == {"n1": {k: i + 1 for i, k in enumerate(KEYS) if i >= 2}}


def test_a_newer_epoch_owed_for_a_key_wins() -> None:
    rec = _reconciler(None, [])
    rec.owe("n1", KEYS[0], 5)
    rec.owe("n1", KEYS[0], 3)
    assert rec.owed["n1"][KEYS[0]] == 5


class _Giver:
    def __init__(self) -> None:
        self.asked: list[object] = []

    async def handle(self, req: object) -> object:
        self.asked.append(req)
        return SimpleNamespace(error="", present=True, persistent=False)


def _ending(owner: str, factor: int = 1, queued: bool = False) -> list[object]:
    """What ``_end_here`` asks of the giver for a local session at epoch 5 when the
    register names ``owner`` at epoch 7 (with ``factor`` the replication factor)."""
    key: SessionKey = ("", "c")
    session = SimpleNamespace(key=key, epoch=5, persistent=True, queued=queued)
    table = SimpleNamespace(get=lambda k: session)
    settings = SimpleNamespace(node="n1", replication_factor=factor)
    registrar = SimpleNamespace(settings=settings, table=table)
    giver = _Giver()
    rec = Reconciler(
        cast(Any, registrar), cast(Any, None), cast(Any, giver), cast(Any, None), cast(Any, None)
    )
    entry = SimpleNamespace(live=True, owner=owner, epoch=7, persistent=True, replicas=(owner,))
    asyncio.run(rec._end_here(cast(Any, session), cast(Any, entry)))
    return giver.asked


def test_a_session_another_node_owns_now_is_ended_here() -> None:
    assert len(_ending("n2")) == 1


def test_this_nodes_own_newer_claim_does_not_end_the_session_under_it() -> None:
    """The register names this node at a newer epoch: a registration under way here
    takes the old session over itself; ending it first made that registration fail and
    the client's retry find no session (found by the 1,000-fault run)."""
    assert _ending("n1") == []


def test_a_lost_copy_is_merged_only_without_replication() -> None:
    """R = 1: the lost copy's queue joins the owner's (kept, not discarded). R > 1: never,
    even when the entry names a single holder, because a merge appends those entries
    after the owner's newer ones, out of order; the copy is discarded here."""
    (alone,) = _ending("n2", factor=1, queued=True)
    assert not alone.discard and not alone.keep_queue
    (replicated,) = _ending("n2", factor=3, queued=True)
    assert replicated.discard and not replicated.keep_queue
