"""A seeded in-memory cluster for the CASPaxos core, and a checker of its history.

A cheap VOPR (STYLE.md): every member runs an :class:`Acceptor` and a :class:`Proposer`;
one ``random.Random(seed)`` picks, at each step, a message to deliver (in any order, so
the network reorders), to lose or to duplicate, a proposer to start a round on a few keys,
a round to abandon, a node to restart from its disk or to wipe. The simulator plays the
shell: it persists a step's slots before it queues the reply, restarts a node under a new
incarnation (or under the same one, with the ballot counter it saved), and runs the
catch-up procedure of :mod:`services.registry.quorum.acceptor` for a wiped node. A
failing seed replays exactly.

The checker does not trust the proposers' reports. It records every value sent in an
Accept (with the ballot of the value it was built on) and every acceptance persisted by
any acceptor, so it knows which values were *chosen* (accepted by a majority) even when
the proposer that chose one crashed before hearing so.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import count, pairwise

from services.common.session_key import SessionKey
from services.registry.quorum.acceptor import Acceptor, Ready, Slot
from services.registry.quorum.messages import (
    ZERO,
    Accept,
    Ballot,
    Prepare,
    Reply,
    Request,
)
from services.registry.quorum.proposer import Committed, Output, Proposer
from services.registry.quorum.register import (
    OFFLINE,
    ONLINE,
    Change,
    Claim,
    Entry,
    FailOver,
    Read,
    Release,
    SetState,
)

Message = Request | Reply
KEYS: tuple[SessionKey, ...] = (("", "c0"), ("", "c1"), ("m", "c0"))


@dataclass(frozen=True)
class Faults:
    """Per-step probabilities of each kind of event (the rest are deliveries)."""

    propose: float = 0.15
    loss: float = 0.0  # of a delivery
    dup: float = 0.0  # of a delivery
    abandon: float = 0.0
    restart: float = 0.0
    wipe: float = 0.0


@dataclass(frozen=True)
class Proposed:
    """A value a proposer sent in an Accept: ``change`` applied to ``previous``, which
    was accepted at ``base``."""

    base: Ballot
    previous: Entry | None
    value: Entry | None
    change: Change


@dataclass
class CatchUp:
    """A wiped node's catch-up, in memory (a restart starts it over)."""

    todo: set[SessionKey] | None = None  # None until the scan
    rounds: dict[Ballot, set[SessionKey]] = field(default_factory=dict)


@dataclass
class Node:
    name: str
    acceptor: Acceptor
    proposer: Proposer
    disk: dict[SessionKey, Slot]
    disk_catching_up: bool
    catch_up: CatchUp | None


