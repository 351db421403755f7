"""The listener's broker: the I/O adapter around the router.

Theory of operation
-------------------
* The router (``routing.router``) holds the routing table and decides where each copy
  of a publish goes; the broker carries the decisions out. ``deliver``: hand the copy to
  the connection. ``append``: write it to the session's msgstore queue, and hand it to
  the connection (if online here) once durable, carrying its ``seq``. A QoS >= 1
  publisher's PUBACK/PUBREC waits for every such append (``publish_ack``); a failed
  append answers 0x80 (v5) or closes a v3/v4 publisher without an ack so it resends.
* A subscriber whose backlog reaches ``flow.high`` holds its QoS >= 1 publisher back
  (``flow``).
* SUBSCRIBE and UNSUBSCRIBE change the routing table when they are read, so a publish
  this listener handles afterwards sees them; the gossip write follows, then the
  SUBACK/UNSUBACK, then (SUBSCRIBE) the retained messages.
* The routing table and retained store are replicas of gossip's ``subs`` and
  ``retain`` prefixes, fed by the Watch stream (``apply_meta``).
* Registration, takeover, resume and session end are ``lifecycle``'s; wills are
  ``wills``'.
* On the minority side of a partition (``set_view``), PUBLISH, SUBSCRIBE and
  UNSUBSCRIBE are refused unless their ``allow_*_during_netsplit`` is on (I3): 5.0
  clients hear 0x83 on PUBACK/PUBREC, SUBACK and UNSUBACK; 3.1/3.1.1 hear SUBACK 0x80,
  and a QoS >= 1 PUBLISH or an UNSUBSCRIBE, which they cannot refuse, closes the
  connection unacknowledged (the client sends it again once it reconnects).
* ``forward``: a copy for a session on another node goes to that node's listener
  (``forward.sender``); a QoS >= 1 publisher's PUBACK waits for that node to have it.
  Copies other nodes forward here arrive at ``accept_forwarded`` and are delivered or
  queued by the same rule as local ones, never forwarded again.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, cast

from mypy_extensions import mypyc_attr

from services.common import log
from services.common.cluster_view import ClusterView
from services.common.grpcutil import rpc_failed_as
from services.common.metrics import Child, MetricsRegistry
from services.common.session_key import SessionKey
from services.listener import convert
from services.listener.config import ListenerSettings
from services.listener.flow import FlowLimits, FlowParty, flow_limits, hold_back
from services.listener.forward.receiver import StreamParty
from services.listener.forward.sender import Copy, Forwarder
from services.listener.forward.wire import ForwardedIn, read_forwarded
from services.listener.lifecycle import Lifecycle
from services.listener.meta_writer import MetaWriter, log_put_failure
from services.listener.metrics import RoutingMetrics
from services.listener.mqtt.types import ReasonCode, Will
from services.listener.ports import ClientPort
from services.listener.publish_ack import Completion, Countdown, Queued
from services.listener.routing.model import SubOptions
from services.listener.routing.router import Router
from services.listener.routing.shared import SharedPolicy
from services.listener.session.actions import Ended, Register, SubscribeRequest, UnsubscribeRequest
from services.listener.session.messages import Message, OutboundMessage, Shared
from services.listener.store_client import StoreClient
from services.listener.wills import Wills
from services.pb import common_pb2, forward_pb2, gossip_pb2, gossip_pb2_grpc, registry_pb2_grpc

_UNSPECIFIED: Final = ReasonCode.UNSPECIFIED_ERROR
_SPLIT: Final = ReasonCode.IMPLEMENTATION_SPECIFIC_ERROR  # valid, but not accepted now
REASSERT_DELAY: Final = 0.5  # s: a session's subscriptions rewritten at most this often
_NO_KEYS: Final[frozenset[SessionKey]] = frozenset()
# Why a member drops a shared group's copy that another member may still take.
_MEMBER_LOST: Final = frozenset({"not_connected", "session_ended", "queue_full"})


@mypyc_attr(allow_interpreted_subclasses=True)  # tests stand in for it (test_conn_memory)
class Broker:
    def __init__(
        self,
        settings: ListenerSettings,
        listener_id: str,
        store: StoreClient,
        registry: registry_pb2_grpc.RegistryStub,
        gossip: gossip_pb2_grpc.GossipStub,
        metrics: MetricsRegistry,
        route: str = "",
    ) -> None:
        self.node = settings.nodename
        # This process as a routing target (``processes.route_name``): the node, or
        # "node/K" for a node's listener process K > 0.
        self.own_route = route or self.node
        # Told of each message queued for an offline session (the on_offline_message
        # webhook): (mountpoint, client_id, qos, topic, payload, retain).
        self.offline_hook: Callable[[str, str, int, str, bytes, bool], None] | None = None
        self.listener_id = listener_id
        self.store = store
        self.registry = registry
        self.gossip = gossip
        self.flow: FlowLimits = flow_limits(settings.max_online_messages)
        # A forwarding stream carries many sessions' copies, so holding it for one of them
        # holds them all: only a subscriber halfway to its online limit holds it back.
        online = settings.max_online_messages
        self.stream_high = max(online // 2, self.flow.high) if online > 0 else 1 << 30
        policy = SharedPolicy(settings.shared_subscription_policy)
        self.router: Router[ClientPort] = Router(
            self.own_route, policy, settings.upgrade_outgoing_qos, random.Random(), self.node
        )
        self.sessions = self.router.targets  # the connections online here, by session key
        self.meta = MetaWriter(gossip, self.own_route)
        self._last_id: int = 0  # a native int: next(count) plus f"{:x}" cost more per publish
        # unique per process: sibling processes start within the same millisecond
        process = self.own_route[len(self.node) :].replace("/", ".")
        self._id_prefix = (
            f"{self.node.split('@')[0]}{process}-{int(time.time() * 1000) % 10**10:x}-"
        )
        # bound once: every session holds it, and each attribute access would make a new one
        self.msg_id_source: Callable[[], str] = self.next_msg_id
        self.wills = Wills(self._publish_will, self.msg_id_source)
        self.lifecycle = Lifecycle(
            self.node,
            self.own_route,
            listener_id,
            max(settings.max_offline_messages, 0),
            registry,
            store,
            self.router,
            self.wills,
            self.meta,
            self.spawn,
        )
        self.registry_client = self.lifecycle.registry_client
        self._tasks: set[asyncio.Task[Any]] = set()
        self._msg_field: tuple[Message, bytes] | None = None  # the last publish, encoded
        self._msg_bytes: tuple[Message, bytes] | None = None  # … as forwarded copies carry it
        self.accepting = False
        router = self.router
        self.metrics = RoutingMetrics(
            metrics,
            lambda: len(router.targets),
            lambda: len(router.trie),
            lambda: len(router.retained),
        )
        self.delivered_qos: list[Child] = self.metrics.delivered
        self.settings = settings
        # what the minority side of a partition refuses now (set_view)
        self._publisher: ClientPort | None = None  # whose publish is being routed
        self._reasserting: set[SessionKey] = set()  # subscriptions to write again
        # Sessions whose subscriptions moved off another node in the gossip event being
        # applied, by that node: their copies still waiting for it follow them
        # (``follow_moves``).
        self._moved: dict[str, dict[SessionKey, str]] = {}
        self._rehomed_party = StreamParty()  # holds nobody back: its copies wait already
        self.refuse_publish = False
        self.refuse_subscribe = False
        self.refuse_unsubscribe = False
        self.split_reason = ""
        self.forwarder = Forwarder(
            self.node,
            self.own_route,
            listener_id,
            settings.cookie,
            settings.forward_queue,
            settings.forward_timeout,
            self._forward_dropped,
            self._forward_lost,
        )

    # -- helpers -------------------------------------------------------------------
    def next_msg_id(self) -> str:
        self._last_id += 1
        return self._id_prefix + str(self._last_id)

    def spawn(self, coro: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            rpc_failed_as("listener", task.get_name(), type(exc).__name__, str(exc), "error")

    # -- sessions (lifecycle) ----------------------------------------------------------
    def apply_settings(self, config: Mapping[str, Any]) -> None:
        """The run-time keys this broker reads after start-up, as ``ternmq-admin set``
        left them (``services.common.live_settings``); the session limits are the
        listeners' (``server``)."""
        online = int(config["max_online_messages"])
        self.flow = flow_limits(online)
        self.stream_high = max(online // 2, self.flow.high) if online > 0 else 1 << 30
        self.lifecycle.max_offline = max(int(config["max_offline_messages"]), 0)
        self.router.picker.set_policy(SharedPolicy(str(config["shared_subscription_policy"])))

    def register(self, client: ClientPort, req: Register) -> None:
        self.lifecycle.register(client, req)

    def ended(self, client: ClientPort, action: Ended) -> None:
        self.lifecycle.ended(client, action)
        # after ``lifecycle.ended``: the session's subscriptions are gone, so no group
        # picks it again
        for out in action.unacked_shared:
            self.shared_lost(client.sid, out, "session_ended")

    def takeover(self, key: common_pb2.SessionKey, old_epoch: int) -> None:
        self.lifecycle.takeover(key, old_epoch)

    def moved(self, key: common_pb2.SessionKey, node: str) -> None:
        sk = (key.mountpoint, key.client_id)
        before = self.router.trie.options_of(sk)
        self.lifecycle.moved(key, node)
        self._note_move(sk, before)
        self.follow_moves()

    # -- netsplits ------------------------------------------------------------------
    def set_view(self, view: ClusterView) -> None:
        """The cluster view changed: what this node refuses follows it."""
        split = not view.serving
        settings = self.settings
        down = frozenset(view.members - view.up)
        self.router.down = down
        self.refuse_publish = split and not settings.allow_publish_during_netsplit
        self.refuse_subscribe = split and not settings.allow_subscribe_during_netsplit
        self.refuse_unsubscribe = split and not settings.allow_unsubscribe_during_netsplit
        self.split_reason = view.refusal() if split else ""
        self.forwarder.set_down(down)

    def _refuse_publish(self, msg: Message, client: ClientPort, token: int | None) -> None:
        self._drop(msg.msg_id, msg.publisher, msg.topic, msg.qos, "netsplit")
        if token is not None:
            client.routed(token, _SPLIT, self.split_reason)
            self._refused(msg, _SPLIT, "netsplit")

    # -- publish ---------------------------------------------------------------------
    def route(
        self, msg: Message, client: ClientPort | None, token: int | None, internal: bool = False
    ) -> None:
        """Deliver ``msg`` to every matching session; answer ``client`` when durable.
        ``internal``: the broker's own message ($SYS), not counted as published."""
        if client is not None and self.refuse_publish:
            self._refuse_publish(msg, client, token)
            return
        if not internal:
            self.metrics.published[msg.qos].inc()
        countdown = (
            Countdown(client, token, self, msg)
            if token is not None and client is not None
            else None
        )
        if msg.retain:
            self._update_retained(msg, countdown)
        self._publisher = client
        matched = self.router.route(msg, self, countdown)
        self._publisher = None
        if countdown is not None:
            countdown.arm(ReasonCode.SUCCESS if matched else ReasonCode.NO_MATCHING_SUBSCRIBERS)

    def publish_own(self, msg: Message) -> None:
        """Route one of the broker's own messages ($SYS): not counted as published."""
        self.route(msg, None, None, internal=True)

    def deliver(self, target: ClientPort, out: OutboundMessage, ctx: Countdown | None) -> None:
        """RouteSink: a copy that needs no queue."""
        if out.qos and ctx is not None and target.backlog() >= self.flow.high:
            target.hold_back(ctx.conn)
        target.deliver(out)

    def append(
        self,
        key: SessionKey,
        target: ClientPort | None,
        msg: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        ctx: Countdown | None,
    ) -> None:
        """RouteSink: a copy that goes through the session's queue first."""
        if target is not None:
            if qos and ctx is not None and target.backlog() >= self.flow.high:
                target.hold_back(ctx.conn)
            target.appending += 1  # counts in its backlog until the store answers
        encoded = self._msg_field
        if encoded is None or encoded[0] is not msg:  # encoded once per publish
            encoded = self._msg_field = (msg, convert.message_field(msg, self.node))
        queued = Queued(self, key, target, msg, qos, retain, sub_ids, ctx)
        if ctx is not None:
            ctx.left += 1
        self.store.append(
            key[0], key[1], 0, encoded[1], qos, retain, sub_ids, queued.done, target is None
        )
        self.metrics.queued.inc()
        if target is None and self.offline_hook is not None:
            self.offline_hook(key[0], key[1], qos, msg.topic, msg.payload, retain)

    def forward(
        self,
        node: str,
        key: SessionKey,
        msg: Message,
        qos: int,
        retain: bool,
        sub_ids: tuple[int, ...],
        ctx: Countdown | None,
        shared: Shared | None,
    ) -> None:
        """RouteSink: a copy for a session that lives on another node goes to that node.
        A QoS >= 1 publisher waits for it when the session is persistent (I1: the copy
        must be on that node's disk); a copy for a clean session there is sent as a
        local delivery to one here is, without holding the publisher. A shared group's
        copy for such a session is marked (``share``): it waits in the link until the
        member has acknowledged it, and goes to another member if it does not."""
        encoded = self._msg_bytes
        if encoded is None or encoded[0] is not msg:  # encoded once per publish
            encoded = self._msg_bytes = (msg, convert.message_bytes(msg, self.node))
        opts = self.router.trie.options_of(key)
        durable = opts is not None and opts.persistent
        share = shared.share if shared is not None and not durable else ""
        waiter = ctx if qos and ctx is not None and durable else None
        if waiter is not None:
            waiter.left += 1
        self.metrics.forwarded.inc()
        body = convert.forwarded_body(key[0], key[1], qos, retain, sub_ids, encoded[1], share)
        copy = Copy(key[1], qos, body, waiter, msg.msg_id, msg.topic, key[0], share)
        if shared is not None:
            copy.excluded = shared.excluded
        self.forwarder.forward(node, copy, cast(FlowParty | None, self._publisher))

    def _forward_dropped(self, node: str, copy: Copy, reason: str) -> None:
        self._drop(copy.msg_id, copy.client_id, copy.topic, copy.qos, reason)

    # -- shared groups: a copy a member lost goes to another -------------------------
    def shared_acked(self, out: OutboundMessage) -> None:
        """The member acknowledged a shared group's copy: the node that forwarded it, if
        any, hears so (and forgets it)."""
        shared = out.shared
        if shared is not None and shared.waiter is not None:
            waiter, shared.waiter = shared.waiter, None
            waiter.step(None)

    def shared_lost(self, sid: SessionKey | None, out: OutboundMessage, reason: str) -> None:
        """A member here lost a shared group's copy unacknowledged (its session ended, or
        it could not take the copy): another member gets it. A copy another node
        forwarded is reported failed there instead: that node picked the member, and
        picks again."""
        shared = out.shared
        if shared is None:
            return
        waiter, shared.waiter = shared.waiter, None
        if shared.released or shared.remote:
            # released: a QoS 2 copy the member has (PUBREC), delivered
            if waiter is not None:
                waiter.step(None if shared.released else f"shared member gone: {reason}")
            return
        excluded = shared.excluded if sid is None else shared.excluded | {sid}
        self._reshare(out.message, shared.share, excluded, sid, reason)

    def _forward_lost(self, node: str, copy: Copy, reason: str) -> None:
        """A shared group's copy for a member on ``node`` did not reach it, or may have
        died there with the node: another member gets it."""
        msg = read_forwarded(copy.body, 0, len(copy.body)).message
        sid = (copy.mountpoint, copy.client_id)
        self._reshare(msg, copy.share, copy.excluded | {sid}, sid, reason)

    def _reshare(
        self,
        msg: Message,
        share: str,
        excluded: frozenset[SessionKey],
        lost_by: SessionKey | None,
        reason: str,
    ) -> None:
        # Its publisher was answered when it was routed (a shared member's copy is not
        # durable): nobody waits for the new copy, and nobody is held back for it.
        publisher, self._publisher = self._publisher, None
        to = self.router.reroute(msg, share, excluded, self, None)
        self._publisher = publisher
        self.metrics.shared_redelivered.labels(reason).inc()
        log.emit(
            "shared.redelivered",
            "info",
            msg_id=msg.msg_id,
            share=share,
            client_id=lost_by[1] if lost_by is not None else "",
            to=to[1] if to is not None else "",
            reason=reason,
        )

    def accept_forwarded(
        self,
        item: ForwardedIn,
        done: Callable[[str | None], None],
        settle: Callable[[str | None], None] | None,
        stream: FlowParty,
    ) -> None:
        """A copy another node forwarded: delivered or queued here by the rule of
        ``Router`` (never forwarded on: a session that moved again is the sender's to
        find, through gossip, and its copy is answered as failed). ``done`` hears when it
        is delivered or durable; ``settle``, for a shared group's copy, when its member
        acknowledged or lost it; a congested subscriber holds the ``stream`` back as it
        would a local publisher."""
        key = (item.mountpoint, item.client_id)
        msg = item.message
        qos, retain, sub_ids = item.qos, item.retain, item.sub_ids
        target = self.sessions.get(key)
        if qos and target is not None and target.backlog() >= self.stream_high:
            hold_back(cast(FlowParty, target), stream, asyncio.get_running_loop())
        share: str = item.share
        if target is not None and (qos == 0 or not target.persistent):
            shared: Shared | None = None
            if share and qos:  # settled when the member acknowledges it (``shared_acked``)
                waiter = Completion(settle) if settle is not None else None
                shared = Shared(share, _NO_KEYS, waiter, settle is not None)
            target.deliver(OutboundMessage(msg, qos, retain, sub_ids, None, False, shared))
            done(None)
            return
        if share and qos and target is None and not self.router.lives_here(key):
            done("shared member gone")  # the sender picks another member
            return
        if target is None and not self.router.lives_here(key):
            # Moved on (a handover the sender had not heard of through gossip yet): it is
            # the sender's to route, and a publisher waiting on this copy must not be
            # acknowledged for a message no queue took (I1). It is answered as failed,
            # so its publisher is refused and sends again.
            self.dropped(key[1], OutboundMessage(msg, qos, retain, sub_ids), "session_moved")
            done("session_moved" if qos else None)
            return
        if target is not None:
            target.appending += 1
        queued = Queued(self, key, target, msg, qos, retain, sub_ids, Completion(done))
        encoded = convert.message_field(msg, self.node)
        self.store.append(
            key[0], key[1], 0, encoded, qos, retain, sub_ids, queued.done, target is None
        )
        self.metrics.queued.inc()
        if target is None and self.offline_hook is not None:
            self.offline_hook(key[0], key[1], qos, msg.topic, msg.payload, retain)

    def no_member(self, msg: Message, share_filter: str) -> None:
        """RouteSink: a shared group with no member to take the message."""
        self.metrics.dropped.labels("no_shared_member").inc()
        log.emit(
            "message.dropped",
            "info",
            msg_id=msg.msg_id,
            client_id=share_filter,
            topic=msg.topic,
            qos=msg.qos,
            reason="no_shared_member",
        )

    def persistent(self, key: SessionKey) -> bool:
        """Outcomes: whether ``key``'s subscriptions say its session is persistent."""
        opts = self.router.trie.options_of(key)
        return opts is not None and opts.persistent

    def refused(self, msg: Message, reason: str) -> None:
        """Outcomes: a copy of ``msg`` failed, and its publisher gets 0x80."""
        self.metrics.store_errors.inc()
        log.emit("store.error", "error", op="append", reason=reason)
        self._refused(msg, _UNSPECIFIED, reason)

    def _refused(self, msg: Message, code: int, reason: str) -> None:
        """The publisher learns ``msg`` was not taken: the audit must not expect it."""
        if msg.qos and log.message_events_enabled():
            log.emit(
                "message.refused",
                "info",
                msg_id=msg.msg_id,
                client_id=msg.publisher,
                topic=msg.topic,
                qos=msg.qos,
                reason_code=code,
                reason=reason,
            )

    def dropped(self, client_id: str, out: OutboundMessage, reason: str) -> None:
        msg = out.message
        self._drop(msg.msg_id, client_id, msg.topic, out.qos, reason)
        shared = out.shared
        if shared is None:
            return
        if reason in _MEMBER_LOST:  # the member could not take it: another one may
            self.shared_lost((msg.mountpoint, client_id) if client_id else None, out, reason)
        elif shared.waiter is not None:
            # dropped on purpose (expired, too large): answered as the same drop for
            # any other subscriber would be
            waiter, shared.waiter = shared.waiter, None
            waiter.step(None)

    def _drop(self, msg_id: str, client_id: str, topic: str, qos: int, reason: str) -> None:
        """Count a copy dropped on purpose; log it if it was QoS >= 1 or message events
        are on (a QoS 0 drop is routine under load)."""
        self.metrics.dropped.labels(reason).inc()
        if qos or log.message_events_enabled():
            log.emit(
                "message.dropped",
                "info",
                msg_id=msg_id,
                client_id=client_id,
                topic=topic,
                qos=qos,
                reason=reason,
            )

    def _update_retained(self, msg: Message, countdown: Countdown | None) -> None:
        """Keep and replicate the retained message; a QoS >= 1 publisher's answer waits
        for the replication."""
        self.router.retain(msg)
        fut = self.meta.put_retained(msg)
        if countdown is not None and msg.qos:
            countdown.left += 1
            fut.add_done_callback(countdown.future_done)
        else:
            fut.add_done_callback(log_put_failure)

    # -- subscriptions ---------------------------------------------------------------
    def subscribe(self, client: ClientPort, req: SubscribeRequest) -> None:
        """Routing sees the new subscriptions at once; SUBACK after the gossip write."""
        key = client.sid
        assert key is not None
        if self.refuse_subscribe:
            client.subscribed(req.packet_id, [_SPLIT] * len(req.subscriptions))
            return
        fresh = [
            self.router.subscribe(
                key,
                sub.topic_filter,
                SubOptions(
                    sub.qos,
                    sub.no_local,
                    sub.retain_as_published,
                    sub.retain_handling,
                    req.sub_id,
                    self.own_route,
                    client.persistent,
                ),
            )
            for sub in req.subscriptions
        ]
        written = self.meta.put_subscriptions(key, self.router.trie.subscriptions_of(key))
        self.spawn(self._subscribed(client, key, req, fresh, written), "subscribe")

    async def _subscribed(
        self,
        client: ClientPort,
        key: SessionKey,
        req: SubscribeRequest,
        fresh: list[bool],
        written: Awaitable[bool],
    ) -> None:
        codes: list[int] = [sub.qos for sub in req.subscriptions]
        if not await written:
            codes = [_UNSPECIFIED] * len(codes)
        client.subscribed(req.packet_id, codes)
        if codes and codes[0] >= 0x80:
            return
        sub_ids = (req.sub_id,) if req.sub_id else ()
        wanted = [
            (sub.topic_filter, sub.qos)
            for sub, is_new in zip(req.subscriptions, fresh, strict=True)
            if sub.retain_handling == 0 or (sub.retain_handling == 1 and is_new)
        ]
        for out in self.router.retained_for(key, wanted, sub_ids):
            client.deliver(out)

    def unsubscribe(self, client: ClientPort, req: UnsubscribeRequest) -> None:
        """Routing stops at once; UNSUBACK after the gossip write."""
        key = client.sid
        assert key is not None
        if self.refuse_unsubscribe:
            client.unsubscribed(req.packet_id, [_SPLIT] * len(req.topic_filters))
            return
        codes: list[int] = [
            ReasonCode.SUCCESS
            if self.router.unsubscribe(key, f)
            else ReasonCode.NO_SUBSCRIPTION_EXISTED
            for f in req.topic_filters
        ]
        written = self.meta.put_subscriptions(key, self.router.trie.subscriptions_of(key))
        self.spawn(self._unsubscribed(client, req.packet_id, codes, written), "unsubscribe")

    async def _unsubscribed(
        self, client: ClientPort, packet_id: int, codes: list[int], written: Awaitable[bool]
    ) -> None:
        if not await written:
            codes = [_UNSPECIFIED] * len(codes)
        client.unsubscribed(packet_id, codes)

    # -- gossip replica --------------------------------------------------------------
    def apply_meta(self, update: gossip_pb2.MetaUpdate) -> None:
        mountpoint, name = convert.split_meta_key(update.key)
        if update.prefix == "subs":
            key = (mountpoint, name)
            subs = None if update.deleted else convert.subs_from_pb(update.value)
            before = self.router.trie.options_of(key)
            if self.router.replicate(key, subs):
                self._reassert(key)
            self._note_move(key, before)
        elif update.prefix == "listeners":
            record = None if update.deleted else forward_pb2.ListenerRecord.FromString(update.value)
            self.forwarder.set_peer(name, record.address if record is not None else None)
        elif update.prefix == "retain":
            if update.deleted:
                self.router.retained.clear(mountpoint, name)
            else:
                pb = common_pb2.MqttMessage.FromString(update.value)
                self.router.retained.set(mountpoint, name, convert.message_from_pb(pb))

    def _note_move(self, key: SessionKey, before: SubOptions | None) -> None:
        """``key``'s subscriptions named another node (``before``) and now name a
        different one: copies for it may still wait for the old one."""
        after = self.router.trie.options_of(key)
        if (
            before is not None
            and after is not None
            and before.node not in (after.node, "", self.router.node)
        ):
            self._moved.setdefault(before.node, {})[key] = after.node

    def follow_moves(self) -> None:
        """After a gossip event or the registry's ``moved``: the copies that wait for a
        node that sessions just moved off (a failover while it is down), and that no
        stream carried, go where those sessions are now, in their order, before any
        later publish is routed (nothing else runs between the change and this call).
        Left waiting, they expired after ``cluster.forward_timeout`` and their
        publishers got 0x80 (S11)."""
        if not self._moved:
            return
        moved, self._moved = self._moved, {}
        for old, keys in moved.items():
            copies = self.forwarder.withdraw(old, keys)
            if not copies:
                continue
            for copy in copies:
                new = keys[(copy.mountpoint, copy.client_id)]
                if new and new != self.router.node:
                    self.forwarder.forward(new, copy)
                else:
                    item = read_forwarded(copy.body, 0, len(copy.body))
                    self.accept_forwarded(item, _waiter_done(copy), None, self._rehomed_party)
            log.emit("forward.rerouted", "info", from_node=old, copies=len(copies))

    def _reassert(self, key: SessionKey) -> None:
        """Another node wrote the subscriptions of a session online here (both sides of a
        healed partition registered it): write ours again, after :data:`REASSERT_DELAY`
        (at most that often per session), while the session is still here. The other
        side's session is ended by its registry, and from then on ours is the last write."""
        if key in self._reasserting:
            return
        self._reasserting.add(key)
        asyncio.get_running_loop().call_later(REASSERT_DELAY, self._reassert_now, key)

    def _reassert_now(self, key: SessionKey) -> None:
        self._reasserting.discard(key)
        if key in self.sessions:
            subs = self.router.trie.subscriptions_of(key)
            self.spawn(self.meta.put_subscriptions(key, subs), "reassert")

    # -- wills -----------------------------------------------------------------------
    def publish_will(self, client: ClientPort, will: Will, delay: int) -> None:
        if client.sid is not None:
            self.wills.publish(client.sid, will, delay)

    def _publish_will(self, msg: Message) -> None:
        self.route(msg, None, None)

    # -- shutdown --------------------------------------------------------------------
    def drop_all(self, reason: str) -> None:
        for conn in list(self.sessions.values()):
            conn.fail(_UNSPECIFIED, reason)

    async def shutdown(self) -> None:
        for conn in list(self.sessions.values()):
            conn.shutdown()
        self.wills.cancel_all()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)


def _waiter_done(copy: Copy) -> Callable[[str | None], None]:
    """A rerouted copy's outcome, told to whoever waited for it on the old link."""
    waiter = copy.waiter

    def done(failure: str | None) -> None:
        if waiter is not None:
            waiter.step(failure)

    return done
