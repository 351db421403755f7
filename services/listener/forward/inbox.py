"""The receiving end of a forwarding link: drop resent copies, acknowledge in order.

Theory of operation
-------------------
One :class:`Inbox` per sending listener incarnation outlives the streams it arrives on,
so a copy resent after a reconnect is recognised (``seq`` at or below the last one
taken) and only acknowledged, never routed twice. Copies are routed in ``seq`` order;
they complete in any order (a delivery at once, an append when the store has it on
disk). The acknowledgement is cumulative: ``upto`` is the highest ``seq`` below which
every copy taken is complete, plus the failed ones, so the sender can answer its
publishers. A failure is repeated in every acknowledgement until the sender confirms
it has heard an ``upto`` covering it (``confirm``, from each batch): an acknowledgement
lost with a broken stream must not turn a failure into a success. A gap in ``seq``
(the sender expired copies) is allowed. A new inbox for a sender that is resending
(``ForwardBatch.resent_upto``) cannot know whether this node's previous run took those
copies (and appended them to a queue a replica kept): it answers them as failed
(``doubtful``), so their publishers send again, rather than queueing a second copy.

A shared group's copy (``Forwarded.share``) has a second outcome, its member's: it
acknowledged the copy (``settled``) or lost it (``returned``: its session ended first).
The sender keeps such a copy after the cumulative acknowledgement covers it, until its
outcome comes (see ``parked``). Outcomes are reported once ``upto`` covers their copy,
and repeated on every new stream until the sender confirms it heard them (``heard``).

Worked example::

    box = Inbox()
    box.accept(1), box.accept(2), box.accept(2)   # True, True, False (a resend)
    box.complete(2, ok=True)                       # 1 still out: nothing to ack yet
    box.take_ack() is None
    box.complete(1, ok=False)
    box.take_ack() == (2, [1], [], [])
    box.confirm(2)                                 # the sender heard it
    box.outcome(2, settled=True)                   # copy 2 was shared: its member has it
    box.take_ack() == (2, [], [2], [])
    box.confirm_outcomes([2])
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class Inbox:
    __slots__ = (
        "_acked",
        "_done_upto",
        "_failed",
        "_fresh",
        "_new_failure",
        "_outcomes",
        "_pending",
        "accepted",
        "doubtful_upto",
        "last_seen",
        "taking",
    )

    def __init__(self, now: float = 0.0) -> None:
        self.accepted = 0  # highest seq taken
        self._pending: OrderedDict[int, bool | None] = OrderedDict()  # seq -> ok, or None
        self._done_upto = 0
        self._failed: list[int] = []  # failed seqs the sender has not confirmed
        self._new_failure = False
        self._acked = 0  # the ``upto`` last returned by take_ack
        self.last_seen = now
        # Copies up to here were sent to an earlier run of this node, which may have
        # taken them: they are answered as failed, never routed (``doubtful``).
        self.doubtful_upto = 0
        self._outcomes: dict[int, bool] = {}  # shared copies' outcomes, not yet heard
        # True while a batch's copies are handed out (``intake``): their completions then
        # need not wake the stream, which answers once the batch is taken
        self.taking = False
        self._fresh: list[int] = []  # ... of which these were never sent

    def accept(self, seq: int) -> bool:
        """True if ``seq`` is new and must be routed; False for a resent copy."""
        if seq <= self.accepted:
            return False
        self.accepted = seq
        self._pending[seq] = None
        return True

    def doubtful(self, seq: int) -> bool:
        """Whether ``seq`` (new here) may have been taken by this node's previous run."""
        return seq <= self.doubtful_upto

    def complete(self, seq: int, ok: bool) -> None:
        pending = self._pending
        if len(pending) == 1 and seq in pending:  # the usual case: done as soon as taken
            pending.clear()
            if not ok:
                self._failed.append(seq)
                self._new_failure = True
            self._done_upto = self.accepted
            return
        if seq in pending:
            pending[seq] = ok
        while pending:
            head, state = next(iter(pending.items()))
            if state is None:
                break
            pending.popitem(last=False)
            if not state:
                self._failed.append(head)
                self._new_failure = True
            self._done_upto = head
        if not pending:
            self._done_upto = self.accepted

    def outstanding(self) -> int:
        return len(self._pending)

    def confirm(self, sender_acked: int) -> None:
        """The sender has heard acknowledgements up to ``sender_acked``."""
        if self._failed and self._failed[0] <= sender_acked:
            self._failed = [s for s in self._failed if s > sender_acked]

    def outcome(self, seq: int, settled: bool) -> None:
        """A shared copy's member acknowledged it (``settled``) or lost it."""
        if seq not in self._outcomes:
            self._outcomes[seq] = settled
            self._fresh.append(seq)

    def confirm_outcomes(self, heard: Iterable[int]) -> None:
        """The sender has taken in these outcomes."""
        outcomes = self._outcomes
        for seq in heard:
            outcomes.pop(seq, None)

    def take_ack(self, again: bool = False) -> tuple[int, list[int], list[int], list[int]] | None:
        """The acknowledgement to send now: (upto, failed, settled, returned), or None if
        there is nothing new (``again``: repeat what the sender may not have heard, for a
        stream that just attached)."""
        upto = max(self._acked, self._done_upto)
        ready = [s for s in self._fresh if s <= upto]
        if upto <= self._acked and not self._new_failure and not ready and not again:
            return None
        self._new_failure = False
        self._acked = upto
        if ready:
            self._fresh = [s for s in self._fresh if s > upto]
        if again:
            ready = [s for s in self._outcomes if s <= upto]
        settled = [s for s in ready if self._outcomes.get(s) is True]
        returned = [s for s in ready if self._outcomes.get(s) is False]
        return upto, list(self._failed), settled, returned
