"""All connections' session timers on one event-loop timer.

Idle connections each need a keepalive timer that almost never fires; a loop timer per
connection would cost a libuv handle and its memory each. Instead every connection's timers
live in one :class:`~services.listener.session.timers.TimerHeap` per event loop, and one
loop timer is armed for its earliest entry. Due timers are handed back to their owner's
``timer_fired``; one owner's failure goes to the loop's exception handler and never
stops the others'.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any, TypeVar

from services.listener.session.timers import Timer, TimerHeap

T = TypeVar("T")


class LoopTimers:
    """The event-loop side of a ``TimerHeap``: one loop timer, armed for the earliest
    entry, fires the due session timers of every connection of this loop."""

    __slots__ = ("__weakref__", "handle", "handle_at", "heap")

    def __init__(self) -> None:
        self.heap: TimerHeap[Any] = TimerHeap()
        self.handle: asyncio.TimerHandle | None = None
        self.handle_at = 0.0

    def set(self, timer: Timer[Any], at: float) -> None:
        self.heap.set(timer, at)
        self._arm()

    def cancel(self, timer: Timer[Any]) -> None:
        self.heap.cancel(timer)

    def _arm(self) -> None:
        at = self.heap.next_at()
        if at is None or (self.handle is not None and self.handle_at <= at):
            return  # nothing to fire, or the loop timer comes first anyway
        if self.handle is not None:
            self.handle.cancel()
        delay = max(0.0, at - time.time())
        self.handle = asyncio.get_running_loop().call_later(delay, self._run)
        self.handle_at = at

    def _run(self) -> None:
        self.handle = None
        loop = asyncio.get_running_loop()
        for timer in self.heap.pop_due(time.time()):
            conn = timer.owner
            assert conn is not None  # only cancelled timers lose their owner
            try:
                conn.timer_fired(timer)
            except Exception as exc:  # one connection's failure must not stop the others'
                loop.call_exception_handler(
                    {"message": "session timer failed", "exception": exc, "protocol": conn}
                )
        self._arm()


_loop_timers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopTimers] = (
    weakref.WeakKeyDictionary()
)


def timers_of(loop: asyncio.AbstractEventLoop) -> LoopTimers:
    """The loop's shared timers (created on first use)."""
    timers = _loop_timers.get(loop)
    if timers is None:
        timers = _loop_timers[loop] = LoopTimers()
    return timers


# One connection's timers are a small tuple (at most "connect", "keepalive" and "retry"):
# a tuple, not a dict or an object, because thousands of idle connections each hold one.
def set_named(
    timers: tuple[Timer[T], ...], owner: T, name: str, at: float, loop: asyncio.AbstractEventLoop
) -> tuple[Timer[T], ...]:
    """Set ``owner``'s timer ``name`` to fire at ``at`` (lazy when it moves later); a fired
    timer stays in the tuple, to be set again. Returns the owner's new tuple."""
    for timer in timers:
        if timer.name == name:
            break
    else:
        timer = Timer(owner, name)
        timers += (timer,)
    timers_of(loop).set(timer, at)
    return timers


def cancel_named(
    timers: tuple[Timer[T], ...], name: str, loop: asyncio.AbstractEventLoop
) -> tuple[Timer[T], ...]:
    """Cancel the timer ``name``, if set; returns the owner's new tuple."""
    for timer in timers:
        if timer.name == name:
            timers_of(loop).cancel(timer)
            return tuple(t for t in timers if t is not timer)
    return timers


def cancel_all(timers: tuple[Timer[T], ...], loop: asyncio.AbstractEventLoop) -> tuple[()]:
    """Cancel every timer of one owner (its connection is gone)."""
    if timers:
        shared = timers_of(loop)
        for timer in timers:
            shared.cancel(timer)
    return ()
