"""Flow control between connections: a fast publisher waits for a slow subscriber.

A publisher faster than a subscriber it sends QoS >= 1 to would fill that session's
queue until ``max_online_messages`` drops messages. Instead the publisher stops being
read while the subscriber's backlog (on its way into its queue, waiting to be sent, or
in flight) is at or above ``FlowLimits.high``, until it drains to ``FlowLimits.low``:
TCP then slows the publisher down to the subscriber's pace.

Two rules keep one client from stalling others: a subscriber that has not drained within
:data:`FLOW_MAX_HOLD` is *slow* and holds nobody back until it drains (its queue limit
applies, as without flow control); and a connection that others wait for is never held
itself, so no cycle of clients publishing to each other can wait forever.

Worked example: subscriber S reaches backlog 100 while publisher P sends to it:
``hold_back(S, P)`` pauses P's reading and arms S's one-second timer. S acknowledges
down to 50: ``drained(S, limits)`` releases P, whose reading resumes.
"""

from __future__ import annotations

import asyncio
from typing import Final, NamedTuple, Protocol

FLOW_MAX_HOLD: Final = 1.0  # s: a subscriber that does not drain in this time holds nobody back
FLOW_HIGH_MAX: Final = 100
"""Most unacknowledged messages before a publisher is held (bench (c): 100 beats 50 and
500; see docs/benchmarks.md)."""


class FlowLimits(NamedTuple):
    high: int
    low: int


def flow_limits(max_online_messages: int) -> FlowLimits:
    """Well below the online queue limit (at most half of it), so flow control acts
    before ``max_online_messages`` would drop anything."""
    online = max_online_messages
    high = min(max(online // 2, 1), FLOW_HIGH_MAX) if online > 0 else FLOW_HIGH_MAX
    return FlowLimits(high, high // 2)


class FlowParty(Protocol):
    """A connection as flow control sees it (publisher or subscriber)."""

    closed: bool
    flow: FlowState | None

    def backlog(self) -> int: ...

    def pause_input(self) -> None: ...

    def resume_input(self) -> None:
        """Read again (or first handle what was read and held)."""
        ...


class FlowState:
    """One connection's part in flow control; made only once it takes part."""

    __slots__ = ("holders", "slow", "timer", "waiters")

    def __init__(self) -> None:
        self.holders: set[FlowParty] = set()  # congested subscribers we wait for
        self.waiters: set[FlowParty] = set()  # publishers waiting for us
        self.timer: asyncio.TimerHandle | None = None  # when we stop holding them
        self.slow = False  # did not drain in FLOW_MAX_HOLD: holds nobody back


def _state(party: FlowParty) -> FlowState:
    state = party.flow
    if state is None:
        state = party.flow = FlowState()
    return state


def is_held(party: FlowParty) -> bool:
    """Is ``party`` waiting for a subscriber (its input must stay paused)?"""
    state = party.flow
    return state is not None and bool(state.holders)


def holds_others(party: FlowParty) -> bool:
    """Does ``party``'s draining matter to flow control (waiters, or marked slow)?"""
    state = party.flow
    return state is not None and (bool(state.waiters) or state.slow)


def hold_back(subscriber: FlowParty, publisher: FlowParty, loop: asyncio.AbstractEventLoop) -> None:
    """Stop reading ``publisher`` until ``subscriber``'s backlog drains."""
    if publisher is subscriber or publisher.closed or subscriber.closed:
        return
    sub = _state(subscriber)
    pub = publisher.flow
    if sub.slow or (pub is not None and pub.waiters) or publisher in sub.waiters:
        return
    if not sub.waiters:
        sub.timer = loop.call_later(FLOW_MAX_HOLD, _give_up, subscriber)
    sub.waiters.add(publisher)
    pub = _state(publisher)
    if not pub.holders:
        publisher.pause_input()
    pub.holders.add(subscriber)


def drained(subscriber: FlowParty, limits: FlowLimits) -> None:
    """``subscriber`` made progress: release its publishers once it is low enough."""
    state = subscriber.flow
    if state is not None and subscriber.backlog() <= limits.low:
        state.slow = False
        release(subscriber)


def progressed(subscriber: FlowParty, limits: FlowLimits) -> None:
    """``subscriber``, a link to another node that carries many sessions' copies, was
    acknowledged some: as ``drained``, and while it still holds publishers it gets
    another :data:`FLOW_MAX_HOLD` before it counts as slow. A link that moves is
    congested, not dead, and letting its publishers go would only fill its queue until
    copies are dropped; one that stops moving (its node died or paused) is still given
    up on in time."""
    state = subscriber.flow
    if state is None:
        return
    state.slow = False
    if subscriber.backlog() <= limits.low:
        release(subscriber)
    elif state.timer is not None:
        state.timer.cancel()
        state.timer = asyncio.get_running_loop().call_later(FLOW_MAX_HOLD, _give_up, subscriber)


def _give_up(subscriber: FlowParty) -> None:
    state = _state(subscriber)
    state.timer = None
    state.slow = True
    release(subscriber)


def release(subscriber: FlowParty) -> None:
    """Nobody waits for ``subscriber`` any more (drained, slow, or gone)."""
    state = subscriber.flow
    if state is None:
        return
    if state.timer is not None:
        state.timer.cancel()
        state.timer = None
    waiters, state.waiters = state.waiters, set()
    for publisher in waiters:
        _release_one(publisher, subscriber)


def _release_one(publisher: FlowParty, holder: FlowParty) -> None:
    state = publisher.flow
    if state is None or not state.holders:
        return
    state.holders.discard(holder)
    if not state.holders and not publisher.closed:
        publisher.resume_input()
