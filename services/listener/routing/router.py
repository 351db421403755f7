"""The routing seam: where each copy of a publish goes, decided without I/O.

Theory of operation
-------------------
The router holds this listener's replica of the subscription table (``trie``), the
retained store, and the route targets online here (``targets``: session key -> target).
``route`` matches a publish and decides, for every session it reaches, one of:

- **deliver**: the session has a target here and this copy needs no queue (QoS 0, or a
  session that is not persistent): the copy goes to the target now;
- **append**: QoS >= 1 for a persistent session (online here or not), or any copy for a
  session with no target here that lives on this node: the copy goes to the session's
  queue first, and the target, if any, receives it once the append is durable
  (invariant I1);
- **forward**: a session with no target here that lives on another node (its
  subscriptions, replicated by gossip, name the node): the copy goes to that node, whose
  own router then decides deliver or append. A node never queues for another node's
  session.

Shared groups (``$share/g/f``) contribute one member each, picked by ``SharedPicker``
with "has a target here" as "online"; a group with no candidate is reported as such.
Members on nodes the cluster view shows ``down`` are not picked while another member
is left. A QoS >= 1 copy for a member carries a :class:`Shared` ticket: should that
member lose it (its session ends, its node dies) before acknowledging it, ``reroute``
picks another member for it, never one that already lost it.

Decisions go to a :class:`RouteSink` (the broker), one call per copy in match order, so
no per-publish list of decisions is built. A target is anything with the
:class:`RouteTarget` shape: today the local connections; forwarding to another listener
process or node is one more kind of target behind the same two calls.

Worked example: a QoS 1 publish on ``a/b`` matches a clean session C online here
(``a/#``, QoS 1) and a persistent session P offline (``a/b``, QoS 2): the sink gets
``deliver(C, out qos 1)`` and ``append(P, None, msg, qos 1, ...)``.

The subscriptions of a session that is online here are authoritative: replica updates
for it (echoes of our own writes, or stale ones) are ignored, so a subscribe/unsubscribe
race cannot resurrect a removed filter.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Final, Generic, Protocol, TypeVar

from services.common.session_key import SessionKey
from services.listener.mqtt.topics import parse_shared
from services.listener.processes import node_of
from services.listener.routing.model import SharedGroupMatch, SharedMember, SubOptions
from services.listener.routing.retained import RetainedStore
from services.listener.routing.shared import SharedPicker, SharedPolicy
from services.listener.routing.trie import SubscriptionTrie
from services.listener.session.messages import Message, OutboundMessage, Shared

_NO_IDS: Final[tuple[int, ...]] = ()
_NO_KEYS: Final[frozenset[SessionKey]] = frozenset()


class RouteTarget(Protocol):
    """A session reachable from here: what routing needs to know of it."""

    @property
    def persistent(self) -> bool:
        """Its QoS >= 1 copies go through its queue (they must survive a crash)."""
        ...

    def deliver(self, out: OutboundMessage) -> None: ...


T = TypeVar("T", bound=RouteTarget)
C = TypeVar("C", contravariant=True)
T_contra = TypeVar("T_contra", bound=RouteTarget, contravariant=True)


class RouteSink(Protocol[T_contra, C]):
    """Carries out the router's decisions; ``ctx`` is the caller's, passed through."""

    def deliver(self, target: T_contra, out: OutboundMessage, ctx: C) -> None: ...

    def append(
        self,
        key: SessionKey,
        target: T_contra | None,
        msg: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        ctx: C,
    ) -> None: ...

    def forward(
        self,
        node: str,
        key: SessionKey,
        msg: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        ctx: C,
        shared: Shared | None,
    ) -> None: ...

    def no_member(self, msg: Message, share_filter: str) -> None: ...


class Router(Generic[T]):
    """One listener's routing table and the decision of where each copy goes."""

    __slots__ = (
        "down",
        "held_back",
        "node",
        "picker",
        "retained",
        "targets",
        "trie",
        "upgrade_qos",
    )

    def __init__(
        self,
        node: str,
        policy: SharedPolicy,
        upgrade_qos: bool,
        rng: random.Random,
        local_node: str = "",
    ) -> None:
        """``node``: this listener's route (subscriptions that name another go there);
        ``local_node``: the node it runs on, whose processes shared groups count as
        local (default: ``node``)."""
        self.node = node
        self.trie = SubscriptionTrie()
        self.retained: RetainedStore[Message] = RetainedStore()
        self.picker = SharedPicker(policy, local_node or node, rng)
        self.upgrade_qos = upgrade_qos
        self.targets: dict[SessionKey, T] = {}
        # Replicas of sessions online here that disagree with this listener's own
        # subscriptions, applied when the session leaves (``released``).
        self.held_back: dict[SessionKey, Mapping[str, SubOptions] | None] = {}
        self.down: frozenset[str] = frozenset()  # nodes the cluster view shows down

    # -- publish ---------------------------------------------------------------------
    def route(self, msg: Message, sink: RouteSink[T, C], ctx: C) -> bool:
        """Hand every copy of ``msg`` to ``sink``; False when nothing matched."""
        result = self.trie.match(msg.mountpoint, msg.topic, (msg.mountpoint, msg.publisher))
        for m in result.normal:
            self._copy(m.sid, m.node, m.qos, m.retain_as_published, m.sub_ids, msg, sink, ctx)
        for group in result.shared:
            self._share(group, msg, sink, ctx, _NO_KEYS)
        return bool(result.normal or result.shared)

    def reroute(
        self,
        msg: Message,
        share: str,
        excluded: frozenset[SessionKey],
        sink: RouteSink[T, C],
        ctx: C,
    ) -> SessionKey | None:
        """Give a shared group's copy that a member lost to another member of the group
        ``share`` (its ``$share/g/f``), none of ``excluded``; returns that member, None
        when none is left (reported to the sink as ``no_member``)."""
        result = self.trie.match(msg.mountpoint, msg.topic, (msg.mountpoint, msg.publisher))
        for group in result.shared:
            if group.share_filter == share:
                return self._share(group, msg, sink, ctx, excluded)
        sink.no_member(msg, share)
        return None

    def _share(
        self,
        group: SharedGroupMatch,
        msg: Message,
        sink: RouteSink[T, C],
        ctx: C,
        excluded: frozenset[SessionKey],
    ) -> SessionKey | None:
        member: SharedMember | None = None
        down = self.down
        if down:
            away = {m.sid for m in group.members if node_of(m.opts.node) in down}
            if away:
                member = self.picker.pick(group, self._is_online, excluded | away)
        if member is None:
            member = self.picker.pick(group, self._is_online, excluded)
        if member is None:
            sink.no_member(msg, group.share_filter)
            return None
        opts = member.opts
        sub_ids = (opts.sub_id,) if opts.sub_id else _NO_IDS
        self._copy(
            member.sid,
            opts.node,
            opts.qos,
            opts.retain_as_published,
            sub_ids,
            msg,
            sink,
            ctx,
            group.share_filter,
            excluded,
        )
        return member.sid

    def _copy(
        self,
        key: SessionKey,
        node: str,
        sub_qos: int,
        rap: bool,
        sub_ids: tuple[int, ...],
        msg: Message,
        sink: RouteSink[T, C],
        ctx: C,
        share: str = "",
        excluded: frozenset[SessionKey] = _NO_KEYS,
    ) -> None:
        qos = sub_qos if self.upgrade_qos else min(msg.qos, sub_qos)
        retain = msg.retain and rap
        target = self.targets.get(key)
        shared = Shared(share, excluded) if share and qos else None
        if target is not None and (qos == 0 or not target.persistent):
            out = OutboundMessage(msg, qos, retain, sub_ids, None, False, shared)
            sink.deliver(target, out, ctx)
        elif target is None and node and node != self.node:
            sink.forward(node, key, msg, qos, retain, sub_ids, ctx, shared)
        else:
            sink.append(key, target, msg, qos, retain, sub_ids, ctx)

    def lives_here(self, key: SessionKey) -> bool:
        """Whether the replica places ``key``'s session on this node (its subscriptions
        name the node); a session with no subscriptions is placed nowhere."""
        opts = self.trie.options_of(key)
        return opts is not None and (not opts.node or opts.node == self.node)

    def _is_online(self, m: SharedMember) -> bool:
        """For shared picks: a target here, or a session on another node (its node knows
        whether it is connected, and queues the copy if not)."""
        node = m.opts.node
        return m.sid in self.targets or (bool(node) and node != self.node)

    # -- retained --------------------------------------------------------------------
    def retain(self, msg: Message) -> None:
        """Keep ``msg`` as its topic's retained message (an empty payload clears it)."""
        if msg.payload:
            self.retained.set(msg.mountpoint, msg.topic, msg)
        else:
            self.retained.clear(msg.mountpoint, msg.topic)

    def retained_for(
        self, key: SessionKey, filters: Iterable[tuple[str, int]], sub_ids: tuple[int, ...]
    ) -> list[OutboundMessage]:
        """The retained messages one SUBSCRIBE's ``(filter, qos)`` pairs receive (retain
        flag set): each once, at the highest QoS of its matching filters, as one copy
        stands for every matching subscription [MQTT-3.3.4-2]; none for shared filters
        [MQTT-3.8.4 v5]."""
        plain = [(f, q) for f, q in filters if parse_shared(f)[0] is None]
        out = []
        for _topic, msg, qos in self.retained.match_many(key[0], plain):
            q = qos if self.upgrade_qos else min(msg.qos, qos)
            out.append(OutboundMessage(msg, q, True, sub_ids))
        return out

    # -- subscriptions ---------------------------------------------------------------
    def subscribe(self, key: SessionKey, topic_filter: str, opts: SubOptions) -> bool:
        """Add or replace a subscription; True when it is new (retain handling 1)."""
        return self.trie.add(key, topic_filter, opts)

    def unsubscribe(self, key: SessionKey, topic_filter: str) -> bool:
        return self.trie.remove(key, topic_filter)

    def forget(self, key: SessionKey) -> None:
        """Drop every subscription of ``key`` (its session ended or started clean)."""
        self.trie.remove_all(key)

    def replicate(self, key: SessionKey, subs: Mapping[str, SubOptions] | None) -> bool:
        """Apply the replica's subscriptions of ``key`` (None: it has none), unless the
        session is online here and so authoritative for them.

        Online here, a replica that differs is held back until the session leaves this
        listener (``released``): it may be the record of the node the session moved
        to, which must then route. True when it was written by someone else (it names
        another route, or deletes what is here): a session registered on both sides of
        a partition, healed. The caller writes this listener's own record again, so the
        live session's subscriptions are the last write, whoever wrote before."""
        if key in self.targets:
            own = self.trie.subscriptions_of(key)
            if subs == own or (subs is None and not own):
                self.held_back.pop(key, None)
                return False
            self.held_back[key] = subs
            if subs is None:
                return True
            node = self.node
            return any(o.node != node for o in subs.values())
        self.trie.remove_all(key)
        for topic_filter, opts in (subs or {}).items():
            self.trie.add(key, topic_filter, opts)
        return False

    def released(self, key: SessionKey) -> None:
        """``key``'s session left this listener: a replica held back meanwhile applies."""
        if key in self.held_back:
            self.replicate(key, self.held_back.pop(key))

    def move(self, key: SessionKey, node: str) -> dict[str, SubOptions]:
        """Point ``key``'s subscriptions at ``node``, where its session now lives (a
        handover between nodes), ahead of the replica; returns them as now held."""
        moved = {
            f: SubOptions(
                o.qos,
                o.no_local,
                o.retain_as_published,
                o.retain_handling,
                o.sub_id,
                node,
                o.persistent,
            )
            for f, o in self.trie.subscriptions_of(key).items()
        }
        if moved:
            self.trie.remove_all(key)
            for topic_filter, opts in moved.items():
                self.trie.add(key, topic_filter, opts)
        return moved

    def keep_only(
        self, subscribers: Iterable[SessionKey], retained: Iterable[tuple[str, str]]
    ) -> None:
        """After a replica resync: forget offline sessions' subscriptions and retained
        messages that the replica no longer holds."""
        live, kept = set(subscribers), set(retained)
        for key in {key for key, _f, _o in self.trie.items()}:
            if key not in self.targets and key not in live:
                self.trie.remove_all(key)
        for mountpoint, topic, _msg in list(self.retained):
            if (mountpoint, topic) not in kept:
                self.retained.clear(mountpoint, topic)
