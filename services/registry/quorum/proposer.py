"""The proposer: a compare-and-set on many client ids' registers, by CASPaxos rounds.

Theory of operation
-------------------
(Rystsov, "CASPaxos: Replicated State Machines without logs", arXiv 1802.07000.) Each
client id's directory entry is a register, and each change to it is one single-decree
Paxos instance over the **members** (never over the nodes that happen to be up):

1. *Prepare*: pick a ballot above any seen and ask every member to promise it. A member
   promises unless it promised a higher ballot, and reports the value it last accepted.
2. On promises from a majority: take the value with the highest accepted ballot (the
   current value: every committed value is on a majority, which meets this one), and
   apply the change to it.
3. *Accept*: ask the members whose promises it used to accept the new value at the
   ballot (a later promise joins them if it holds nothing newer than the value the change
   was applied to). On acceptances from a majority the value is **committed**. Each
   Accept names the acceptor incarnation that promised (:mod:`.messages` says why).

A refusal naming a higher ballot means another proposer got there first: the key's
change *fails* and the caller may retry (this proposer's next ballot is above the one it
saw). A failed change may still take effect — a later round can find it as the highest
accepted value and build on it — so the caller must treat failure as "unknown", and the
changes are written to stay correct when applied twice (see :mod:`.register`).

One :meth:`Proposer.propose` call is one *round*: one ballot, one Prepare and one Accept
per member, for all the keys it changes; each key completes on its own, with a
:class:`Committed` or a :class:`Failed`. Like etcd raft's ``Step``, :meth:`Proposer.step`
takes a reply and returns what to send and what completed; the shell delivers, times out
(:meth:`Proposer.abandon`) and retries.

Worked example (members ``a b c``; ``k`` was owned by ``c`` at epoch 4)::

    p = Proposer("a", incarnation=7)
    ballot, out = p.propose({k: Claim("a", ("a", "b"))}, ["a", "b", "c"])
    # ballot == Ballot(1, 7, "a"); out.sends: Prepare(ballot, (k,)) to a, b and c
    p.step(PrepareReply(ballot, "b", 1, (Promise(k, ZERO, None),), ()))   # nothing yet
    p.step(PrepareReply(ballot, "c", 2, (Promise(k, Ballot(1, 3, "c"), e4),), ()))
    # b and c are a majority; the highest accepted value is c's e4 = Entry("c", 4, ...),
    # so the new value is Entry("a", 5, ("a", "b"), "online"), sent in
    # Accept(ballot, 1, ...) to b and Accept(ballot, 2, ...) to c (none to a: no promise)
    p.step(AcceptReply(ballot, "b", 1, (k,), ()))                            # nothing yet
    p.step(AcceptReply(ballot, "c", 2, (k,), ()))
    # -> Committed(k, ballot, previous=e4, value=Entry("a", 5, ("a", "b"), "online"))

Not done here, on purpose: CASPaxos's one-round-trip path (a proposer piggybacks the next
Prepare on its Accept and skips phase 1 while it stays unopposed). It needs acceptors to
promise the *next* ballot as a side effect of accepting, and a proposer to be sure no one
else prepared in between; the rendezvous-hash leader is usually alone on its keys, so
the saving is one round trip per CONNECT, and it can be added later behind the same
messages. Nor are membership changes: a round uses the member list it is given, and
changing that list safely needs CASPaxos's reconfiguration steps, which are the shell's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.common.session_key import SessionKey
from services.registry.quorum.messages import (
    ZERO,
    Accept,
    AcceptReply,
    Ballot,
    Prepare,
    PrepareReply,
    Proposal,
    Reply,
    Send,
)
from services.registry.quorum.register import Change, Entry


@dataclass(frozen=True, slots=True)
class Committed:
    """``value`` is chosen for ``key`` at ``ballot``; ``previous`` is the value the change
    was applied to (the one committed before it), so a CAS caller sees whether it won."""

    key: SessionKey
    ballot: Ballot
    previous: Entry | None
    value: Entry | None


@dataclass(frozen=True, slots=True)
class Failed:
    """The change did not complete in this round: preempted by ``higher`` (``None``: no
    majority answered, or the round was abandoned). It may still take effect later."""

    key: SessionKey
    ballot: Ballot
    higher: Ballot | None


Outcome = Committed | Failed


@dataclass(frozen=True, slots=True)
class Output:
    """What a proposer step produced: requests to deliver, keys that completed."""

    sends: tuple[Send, ...] = ()
    outcomes: tuple[Outcome, ...] = ()


class KeyBusy(ValueError):
    """A key already has a round in flight at this proposer (abandon it first)."""


class _Key:
    """One key's progress in a round: phase 1 until ``voters`` is set, then phase 2."""

    __slots__ = ("accepts", "base", "change", "noes", "previous", "promises", "value", "voters")

    def __init__(self, change: Change) -> None:
        self.change = change
        # phase 1: node -> (its incarnation, accepted ballot, accepted value)
        self.promises: dict[str, tuple[int, Ballot, Entry | None]] = {}
        self.noes: set[str] = set()  # members that will not vote in the current phase
        self.voters: dict[str, int] | None = None  # phase 2: who promised, at which incarnation
        self.accepts: set[str] = set()
        self.base = ZERO  # the accepted ballot of ``previous``
        self.previous: Entry | None = None
        self.value: Entry | None = None


