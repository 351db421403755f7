"""SWIM failure detection as a pure state machine: messages and ticks in, sends and view
changes out (the shape of etcd raft's ``Step``/``Ready``; the protocol of hashicorp
memberlist with its Lifeguard extensions).

Theory of operation
-------------------
Each node probes one member per *protocol period* ``T`` (``probe_interval``), walking the
other members in a random cycle (``probe_order``): each member is probed by each node
once every ``N - 1`` periods. A probe is a ``Ping``; without an ``Ack`` after
``ack_timeout``, the node asks up to ``indirect_probes`` random alive members to ping the
target for it (``PingReq``); they answer ``Ack`` or, after ``nack_timeout``, ``Nack``
(Lifeguard: proof that the helper, at least, hears us). With no ack by the end of the period
the target becomes *suspect*, a rumour piggybacked on every message and spread by
``Gossip`` to ``gossip_fanout`` random members every ``gossip_interval``. A suspect that
is alive refutes by raising its *incarnation* (only a node raises its own): ``Alive`` at a
higher incarnation beats any ``Suspect`` or ``Dead`` at a lower one. Unrefuted, the
suspicion times out and the node is declared *dead*, i.e. down (see ``suspicion`` for the
timeout, which shrinks as other members confirm, and the local health multiplier).

Down members stay in the probe order: the ping to a node believed down carries that
belief, so a node that is back (after a pause or a healed partition) refutes it at once.
Every message carries its sender's incarnation, which counts as an ``Alive`` rumour. Peers
start down and come up when first heard from, so a restarted node never claims a
majority it has not seen.

``peer_disconnected`` is the fast path: the shell calls it when an inter-node connection
closes, which on one host happens the instant a peer is SIGKILLed. The peer is declared
dead at once and the rumour spreads; a peer that is in fact alive refutes on the next
ping it gets. A paused peer (no close) is down everywhere within ``N·T + suspicion_max``
(1.4 s for 3 members with the defaults); ``timing`` has the derivation.

Worked example, members a b c, c paused (SIGSTOP) just before a's turn to probe it::

    t=0.0  a -> c  Ping(seq=7)                 c is paused: no Ack
    t=0.1  a -> b  PingReq(seq=7, c)           b pings c, no answer within 0.07 s
           b -> a  Nack(seq=7)                 b is fine, so a's health is not to blame
    t=0.2  a suspects c: Suspect(c, 0, by=a)   spread: b starts its timer too (0.8 s)
    t≤0.6  b's own probe of c fails            b confirms: both timeouts drop to 0.4 s
    t≤0.6  a and b declare Dead(c, 0)          Change(c, up=False) on both
    later  c resumes, b pings it with Dead(c, 0) attached; c answers with incarnation 1,
           which beats Dead at 0: Change(c, up=True) on b, then on a from the rumour.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace

from services.gossip.membership.broadcast import RumourQueue
from services.gossip.membership.messages import (
    Ack,
    Alive,
    Change,
    Dead,
    Gossip,
    Message,
    Nack,
    Output,
    Ping,
    PingReq,
    Rumour,
    Send,
    State,
    Suspect,
)
from services.gossip.membership.probe_order import ProbeOrder
from services.gossip.membership.suspicion import Health, Suspicion
from services.gossip.membership.timing import Config


@dataclass(slots=True)
class _Peer:
    state: State = State.DEAD
    incarnation: int = -1  # -1: never heard from
    suspicion: Suspicion | None = None


@dataclass(slots=True)
class _Probe:
    target: str
    seq: int
    indirect_at: float
    deadline: float
    asked: bool = False  # the indirect probes went out
    nacks: int = 0


@dataclass(slots=True)
class _Relay:
    """An indirect probe this node makes for ``requester``."""

    requester: str
    seq: int  # the requester's
    nack_at: float
    expires: float
    nacked: bool = False


class Detector:
    """One node's failure detector. Every entry point returns an :class:`Output`; the shell
    sends its messages, applies its changes and calls ``tick`` by ``next_wakeup()``."""

    def __init__(
        self,
        node: str,
        members: Iterable[str],
        rng: random.Random,
        *,
        config: Config | None = None,
        incarnation: int = 0,
        now: float = 0.0,
    ) -> None:
        self.node = node
        self.config = cfg = config or Config()
        self._rng = rng
        self._incarnation = incarnation
        self._peers: dict[str, _Peer] = {}
        self._order = ProbeOrder(rng)
        self._seq = 0
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}
        self._queue = RumourQueue()
        self._health = Health(cfg.max_multiplier)
        self._next_probe_at = now + rng.uniform(0, cfg.probe_interval)  # no lockstep
        self._next_gossip_at = now
        self._out = Output()
        self._add_peers(set(members) - {node})
        self._queue.put(Alive(node, incarnation))

    # -- reading ------------------------------------------------------------------------

    @property
    def incarnation(self) -> int:
        return self._incarnation

    @property
    def health(self) -> int:
        """The local health multiplier (1 when healthy)."""
        return self._health.multiplier

    @property
    def up(self) -> frozenset[str]:
        """This node and the peers it believes alive or merely suspect."""
        return frozenset([self.node, *self._gossip_targets()])

    def peer(self, node: str) -> tuple[State, int] | None:
        """What this node believes of ``node``: state and incarnation (-1: never heard)."""
        p = self._peers.get(node)
        return None if p is None else (p.state, p.incarnation)

    def next_wakeup(self) -> float:
        """When ``tick`` is next due; the shell may tick more often, never much later."""
        times = [self._next_probe_at]
        if self._queue and self._gossip_targets():
            times.append(self._next_gossip_at)
        if (p := self._probe) is not None:
            times.append(p.deadline if p.asked else p.indirect_at)
        times.extend(r.expires if r.nacked else r.nack_at for r in self._relays.values())
        lo, hi = self.config.suspicion_min, self.config.suspicion_max
        times.extend(p.suspicion.deadline(lo, hi) for p in self._peers.values() if p.suspicion)
        return min(times)

    # -- inputs -------------------------------------------------------------------------

    def tick(self, now: float) -> Output:
        self._begin(now)
        return self._end(now)

    def receive(self, message: Message, now: float) -> Output:
        """Handle a message from a peer (any order, duplicates and stale ones allowed)."""
        self._begin(now)
        src = message.src
        if src != self.node:
            self._apply(Alive(src, message.incarnation), now, f"heard from {src}")
            told = False
            for r in message.rumours:
                told |= r.node == self.node and not isinstance(r, Alive)
                self._apply(r, now, f"rumour from {src}")
            replied = self._handle(message, now)
            if not replied and (told or self._belief(src) is not None):
                # src holds a wrong belief about one of us: let it (or us) set it right
                self._emit(src, Gossip(self.node, self._incarnation))
        return self._end(now)

    def peer_disconnected(self, node: str, now: float) -> Output:
        """The connection to ``node`` closed: declare it down now (SIGKILL fast path)."""
        self._begin(now)
        peer = self._peers.get(node)
        if peer is not None and peer.state is not State.DEAD:
            if self._probe is not None and self._probe.target == node:
                self._probe = None
            self._apply(Dead(node, peer.incarnation, self.node), now, "connection closed")
        return self._end(now)

    def set_members(self, members: Iterable[str], now: float) -> Output:
        """Follow the member list: new members start down until heard from."""
        self._begin(now)
        wanted = set(members) - {self.node}
        for gone in set(self._peers) - wanted:
            del self._peers[gone]
            self._queue.discard(gone)
            self._order.remove(gone)
            if self._probe is not None and self._probe.target == gone:
                self._probe = None
        self._add_peers(wanted - set(self._peers))
        return self._end(now)

    # -- the machine --------------------------------------------------------------------

    def _begin(self, now: float) -> None:
        """Start a call; a call far later than ``next_wakeup()`` means we were stalled."""
        self._out = Output()
        late = now - self.next_wakeup()
        if late > self.config.stall_threshold:
            # We were frozen (SIGSTOP, a long GC): the silence we saw is ours, not theirs.
            self._health.apply(1)
            self._probe = None
            self._relays.clear()
            for p in self._peers.values():
                if p.suspicion is not None:
                    p.suspicion.started += late
            self._next_probe_at = now

    def _end(self, now: float) -> Output:
        """Run every timer that is due (any call may find some), then hand the output over."""
        cfg = self.config
        for seq, relay in list(self._relays.items()):
            if not relay.nacked and now >= relay.nack_at:
                relay.nacked = True
                self._reply(relay.requester, relay.seq, ok=False)
            if now >= relay.expires:
                del self._relays[seq]
        if (probe := self._probe) is not None:
            if not probe.asked and now >= probe.indirect_at:
                self._ask_helpers(probe)
            if now >= probe.deadline:
                self._probe_failed(probe, now)
        for name, p in list(self._peers.items()):
            if p.suspicion and now >= p.suspicion.deadline(cfg.suspicion_min, cfg.suspicion_max):
                self._apply(Dead(name, p.incarnation, self.node), now, "suspicion timed out")
        if now >= self._next_probe_at:
            self._start_probe(now)
        if self._queue and now >= self._next_gossip_at:
            self._next_gossip_at = now + cfg.gossip_interval
            targets = self._gossip_targets()
            for to in self._rng.sample(targets, min(cfg.gossip_fanout, len(targets))):
                self._emit(to, Gossip(self.node, self._incarnation))
        out, self._out = self._out, Output()
        return out

    def _handle(self, m: Message, now: float) -> bool:
        """Act on a message's own meaning; True when it was answered to its sender."""
        match m:
            case Ping() | PingReq() if m.target == self.node:
                self._reply(m.src, m.seq, ok=True)
                return True
            case PingReq():
                seq = self._next_seq()
                cfg = self.config
                relay = _Relay(m.src, m.seq, now + cfg.nack_timeout, now + cfg.probe_interval)
                self._relays[seq] = relay
                self._emit(m.target, Ping(self.node, self._incarnation, seq, m.target, ()))
            case Ack() if self._probe is not None and m.seq == self._probe.seq:
                self._probe = None
                self._health.apply(-1)
            case Ack() if m.seq in self._relays:
                relay = self._relays.pop(m.seq)
                self._reply(relay.requester, relay.seq, ok=True)
            case Nack() if self._probe is not None and m.seq == self._probe.seq:
                self._probe.nacks += 1
        return False

    def _apply(self, r: Rumour, now: float, cause: str) -> None:
        """Merge one rumour into this node's beliefs: per node, the greater
        ``(incarnation, rank)`` wins; a repeated suspicion by a new suspecter confirms it."""
        if r.node == self.node:
            if r.incarnation > self._incarnation or (
                r.incarnation == self._incarnation and not isinstance(r, Alive)
            ):
                self._incarnation = r.incarnation + 1  # refute: only we may raise it
                self._queue.put(Alive(self.node, self._incarnation))
                self._health.apply(0 if isinstance(r, Alive) else 1)
            return
        peer = self._peers.get(r.node)
        if peer is None or r.incarnation < 0:
            return
        if isinstance(r, Suspect) and peer.suspicion and r.incarnation == peer.incarnation:
            if peer.suspicion.confirm(r.by):
                self._queue.put(r)
            return
        if (r.incarnation, r.state) <= (peer.incarnation, peer.state):
            return
        was_up = peer.state is not State.DEAD
        peer.state, peer.incarnation, peer.suspicion = r.state, r.incarnation, None
        if isinstance(r, Suspect):
            wanted = min(self.config.confirmations, max(len(self.up) - 2, 0))
            peer.suspicion = Suspicion(now, wanted, {r.by})
        self._queue.put(r)
        if was_up != (r.state is not State.DEAD):
            self._out.changes.append(Change(r.node, not was_up, r.incarnation, cause))

    # -- probing ------------------------------------------------------------------------

    def _start_probe(self, now: float) -> None:
        cfg, m = self.config, self._health.multiplier
        self._next_probe_at = now + cfg.probe_interval * m
        if (target := self._order.next()) is None:
            return
        seq = self._next_seq()
        self._emit(target, Ping(self.node, self._incarnation, seq, target, ()))
        if self._peers[target].state is not State.DEAD:  # a down node only gets its chance
            indirect_at = now + cfg.ack_timeout * m
            self._probe = _Probe(target, seq, indirect_at, self._next_probe_at)

    def _ask_helpers(self, probe: _Probe) -> None:
        alive = sorted(
            n for n, p in self._peers.items() if p.state is State.ALIVE and n != probe.target
        )
        helpers = self._rng.sample(alive, min(self.config.indirect_probes, len(alive)))
        probe.asked = True
        for h in helpers:
            self._emit(h, PingReq(self.node, self._incarnation, probe.seq, probe.target, ()))

    def _probe_failed(self, probe: _Probe, now: float) -> None:
        self._probe = None
        # Lifeguard: when nobody, not even a helper's nack, answered us, suspect ourselves
        # too. One nack is enough to show our side works (a helper behind a partition
        # stays silent; it must not slow us down).
        self._health.apply(0 if probe.nacks else 1)
        peer = self._peers.get(probe.target)
        if peer is not None and peer.state is not State.DEAD:
            self._apply(Suspect(probe.target, peer.incarnation, self.node), now, "no ack")

    # -- sending ------------------------------------------------------------------------

    def _reply(self, to: str, seq: int, *, ok: bool) -> None:
        kind = Ack if ok else Nack
        self._emit(to, kind(self.node, self._incarnation, seq, ()))

    def _emit(self, to: str, message: Message) -> None:
        """Queue ``message`` for ``to`` with piggybacked rumours (unless it has them)."""
        if not message.rumours:
            message = replace(message, rumours=self._rumours_for(to))
        self._out.sends.append(Send(to, message))

    def _rumours_for(self, to: str) -> tuple[Rumour, ...]:
        """The least-sent queued rumours, plus what we believe of ``to`` if not alive (so
        a node that is back refutes at once: Lifeguard's buddy system)."""
        limit = self.config.retransmits(len(self._peers) + 1)
        out = self._queue.take(self.config.max_piggyback, limit)
        belief = self._belief(to)
        if belief is not None and belief not in out:
            out.append(belief)
        return tuple(out)

    def _belief(self, node: str) -> Rumour | None:
        p = self._peers.get(node)
        if p is None or p.state is State.ALIVE or p.incarnation < 0:
            return None
        kind = Suspect if p.state is State.SUSPECT else Dead
        return kind(node, p.incarnation, self.node)

    def _gossip_targets(self) -> list[str]:
        """The peers believed up (alive or suspect), in name order."""
        return sorted(n for n, p in self._peers.items() if p.state is not State.DEAD)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _add_peers(self, names: Iterable[str]) -> None:
        for name in sorted(names):
            self._peers[name] = _Peer()
            self._order.add(name)
