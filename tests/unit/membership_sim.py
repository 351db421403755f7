"""A seeded in-memory network for the failure detector (the cheap VOPR of STYLE.md).

Every node is a pure :class:`Detector`; one event heap orders message deliveries and
ticks (each node is ticked exactly at its ``next_wakeup()``), so a run is a function of
its seed and replays exactly. Faults:

* loss (each message dropped with a probability) and delay (uniform in a range, so
  messages reorder);
* cut links, each direction on its own: symmetric partitions, one-way cuts, and the
  asymmetric "A-C cut, B sees both";
* pause (SIGSTOP): the node neither ticks, sends nor receives; what is sent to it waits
  in its socket buffer and arrives when it resumes, as over TCP;
* kill (SIGKILL): as a pause that never ends, with or without the peers seeing the
  connection close (``peer_disconnected``); ``restart`` brings up a fresh detector.

Each view change is recorded as ``(time, observer, node, up)`` for the checks.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass

from services.gossip.membership.detector import Detector
from services.gossip.membership.messages import Message, Output
from services.gossip.membership.timing import Config


@dataclass(frozen=True, slots=True)
class Seen:
    time: float
    observer: str
    node: str
    up: bool
    cause: str


class Sim:
    def __init__(
        self,
        n: int,
        seed: int,
        *,
        config: Config | None = None,
        loss: float = 0.0,
        delay: tuple[float, float] = (0.0002, 0.005),
    ) -> None:
        self.names = [f"n{i}" for i in range(n)]
        self.config = config or Config()
        self.seed = seed
        self.loss = loss
        self.delay = delay
        self.now = 0.0
        self.rng = random.Random(seed)
        self.nodes: dict[str, Detector] = {}
        self.paused: set[str] = set()
        self.killed: set[str] = set()
        self.cut: set[tuple[str, str]] = set()
        self.held: dict[str, list[Message]] = {name: [] for name in self.names}
        self.seen: list[Seen] = []
        self.messages = 0
        self._heap: list[tuple[float, int, str, Message | None]] = []
        self._order = itertools.count()
        self._wake: dict[str, float] = {}
        for name in self.names:
            self.start(name, incarnation=0)

    # -- the cluster --------------------------------------------------------------------

    @property
    def live(self) -> list[str]:
        return [n for n in self.names if n not in self.paused and n not in self.killed]

    def up(self, observer: str) -> frozenset[str]:
        return self.nodes[observer].up

    def all_up_everywhere(self) -> bool:
        return all(self.up(n) == frozenset(self.names) for n in self.live)

    def start(self, name: str, *, incarnation: int) -> None:
        rng = random.Random(f"{self.seed}/{name}/{incarnation}")
        self.nodes[name] = Detector(
            name, self.names, rng, config=self.config, incarnation=incarnation, now=self.now
        )
        self.killed.discard(name)
        self.paused.discard(name)
        self.held[name] = []
        self._schedule(name)

    def pause(self, name: str) -> None:
        self.paused.add(name)

    def resume(self, name: str) -> None:
        self.paused.discard(name)
        held, self.held[name] = self.held[name], []
        for message in held:  # the socket buffer first, as an event loop would read it
            self._output(name, self.nodes[name].receive(message, self.now))
        self._schedule(name)

    def kill(self, name: str, *, close: bool) -> None:
        self.killed.add(name)
        if close:
            for other in self.live:
                self._output(other, self.nodes[other].peer_disconnected(name, self.now))
                self._schedule(other)

    def restart(self, name: str, *, incarnation: int) -> None:
        self.start(name, incarnation=incarnation)

    # -- the network --------------------------------------------------------------------

    def cut_link(self, src: str, dst: str) -> None:
        self.cut.add((src, dst))

    def split(self, *groups: Iterable[str]) -> None:
        """A symmetric partition: no message crosses between groups."""
        sets = [set(g) for g in groups]
        for a, b in itertools.permutations(range(len(sets)), 2):
            self.cut.update((x, y) for x in sets[a] for y in sets[b])

    def heal(self) -> None:
        self.cut.clear()

    # -- running ------------------------------------------------------------------------

    def run(self, seconds: float) -> None:
        until = self.now + seconds
        while self._heap and self._heap[0][0] <= until:
            t, _, name, message = heapq.heappop(self._heap)
            self.now = t
            if name in self.killed:
                continue
            if message is None:  # a tick, unless a newer wakeup replaced it
                if name in self.paused or self._wake.get(name) != t:
                    continue
                self._output(name, self.nodes[name].tick(t))
            elif name in self.paused:
                self.held[name].append(message)
                continue
            else:
                self._output(name, self.nodes[name].receive(message, t))
            self._schedule(name)
        self.now = until

    def _schedule(self, name: str) -> None:
        wake = max(self.nodes[name].next_wakeup(), self.now)
        if self._wake.get(name) != wake:
            self._wake[name] = wake
            heapq.heappush(self._heap, (wake, next(self._order), name, None))

    def _output(self, name: str, out: Output) -> None:
        for c in out.changes:
            self.seen.append(Seen(self.now, name, c.node, c.up, c.cause))
        for send in out.sends:
            self.messages += 1
            if (name, send.to) in self.cut or self.rng.random() < self.loss:
                continue
            at = self.now + self.rng.uniform(*self.delay)
            heapq.heappush(self._heap, (at, next(self._order), send.to, send.message))

    # -- checks -------------------------------------------------------------------------

    def downs(self, since: float = 0.0) -> list[Seen]:
        return [s for s in self.seen if not s.up and s.time >= since]

    def declared_down(self, observer: str, node: str, since: float) -> float | None:
        """When ``observer`` first saw ``node`` go down at or after ``since``."""
        for s in self.seen:
            if s.observer == observer and s.node == node and not s.up and s.time >= since:
                return s.time
        return None

    def settle(self, limit: float = 10.0, step: float = 0.05) -> float:
        """Run until every live node sees every node up; the time it took."""
        start = self.now
        while not self.all_up_everywhere():
            if self.now - start > limit:
                views = {n: sorted(self.up(n)) for n in self.live}
                raise AssertionError(f"seed {self.seed}: no convergence in {limit}s: {views}")
            self.run(step)
        return self.now - start