class _Round:
    """One ballot's keys, over one member list."""

    __slots__ = ("ballot", "keys", "majority", "members")

    def __init__(
        self, ballot: Ballot, changes: Mapping[SessionKey, Change], members: frozenset[str]
    ) -> None:
        self.ballot = ballot
        self.members = members
        self.majority = len(members) // 2 + 1
        self.keys = {key: _Key(change) for key, change in changes.items()}

    def lost(self, k: _Key) -> bool:
        """A majority can no longer answer yes in this phase."""
        possible = len(k.voters) if k.voters is not None else len(self.members)
        return possible - len(k.noes) < self.majority


class Proposer:
    """A node's proposer: mints ballots, runs rounds, remembers the highest ballot seen.

    A ballot must never be minted twice (see :mod:`.messages`). Either the node starts
    under a new ``incarnation`` each time (then ``counter`` may start anywhere, e.g. at the
    highest counter its own acceptor holds), or it keeps its incarnation across restarts
    and the shell persists the counter of each ballot before its Prepares leave, and
    passes it back as ``counter``. A wiped node always takes a new incarnation.
    """

    def __init__(self, node: str, incarnation: int, counter: int = 0) -> None:
        self.node = node
        self.incarnation = incarnation
        self._counter = counter
        self._rounds: dict[Ballot, _Round] = {}
        self._busy: dict[SessionKey, Ballot] = {}

    def observe(self, ballot: Ballot) -> None:
        """Make the next ballot higher than ``ballot``."""
        self._counter = max(self._counter, ballot.counter)

    def in_flight(self) -> dict[SessionKey, Ballot]:
        """Keys with a round in flight, and its ballot."""
        return dict(self._busy)

    def proposed(
        self, ballot: Ballot, key: SessionKey
    ) -> tuple[Ballot, Entry | None, Entry | None] | None:
        """``(base, previous, value)`` once the key's round reached phase 2: the change
        was applied to ``previous``, accepted at ``base``. For tests and logs."""
        rnd = self._rounds.get(ballot)
        k = rnd.keys.get(key) if rnd else None
        return None if k is None or k.voters is None else (k.base, k.previous, k.value)

    def propose(
        self, changes: Mapping[SessionKey, Change], members: Iterable[str]
    ) -> tuple[Ballot, Output]:
        """Start a round changing each key of ``changes`` over ``members``."""
        voters = frozenset(members)
        if not changes or not voters:
            raise ValueError("a round needs at least one change and one member")
        busy = sorted(key for key in changes if key in self._busy)
        if busy:
            raise KeyBusy(f"keys already in flight: {busy}")
        self._counter += 1
        ballot = Ballot(self._counter, self.incarnation, self.node)
        self._rounds[ballot] = _Round(ballot, changes, voters)
        self._busy.update(dict.fromkeys(changes, ballot))
        prepare = Prepare(ballot, tuple(changes))
        return ballot, Output(tuple(Send(m, prepare) for m in sorted(voters)))

    def step(self, reply: Reply) -> Output:
        """Take one acceptor's reply; duplicates and replies to old rounds are ignored."""
        rnd = self._rounds.get(reply.ballot)
        if rnd is None or reply.node not in rnd.members:
            return Output()
        if isinstance(reply, PrepareReply):
            out = self._on_prepare_reply(rnd, reply)
        else:
            out = self._on_accept_reply(rnd, reply)
        if not rnd.keys:
            del self._rounds[rnd.ballot]
        return out

    def abandon(self, ballot: Ballot) -> Output:
        """Give up a round (its timeout): each unfinished key fails, outcome unknown."""
        rnd = self._rounds.pop(ballot, None)
        if rnd is None:
            return Output()
        for key in rnd.keys:
            del self._busy[key]
        return Output((), tuple(Failed(key, ballot, None) for key in rnd.keys))

    def _on_prepare_reply(self, rnd: _Round, reply: PrepareReply) -> Output:
        outcomes: list[Outcome] = []
        targets: list[tuple[str, int, SessionKey]] = []  # who accepts which key
        for p in reply.promises:
            k = rnd.keys.get(p.key)
            if k is None or self._answered(k, reply.node):
                continue
            self.observe(p.accepted)
            if k.voters is None:
                k.promises[reply.node] = (reply.incarnation, p.accepted, p.value)
                if len(k.promises) >= rnd.majority:
                    voters = self._start_accept(k)
                    targets += [(node, inc, p.key) for node, inc in voters.items()]
            elif p.accepted <= k.base:
                # A late promise that holds nothing newer than the value we built on: as if
                # it had been among the first, so its vote counts too (more room for loss).
                k.voters[reply.node] = reply.incarnation
                targets.append((reply.node, reply.incarnation, p.key))
        for r in reply.refusals:
            k = rnd.keys.get(r.key)
            if k is None or k.voters is not None or self._answered(k, reply.node):
                continue
            outcomes.extend(self._refused(rnd, r.key, k, reply.node, r.promised))
        return Output(self._accepts(rnd, targets), tuple(outcomes))

    def _on_accept_reply(self, rnd: _Round, reply: AcceptReply) -> Output:
        outcomes: list[Outcome] = []
        for key in reply.accepted:
            k = rnd.keys.get(key)
            if k is None or k.voters is None or k.voters.get(reply.node) != reply.incarnation:
                continue
            k.accepts.add(reply.node)
            if len(k.accepts) >= rnd.majority:
                outcomes.append(
                    self._finish(rnd, key, Committed(key, rnd.ballot, k.previous, k.value))
                )
        for r in reply.refusals:
            k = rnd.keys.get(r.key)
            if k is None or k.voters is None or reply.node not in k.voters:
                continue
            if reply.node in k.accepts:
                continue
            outcomes.extend(self._refused(rnd, r.key, k, reply.node, r.promised))
        return Output((), tuple(outcomes))

    @staticmethod
    def _answered(k: _Key, node: str) -> bool:
        return node in k.promises or node in k.noes or node in (k.voters or ())

    def _refused(
        self, rnd: _Round, key: SessionKey, k: _Key, node: str, promised: Ballot
    ) -> list[Outcome]:
        """A no: preempted if it names a higher ballot, else one vote fewer."""
        if promised > rnd.ballot:
            self.observe(promised)
            return [self._finish(rnd, key, Failed(key, rnd.ballot, promised))]
        k.noes.add(node)
        return [self._finish(rnd, key, Failed(key, rnd.ballot, None))] if rnd.lost(k) else []

    @staticmethod
    def _start_accept(k: _Key) -> dict[str, int]:
        """Phase 2: apply the change to the highest accepted value among the promises;
        the voters are the promisers, each at the incarnation that promised."""
        best = max(k.promises.values(), key=lambda p: p[1], default=(0, ZERO, None))
        k.base, k.previous = best[1], best[2]
        k.value = k.change.apply(k.previous)
        k.voters = {node: p[0] for node, p in k.promises.items()}
        k.noes = set()
        return k.voters

    @staticmethod
    def _accepts(rnd: _Round, targets: list[tuple[str, int, SessionKey]]) -> tuple[Send, ...]:
        """One Accept per (member, incarnation), carrying every key it should accept."""
        batches: dict[tuple[str, int], list[Proposal]] = {}
        for node, inc, key in targets:
            batches.setdefault((node, inc), []).append(Proposal(key, rnd.keys[key].value))
        return tuple(
            Send(node, Accept(rnd.ballot, inc, tuple(props)))
            for (node, inc), props in sorted(batches.items())
        )

    def _finish(self, rnd: _Round, key: SessionKey, outcome: Outcome) -> Outcome:
        del rnd.keys[key]
        del self._busy[key]
        return outcome