class Sim:
    def __init__(
        self,
        members: int,
        seed: int,
        faults: Faults = Faults(),
        *,
        keys: Sequence[SessionKey] = KEYS,
        proposers: int | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.names = [f"n{i}" for i in range(members)]
        self.majority = members // 2 + 1
        self.faults = faults
        self.keys = list(keys)
        self.proposing = self.names[: proposers or members]
        self._incarnations = count(1)
        self.high_water: dict[str, int] = {}  # a node's persisted ballot counter
        self.nodes = {name: self._boot(name, {}, catching_up=False) for name in self.names}
        self.net: list[tuple[str, Message]] = []
        self.time = 0
        # the history the checker reads
        self.changes: dict[tuple[SessionKey, Ballot], Change] = {}
        self.proposals: dict[tuple[SessionKey, Ballot], Proposed] = {}
        self.accepted_by: dict[tuple[SessionKey, Ballot, Entry | None], set[str]] = {}
        self.commits: list[tuple[int, Committed]] = []
        self.last_commit: dict[SessionKey, Ballot] = {}
        self.read_floor: dict[tuple[SessionKey, Ballot], Ballot] = {}
        self.reads: list[tuple[Committed, Ballot]] = []
        self.wipes = 0
        self.known: dict[tuple[str, SessionKey], int] = {}  # a node's last seen epoch

    # -- the shell ---------------------------------------------------------------------

    def _boot(
        self,
        name: str,
        disk: dict[SessionKey, Slot],
        *,
        catching_up: bool,
        incarnation: int | None = None,
    ) -> Node:
        """A node's start: a new incarnation and a proposer counting from 0, or (a shell
        that persists its ballot counter) the old incarnation and the saved counter."""
        inc = next(self._incarnations) if incarnation is None else incarnation
        acceptor = Acceptor(name, inc, disk, catching_up=catching_up)
        counter = 0 if incarnation is None else self.high_water.get(name, 0)
        proposer = Proposer(name, inc, counter)
        return Node(
            name, acceptor, proposer, dict(disk), catching_up, CatchUp() if catching_up else None
        )

    def _persist(self, node: Node, ready: Ready) -> None:
        """Durable first (the shell's one duty), then record acceptances for the checker."""
        node.disk.update(ready.persist)
        for key, slot in ready.persist:
            if slot.accepted != ZERO:
                self.accepted_by.setdefault((key, slot.accepted, slot.value), set()).add(node.name)

    def propose(self, name: str, changes: dict[SessionKey, Change]) -> Ballot:
        node = self.nodes[name]
        ballot, out = node.proposer.propose(changes, self.names)
        self.high_water[name] = ballot.counter  # persisted before the Prepares leave
        for key, change in changes.items():
            self.changes[(key, ballot)] = change
            if isinstance(change, Read):
                self.read_floor[(key, ballot)] = self.last_commit.get(key, ZERO)
        self._handle(node, out)
        return ballot

    def _handle(self, node: Node, out: Output) -> None:
        for send in out.sends:
            if isinstance(send.message, Accept):
                self._record_accept(node, send.message)
            self.net.append((send.to, send.message))
        for outcome in out.outcomes:
            if isinstance(outcome, Committed):
                self._committed(node, outcome)
            cu = node.catch_up
            if cu is not None and outcome.ballot in cu.rounds:
                cu.rounds[outcome.ballot].discard(outcome.key)
                if isinstance(outcome, Committed) and cu.todo is not None:
                    ready = node.acceptor.seed([(outcome.key, outcome.ballot, outcome.value)])
                    self._persist(node, ready)
                    cu.todo.discard(outcome.key)

    def _record_accept(self, node: Node, msg: Accept) -> None:
        for p in msg.proposals:
            seen = node.proposer.proposed(msg.ballot, p.key)
            assert seen is not None
            base, previous, value = seen
            assert value == p.value
            rec = Proposed(base, previous, value, self.changes[(p.key, msg.ballot)])
            old = self.proposals.setdefault((p.key, msg.ballot), rec)
            assert old == rec, f"ballot {msg.ballot} reused for {p.key}: {old} vs {rec}"

    def _committed(self, node: Node, c: Committed) -> None:
        self.commits.append((self.time, c))
        self.last_commit[c.key] = max(self.last_commit.get(c.key, ZERO), c.ballot)
        if c.value is not None:
            self.known[(node.name, c.key)] = c.value.epoch
        if (c.key, c.ballot) in self.read_floor:
            self.reads.append((c, self.read_floor[(c.key, c.ballot)]))

    def deliver(self, i: int, *, lossy: bool = True) -> None:
        dst, msg = self.net.pop(i)
        if lossy and self.rng.random() < self.faults.loss:
            return
        if lossy and self.rng.random() < self.faults.dup:
            self.net.insert(self.rng.randrange(len(self.net) + 1), (dst, msg))
        node = self.nodes[dst]
        if isinstance(msg, (Prepare, Accept)):
            ready = node.acceptor.step(msg)
            self._persist(node, ready)
            if ready.reply is not None:
                self.net.append((ready.reply.ballot.node, ready.reply))
        else:
            self._handle(node, node.proposer.step(msg))

    def restart(self, name: str, *, same_incarnation: bool = False) -> None:
        """A crash and restart: the acceptor reloads its disk, the proposer's rounds die."""
        old = self.nodes[name]
        inc = old.acceptor.incarnation if same_incarnation else None
        self.nodes[name] = self._boot(
            name, old.disk, catching_up=old.disk_catching_up, incarnation=inc
        )

    def wipe(self, name: str) -> bool:
        """Lose the data directory; refused if F members are already catching up."""
        tolerated = (len(self.names) - 1) // 2
        if sum(n.acceptor.catching_up for n in self.nodes.values()) >= tolerated:
            return False
        self.nodes[name] = self._boot(name, {}, catching_up=True)
        self.wipes += 1
        return True

    def catch_up_step(self, name: str) -> None:
        """Advance a wiped node's catch-up: scan, read and seed, finish."""
        node = self.nodes[name]
        cu = node.catch_up
        if cu is None:
            return
        if cu.todo is None:
            full = [n for n in self.names if n != name and not self.nodes[n].acceptor.catching_up]
            if len(full) < self.majority:
                return
            scanned = self.rng.sample(full, self.majority)
            cu.todo = {key for n in scanned for key in self.nodes[n].acceptor.known_keys()}
        if not cu.todo:
            node.acceptor.finish_catch_up()
            node.disk_catching_up = False
            node.catch_up = None
            return
        reading = set().union(*cu.rounds.values())
        busy = node.proposer.in_flight()
        keys = [k for k in sorted(cu.todo) if k not in reading and k not in busy]
        if keys:
            ballot = self.propose(name, {k: Read() for k in keys})
            cu.rounds[ballot] = set(keys)

    def abandon(self, name: str) -> None:
        node = self.nodes[name]
        ballots = sorted(set(node.proposer.in_flight().values()))
        if ballots:
            self._handle(node, node.proposer.abandon(self.rng.choice(ballots)))

    # -- the random schedule -----------------------------------------------------------

    def random_change(self, name: str, key: SessionKey) -> Change:
        epoch = self.known.get((name, key), 0) + self.rng.choice((0, 0, 0, 1, -1))
        roll = self.rng.random()
        others = [n for n in self.names if n != name]
        if roll < 0.3:
            persistent = self.rng.random() < 0.5
            return Claim(name, (name, self.rng.choice(others)), persistent=persistent)
        if roll < 0.35:
            return FailOver(self.rng.choice(others), name, (name, self.rng.choice(others)))
        if roll < 0.6:
            return SetState(epoch, self.rng.choice((ONLINE, OFFLINE)))
        if roll < 0.75:
            return Release(epoch)
        return Read()

    def random_proposal(self) -> None:
        name = self.rng.choice(self.proposing)
        busy = self.nodes[name].proposer.in_flight()
        free = [k for k in self.keys if k not in busy]
        if free:
            keys = self.rng.sample(free, self.rng.randint(1, min(3, len(free))))
            self.propose(name, {k: self.random_change(name, k) for k in keys})

    def step(self) -> None:
        self.time += 1
        f, roll = self.faults, self.rng.random()
        if roll < f.propose or not self.net:
            self.random_proposal()
        elif (roll := roll - f.propose) < f.abandon:
            self.abandon(self.rng.choice(self.names))
        elif (roll := roll - f.abandon) < f.restart:
            self.restart(self.rng.choice(self.names), same_incarnation=self.rng.random() < 0.5)
        elif (roll := roll - f.restart) < f.wipe:
            self.wipe(self.rng.choice(self.names))
        else:
            self.deliver(self.rng.randrange(len(self.net)))
        for name in self.names:
            if self.nodes[name].catch_up is not None and self.rng.random() < 0.2:
                self.catch_up_step(name)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    # -- after the faults ----------------------------------------------------------------

    def drain(self) -> None:
        """Deliver everything in flight, in order and without loss."""
        while self.net:
            self.time += 1
            self.deliver(0, lossy=False)

    def quiesce(self) -> None:
        """Drain, then abandon every open round (its timeout), then drain again."""
        self.drain()
        for name in self.names:
            for ballot in sorted(set(self.nodes[name].proposer.in_flight().values())):
                self._handle(self.nodes[name], self.nodes[name].proposer.abandon(ballot))
        self.drain()

    def settle_catch_ups(self, rounds: int = 10) -> None:
        """Finish every catch-up on a quiet network (each must, within ``rounds``)."""
        self.quiesce()
        for name in self.names:
            for _ in range(rounds):
                if self.nodes[name].catch_up is None:
                    break
                self.catch_up_step(name)
                self.drain()
            assert self.nodes[name].catch_up is None, f"{name} did not catch up"

    def read_all(self, name: str, attempts: int = 3) -> dict[SessionKey, Entry | None]:
        """Read every key from ``name`` on a quiet network; each read must commit within
        ``attempts`` rounds (the first may meet promises above this proposer's ballots)."""
        values: dict[SessionKey, Entry | None] = {}
        todo = list(self.keys)
        for _ in range(attempts):
            ballot = self.propose(name, {k: Read() for k in todo})
            self.drain()
            done = [c for t, c in self.commits if c.ballot == ballot]
            values.update((c.key, c.value) for c in done)
            todo = [k for k in todo if k not in values]
            if not todo:
                return values
        raise AssertionError(f"{name} could not read {todo} in {attempts} rounds")


# -- the checker -----------------------------------------------------------------------


def chosen(sim: Sim) -> dict[SessionKey, list[tuple[Ballot, Entry | None]]]:
    """Per key, the values a majority accepted, by ballot."""
    out: dict[SessionKey, list[tuple[Ballot, Entry | None]]] = {}
    for (key, ballot, value), nodes in sim.accepted_by.items():
        if len(nodes) >= sim.majority:
            out.setdefault(key, []).append((ballot, value))
    for values in out.values():
        values.sort(key=lambda bv: bv[0])
    return out


def ancestry(sim: Sim, key: SessionKey, ballot: Ballot) -> list[Ballot]:
    """The ballots a value was built on, newest first, down to the empty register."""
    path = [ballot]
    while ballot != ZERO:
        ballot = sim.proposals[(key, ballot)].base
        path.append(ballot)
    return path


def check(sim: Sim) -> None:
    """Every safety property; raises AssertionError naming the first one broken."""
    for (key, ballot), p in sim.proposals.items():
        # each proposal is its change applied to the value accepted at its base
        assert p.base < ballot
        base_value = None if p.base == ZERO else sim.proposals[(key, p.base)].value
        assert p.previous == base_value, f"{key}@{ballot} built on a value not at its base"
        assert p.change.apply(p.previous) == p.value
    ch = chosen(sim)
    for key, values in ch.items():
        ballots = [b for b, _ in values]
        assert len(set(ballots)) == len(ballots), f"two values chosen at one ballot for {key}"
        for b, v in values:
            assert sim.proposals[(key, b)].value == v
        # (1) no lost update: each chosen value descends from every earlier chosen one
        for (older, _), (newer, _) in pairwise(values):
            assert older in ancestry(sim, key, newer), f"{key}: {older} lost by {newer}"
        _check_epochs(sim, key, values, ancestry(sim, key, ballots[-1]))
    # proposers report only what was chosen
    for _, c in sim.commits:
        assert (c.ballot, c.value) in ch.get(c.key, []), f"reported but not chosen: {c}"
    # (4) a read returns the last value committed before it began, or a newer one
    for c, floor in sim.reads:
        assert c.ballot > floor
        if floor != ZERO:
            assert floor in ancestry(sim, c.key, c.ballot), f"read {c} older than {floor}"


def _check_epochs(
    sim: Sim,
    key: SessionKey,
    values: list[tuple[Ballot, Entry | None]],
    path: Iterable[Ballot],
) -> None:
    """(2) one owner per epoch among the chosen values and the values they were built on;
    (3) epochs never fall, and each Claim raises the epoch by exactly 1."""
    owners: dict[int, str] = {}
    epochs = [v.epoch for _, v in values if v is not None]
    assert epochs == sorted(epochs), f"{key}: chosen epochs fell: {epochs}"
    built = [sim.proposals[(key, b)].value for b in path if b != ZERO]
    for v in [v for _, v in values] + built:
        if v is not None:
            owner = owners.setdefault(v.epoch, v.owner)
            assert owner == v.owner, f"{key}: epoch {v.epoch} owned by {owner} and {v.owner}"
    for b in path:
        if b == ZERO:
            continue
        p = sim.proposals[(key, b)]
        before = p.previous.epoch if p.previous is not None else 0
        after = p.value.epoch if p.value is not None else 0
        assert after >= before, f"{key}: epoch fell from {before} to {after}"
        if isinstance(p.change, Claim):
            assert after == before + 1, f"{key}: a claim moved the epoch {before} -> {after}"
        if isinstance(p.change, FailOver) and p.value != p.previous:
            assert after == before + 1, f"{key}: a failover moved the epoch {before} -> {after}"
