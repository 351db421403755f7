"""The receiving side's per-copy loop, compiled: each new copy of a batch to the broker,
with the ``done`` that completes it in its sender's inbox.

The stream itself (``receiver``) is an async generator, which stays interpreted; this
loop runs once per forwarded copy, so it lives apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from functools import partial

from services.listener.flow import FlowParty
from services.listener.forward.inbox import Inbox
from services.listener.forward.wire import ForwardedIn

Done = Callable[[str | None], None]  # None: delivered or queued; else why it failed
# (copy, done, settle, stream): ``settle``, for a shared group's copy only, hears its
# member's outcome later (None: acknowledged; else why it lost the copy)
Accept = Callable[[ForwardedIn, Done, Done | None, FlowParty], None]
Wakes = dict[tuple[str, int], asyncio.Event]


def intake(
    items: Iterable[ForwardedIn],
    inbox: Inbox,
    accept: Accept,
    party: FlowParty,
    wakes: Wakes,
    key: tuple[str, int],
) -> tuple[int, int]:
    """Hand every copy the inbox has not seen to ``accept``; (taken, resent)."""
    taken = 0
    resent = 0
    inbox.taking = True  # the caller wakes the stream once the batch is taken
    try:
        for item in items:
            seq = item.seq
            if not inbox.accept(seq):
                resent += 1
                continue
            if inbox.doubtful(seq):
                complete(inbox, wakes, key, seq, "sent to an earlier run of this node")
                continue
            taken += 1
            settle = partial(settled, inbox, wakes, key, seq) if item.share else None
            accept(item, partial(complete, inbox, wakes, key, seq), settle, party)
    finally:
        inbox.taking = False
    return taken, resent


def complete(
    inbox: Inbox, wakes: Wakes, key: tuple[str, int], seq: int, failure: str | None
) -> None:
    """A copy's ``done``, bound with ``partial`` (a closure per copy cost more): the
    inbox learns its outcome and the stream now attached for its sender sends the ack."""
    inbox.complete(seq, failure is None)
    if inbox.taking:
        return
    wake = wakes.get(key)
    if wake is not None:
        wake.set()


def settled(
    inbox: Inbox, wakes: Wakes, key: tuple[str, int], seq: int, failure: str | None
) -> None:
    """A shared copy's ``settle``: its member's outcome, for the sender to hear."""
    inbox.outcome(seq, failure is None)
    wake = wakes.get(key)
    if wake is not None:
        wake.set()
