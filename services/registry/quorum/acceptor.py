"""The acceptor: one member's votes, one :class:`Slot` per client id.

Theory of operation. A slot remembers the highest ballot promised and the last value
accepted, with its ballot. The rules are Paxos's, per key:

* ``Prepare(b)``: if ``b >= promised``, promise ``b`` and report the accepted value;
  otherwise refuse, naming the higher promise. (Equal is the same round asking again:
  ballots are unique, so a duplicated Prepare gets the same answer.)
* ``Accept(b, v)``: accept only if ``b`` is exactly what this incarnation promised last;
  then ``accepted = (b, v)``. Stricter than "``b >= promised``", and what lets an acceptor
  that lost its disk rejoin safely (below); it costs nothing, because a proposer sends
  its Accept only to the acceptors that promised.

Like etcd raft's ``Ready``, :meth:`Acceptor.step` returns the slots to persist and the
reply; **the shell must make the slots durable (fsync) before it sends the reply**. A
promise or an accept that was sent but not persisted is a vote the acceptor may take back
after a crash, and then two proposers can both win.

Restarts. An acceptor restarted from its persisted slots is the same acceptor: pass the
slots (and its catching-up flag) to the constructor. It may keep its incarnation or take
a new one; a new one only makes in-flight Accepts to the old one fail (a retry fixes it).
(The node's proposer has its own rule for restarts: :class:`~.proposer.Proposer`.)

**A wiped acceptor must not vote until it has caught up.** An acceptor that lost its
slots has forgotten values that were chosen with its vote and promises it made; voting
with the blank state can lose a committed change (the tests show one). Its node comes
back with a new incarnation and the acceptor built with ``catching_up=True``: it refuses
every Prepare and Accept, so the cluster counts it as down (with F failures tolerated,
at most F members may be down *or catching up* at any time). The shell then:

1. lists the keys held by a majority of the members, not counting itself or any member
   that is itself catching up (any value chosen before the wipe is on one of them);
2. for each key, runs a :class:`~services.registry.quorum.register.Read` round (its own
   acceptor refuses, so the round's majority is made of the others) and, once it
   commits at ballot ``b`` with value ``v``, calls :meth:`Acceptor.seed` with them;
3. when every listed key is seeded, calls :meth:`Acceptor.finish_catch_up` and persists
   the cleared flag.

Keys first written during the catch-up need no seed: they were chosen by a majority of
the others, which every majority that includes this acceptor meets. A round that counted
a promise of the *old* incarnation cannot use this acceptor's vote either: its Accept
names the old incarnation, so it is refused.
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
    Promise,
    Refusal,
    Reply,
    Request,
)
from services.registry.quorum.register import Entry


@dataclass(frozen=True, slots=True)
class Slot:
    """One key's durable acceptor state."""

    promised: Ballot = ZERO
    accepted: Ballot = ZERO
    value: Entry | None = None


EMPTY = Slot()


@dataclass(frozen=True, slots=True)
class Ready:
    """What a step produced: persist ``persist`` durably, *then* send ``reply`` to the
    proposer (``reply.ballot.node``)."""

    persist: tuple[tuple[SessionKey, Slot], ...]
    reply: Reply | None


class CatchUpError(RuntimeError):
    """The shell misused the catch-up API (seeding an acceptor that votes)."""


class Acceptor:
    """One member's acceptor; its whole state is ``slots`` plus the catching-up flag."""

    def __init__(
        self,
        node: str,
        incarnation: int,
        slots: Mapping[SessionKey, Slot] | None = None,
        *,
        catching_up: bool = False,
    ) -> None:
        self.node = node
        self.incarnation = incarnation
        self._slots: dict[SessionKey, Slot] = dict(slots or {})
        self._catching_up = catching_up

    @property
    def catching_up(self) -> bool:
        return self._catching_up

    def slot(self, key: SessionKey) -> Slot:
        return self._slots.get(key, EMPTY)

    def known_keys(self) -> list[SessionKey]:
        """Every key this acceptor holds a slot for (step 1 of a peer's catch-up)."""
        return sorted(self._slots)

    def step(self, message: Request) -> Ready:
        if isinstance(message, Prepare):
            return self._prepare(message)
        return self._accept(message)

    def _prepare(self, msg: Prepare) -> Ready:
        persist: dict[SessionKey, Slot] = {}
        promises: list[Promise] = []
        refusals: list[Refusal] = []
        for key in msg.keys:
            slot = persist.get(key) or self.slot(key)
            if self._catching_up:
                refusals.append(Refusal(key, ZERO))
            elif msg.ballot >= slot.promised:
                if msg.ballot != slot.promised:
                    persist[key] = Slot(msg.ballot, slot.accepted, slot.value)
                promises.append(Promise(key, slot.accepted, slot.value))
            else:
                refusals.append(Refusal(key, slot.promised))
        reply = PrepareReply(
            msg.ballot, self.node, self.incarnation, tuple(promises), tuple(refusals)
        )
        return self._ready(persist, reply)

    def _accept(self, msg: Accept) -> Ready:
        persist: dict[SessionKey, Slot] = {}
        accepted: list[SessionKey] = []
        refusals: list[Refusal] = []
        votes = not self._catching_up and msg.incarnation == self.incarnation
        for p in msg.proposals:
            slot = persist.get(p.key) or self.slot(p.key)
            if not votes:
                refusals.append(Refusal(p.key, ZERO))
            elif msg.ballot == slot.promised:
                persist[p.key] = Slot(msg.ballot, msg.ballot, p.value)
                accepted.append(p.key)
            else:
                refusals.append(Refusal(p.key, slot.promised))
        reply = AcceptReply(
            msg.ballot, self.node, self.incarnation, tuple(accepted), tuple(refusals)
        )
        return self._ready(persist, reply)

    def seed(self, items: Iterable[tuple[SessionKey, Ballot, Entry | None]]) -> Ready:
        """Catch-up step 2: store values committed by rounds this acceptor took no part
        in. A seed older than what the slot holds is ignored (the slot is newer)."""
        if not self._catching_up:
            raise CatchUpError("seed() is only for an acceptor that is catching up")
        persist: dict[SessionKey, Slot] = {}
        for key, ballot, value in items:
            slot = persist.get(key) or self.slot(key)
            if ballot > slot.accepted:
                persist[key] = Slot(max(slot.promised, ballot), ballot, value)
        return self._ready(persist, None)

    def finish_catch_up(self) -> None:
        """Catch-up step 3: vote from now on. The shell persists the cleared flag."""
        self._catching_up = False

    def _ready(self, persist: dict[SessionKey, Slot], reply: Reply | None) -> Ready:
        self._slots.update(persist)
        return Ready(tuple(persist.items()), reply)
