"""What a claiming node owes others it could not reach (``cluster.reconcile``): paid in
order, the unpaid kept, and a node nobody reaches costs one attempt per round, not one
per session it held."""

from __future__ import annotations

import asyncio
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
