"""The listener's node-local broker: who is online here, where a publish goes, and the
round trips a session asks for (registry, gossip, msgstore).

Theory of operation
-------------------
* ``sessions`` maps a session key ``(mountpoint, client_id)`` to its live
  :class:`~services.listener.connection.Connection` on this process.
* The subscription trie and the retained store are local replicas of gossip's ``subs``
  and ``retain`` prefixes, fed by the Watch stream (``meta.py``). A session online here
  is authoritative for its own subscriptions: gossip echoes for it are ignored, so a
  subscribe/unsubscribe race cannot resurrect a removed filter.
* A publish is matched locally. Each target gets an :class:`OutboundMessage`:
  - online, non-persistent session, or QoS 0: delivered directly;
  - persistent session (online or not) and QoS >= 1, or any offline session: appended to
    its msgstore queue first; an online session receives it when the append is durable,
    carrying its ``seq`` (stable packet id, resumable after a crash).
  The publisher's PUBACK/PUBREC waits for every such append (invariant I1). A failed
  append answers 0x80 (v5) or closes a v3/v4 publisher without an ack so it resends.
* A persistent session that reconnects is registered, its queue is read from
  ``acked + 1`` and replayed before live traffic; live queued deliveries that arrive
  meanwhile are buffered by the connection and deduplicated by ``seq``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import grpc
from mypy_extensions import mypyc_attr

from services.common import log
from services.common.grpcutil import rpc_failed, rpc_failed_as
from services.common.metrics import Registry
from services.common.session_key import SessionKey as SubscriberId
from services.listener import convert
from services.listener.durable import Countdown, Queued
from services.listener.mqtt.types import ReasonCode, Will
from services.listener.registry_client import RegistryClient, RegistryUnavailable
from services.listener.routing.model import SubOptions
from services.listener.routing.retained import RetainedStore
from services.listener.routing.shared import SharedPicker, SharedPolicy
from services.listener.routing.trie import SubscriptionTrie
from services.listener.session.actions import (
    Ended,
    Register,
    SubscribeRequest,
    UnsubscribeRequest,
)
from services.listener.session.handle_publish import forwarded
from services.listener.session.messages import Message, OutboundMessage
from services.listener.store_client import StoreClient
from services.pb import (
    common_pb2,
    gossip_pb2,
    gossip_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)

if TYPE_CHECKING:
    from services.listener.connection import Connection

_NEVER: Final = 0xFFFFFFFF
# Flow control holds a publisher back once a subscriber has this many messages unacknowledged
# (at most half its online queue limit). Measured in bench (c): 100 beats 500 (+12% msg/s,
# p50 latency 73 vs 157 ms: shorter queues) and 50 (more hold/release cycles).
FLOW_HIGH_MAX: Final = 100


@mypyc_attr(allow_interpreted_subclasses=True)  # tests stand in for it (test_conn_memory)
class Broker:
    def __init__(
        self,
        config: Any,
        listener_id: str,
        store: StoreClient,
        registry: registry_pb2_grpc.RegistryStub,
        gossip: gossip_pb2_grpc.GossipStub,
        metrics: Registry,
    ) -> None:
        self.config = config
        self.node: str = config["nodename"]
        self.listener_id = listener_id
        self.store = store
        self.registry = registry
        self.registry_client = RegistryClient(registry, self._late_register)
        self.gossip = gossip
        # sessions that wrote subscriptions to gossip since they last started fresh: the
        # registry drops a clean session's subscriptions at its end only if it has some
        self._subscribed: set[SubscriberId] = set()
        self._subs_writes: dict[SubscriberId, list[asyncio.Future[None]]] = {}
        self._max_offline: int = max(config["max_offline_messages"], 0)
        # flow control thresholds (Connection.hold_back): well below the online queue limit
        online = config["max_online_messages"]
        self.flow_high: int = (
            min(max(online // 2, 1), FLOW_HIGH_MAX) if online > 0 else FLOW_HIGH_MAX
        )
        self.flow_low: int = self.flow_high // 2
        self.sessions: dict[SubscriberId, Connection] = {}
        self.trie = SubscriptionTrie()
        self.retained: RetainedStore[Message] = RetainedStore()
        self.picker = SharedPicker(
            SharedPolicy(config["shared_subscription_policy"]), self.node, random.Random()
        )
        self.upgrade_qos: bool = config["upgrade_outgoing_qos"]
        self._wills: dict[SubscriberId, asyncio.TimerHandle] = {}
        self._last_id: int = 0  # a native int: next(count) plus f"{:x}" cost ~1 us a publish
        self._id_prefix = f"{self.node.split('@')[0]}-{int(time.time() * 1000) % 10**10:x}-"
        # bound once: every session holds it, and each attribute access would make a new one
        self.msg_id_source: Callable[[], str] = self.next_msg_id
        self._tasks: set[asyncio.Task[Any]] = set()
        self._msg_field: tuple[Message, bytes] | None = None  # the last publish, encoded
        self.accepting = False
        m = metrics
        self.m_published = m.counter("messages_published_total", "PUBLISHes accepted", ["qos"])
        self._published = [self.m_published.labels(str(qos)) for qos in (0, 1, 2)]
        self.m_delivered = m.counter("messages_delivered_total", "PUBLISHes sent", ["qos"])
        self.delivered_qos = [self.m_delivered.labels(str(qos)) for qos in (0, 1, 2)]
        self.m_dropped = m.counter("messages_dropped_total", "Deliveries dropped", ["reason"])
        self.m_queued = m.counter("messages_queued_total", "Appends to session queues")
        self._queued = self.m_queued.labels()
        self.m_store_errors = m.counter("store_errors_total", "Failed queue appends")
        m.gauge(
            "sessions_online", "Sessions connected to this listener", fn=lambda: len(self.sessions)
        )
        m.gauge("subscriptions", "Subscriptions in the routing table", fn=lambda: len(self.trie))
        m.gauge("retained_messages", "Retained messages", fn=lambda: len(self.retained))

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

    def is_online(self, sid: SubscriberId) -> bool:
        return sid in self.sessions

    # -- registration ----------------------------------------------------------------
    def register(self, conn: Connection, req: Register) -> None:
        """Ask the registry to make ``conn`` the live session of its id (batched; no task:
        the answer comes back as a callback, which is most of what makes a CONNECT cheap)."""
        sid = (req.mountpoint, req.client_id)
        connect = req.connect
        # Filled in place: nested keyword construction copies each sub-message (4x dearer).
        op = registry_pb2.ConnectionOp()
        r = op.register
        r.key.mountpoint = req.mountpoint
        r.key.client_id = req.client_id
        r.node = self.node
        r.listener_id = self.listener_id
        r.clean_start = req.clean_start
        r.session_expiry = req.session_expiry
        r.proto_ver = connect.protocol_version
        r.peer = conn.peer
        r.username = connect.username or ""
        r.max_offline_messages = self._max_offline
        self.registry_client.submit(
            op, lambda result: self._registered(conn, sid, req.session_expiry, result)
        )

    def _registered(
        self,
        conn: Connection,
        sid: SubscriberId,
        expiry: int,
        result: registry_pb2.ConnectionResult | RegistryUnavailable,
    ) -> None:
        if isinstance(result, RegistryUnavailable):
            _registry_failed("Register", result)
            conn.registered(False, 0, False, False, ReasonCode.SERVER_UNAVAILABLE)
            return
        reply = result.register
        if not reply.ok:
            conn.registered(
                False, 0, False, False, reply.reason_code or ReasonCode.SERVER_UNAVAILABLE
            )
            return
        if not reply.session_present:
            self._subscribed.discard(sid)  # the registry dropped any subscriptions it had
        if conn.closed:  # the client went away while we waited: report it gone at once
            self._report_ended(sid, reply.epoch, expiry, "closed", False)
            return
        old = self.sessions.get(sid)
        if old is not None and old is not conn:
            old.takeover()  # the registry's command may still be on its way
        will = self._wills.pop(sid, None)
        if will is not None:
            will.cancel()
        if not reply.session_present:
            self.trie.remove_all(sid)
        self.sessions[sid] = conn
        resuming = reply.persistent and reply.session_present
        conn.resuming = resuming
        conn.registered(True, reply.epoch, reply.session_present, reply.persistent, 0)
        if resuming:
            self.spawn(self._resume(conn, sid, reply.epoch), "resume")

    async def _resume(self, conn: Connection, sid: SubscriberId, epoch: int) -> None:
        # Appends routed while the session was offline may still be on their way to the
        # store; the read must see them, or they would surface after newer live messages.
        # Appends routed from now on find the session online and reach it live (buffered
        # by the connection until the replay is done, deduplicated by seq).
        await self.store.flush()
        queued: list[OutboundMessage] = []
        after = 0
        inbound: list[int] = []
        pubrel: list[int] = []
        try:
            first = True
            while True:
                reply = await self.store.read(
                    sid[0], sid[1], epoch, after if not first else 0, 1000
                )
                state = reply.state
                if first:
                    inbound = list(state.inbound_qos2)
                    pubrel = list(state.outbound_pubrel)
                    first = False
                for entry in reply.entries:
                    queued.append(
                        convert.delivery_from_pb(
                            entry.delivery, entry.seq, entry.seq <= state.delivered_upto
                        )
                    )
                    after = entry.seq
                if len(reply.entries) < 1000:
                    break
        except grpc.aio.AioRpcError as exc:
            rpc_failed("msgstore", "Read", exc, "error")
            conn.fail(ReasonCode.SERVER_UNAVAILABLE, "queue unreadable")
            return
        conn.resume(queued, inbound, pubrel)

    def ended(self, conn: Connection, action: Ended) -> None:
        sid = conn.sid
        if sid is None or conn.epoch == 0:
            return
        if self.sessions.get(sid) is conn:
            del self.sessions[sid]
            if not conn.persistent:
                self.trie.remove_all(sid)
        # Acks and marks of this connection are durable, and its subscriptions in gossip,
        # before the registry may end the session (a clean one's end needs no task).
        writes = self._subs_writes.get(sid)
        args = (sid, conn.epoch, action.session_expiry, action.reason, action.taken_over)
        if self.store.settled() and not writes:
            self._report_ended(*args)
        else:
            self.spawn(self._ended_later(self.store.flush(), writes or [], *args), "ended")

    async def _ended_later(
        self,
        flush: asyncio.Future[None],
        writes: list[asyncio.Future[None]],
        sid: SubscriberId,
        epoch: int,
        expiry: int,
        reason: str,
        taken_over: bool,
    ) -> None:
        await flush
        if writes:
            await asyncio.gather(*writes)
        self._report_ended(sid, epoch, expiry, reason, taken_over)

    def _report_ended(
        self, sid: SubscriberId, epoch: int, expiry: int, reason: str, taken_over: bool
    ) -> None:
        op = registry_pb2.ConnectionOp()  # filled in place, as in ``register``
        d = op.disconnected
        d.key.mountpoint = sid[0]
        d.key.client_id = sid[1]
        d.epoch = epoch
        d.listener_id = self.listener_id
        d.session_expiry = expiry
        d.reason = reason
        d.taken_over = taken_over
        d.no_subscriptions = sid not in self._subscribed
        if sid not in self.sessions:
            self._subscribed.discard(sid)
        self.registry_client.submit(op, _disconnected_reported)

    def _late_register(
        self, req: registry_pb2.RegisterRequest, reply: registry_pb2.RegisterReply
    ) -> None:
        """A registration we gave up on succeeded after all: nobody serves it, say so."""
        sid = (req.key.mountpoint, req.key.client_id)
        self._report_ended(sid, reply.epoch, req.session_expiry, "closed", False)

    def takeover(self, key: common_pb2.SessionKey, old_epoch: int) -> None:
        """The registry waits for our Disconnected(taken_over) whether or not we still hold
        that connection; a connection gone already is reported at once."""
        sid = (key.mountpoint, key.client_id)
        conn = self.sessions.get(sid)
        if conn is not None and conn.epoch == old_epoch and not conn.closed:
            conn.takeover()
        else:
            self._report_ended(sid, old_epoch, 0, "taken_over", True)

    # -- publish ---------------------------------------------------------------------
    def route(
        self, msg: Message, conn: Connection | None, token: int | None, internal: bool = False
    ) -> None:
        """Deliver ``msg`` to every matching session; answer ``conn`` when durable.
        ``internal``: the broker's own message ($SYS), not counted as published."""
        if not internal:
            self._published[msg.qos].inc()
        countdown = Countdown(conn, token, self) if token is not None and conn is not None else None
        if msg.retain:
            self._update_retained(msg, countdown)
        result = self.trie.match(msg.mountpoint, msg.topic, (msg.mountpoint, msg.publisher))
        for m in result.normal:
            self._deliver_to(m.sid, m.qos, m.retain_as_published, m.sub_ids, msg, countdown)
        for group in result.shared:
            member = self.picker.pick(group, self.is_online)
            if member is None:
                self._drop_msg(msg, group.share_filter, "no_shared_member")
                continue
            opts = member.opts
            sub_ids = (opts.sub_id,) if opts.sub_id else ()
            self._deliver_to(
                member.sid, opts.qos, opts.retain_as_published, sub_ids, msg, countdown
            )
        if countdown is not None:
            matched = bool(result.normal or result.shared)
            countdown.arm(ReasonCode.SUCCESS if matched else ReasonCode.NO_MATCHING_SUBSCRIBERS)

    def store_failed(self, reason: str) -> None:
        self.m_store_errors.inc()
        log.emit("store.error", "error", op="append", reason=reason)

    def _deliver_to(
        self,
        sid: SubscriberId,
        sub_qos: int,
        rap: bool,
        sub_ids: tuple[int, ...],
        msg: Message,
        countdown: Countdown | None,
    ) -> None:
        qos = sub_qos if self.upgrade_qos else min(msg.qos, sub_qos)
        retain = msg.retain and rap
        conn = self.sessions.get(sid)
        if qos and countdown is not None and conn is not None and conn.backlog() >= self.flow_high:
            conn.hold_back(countdown.conn)  # flow control: see Connection.hold_back
        if conn is not None and (qos == 0 or not conn.persistent):
            conn.deliver(OutboundMessage(msg, qos, retain, sub_ids))
            return
        encoded = self._msg_field
        if encoded is None or encoded[0] is not msg:  # encoded once per publish
            encoded = self._msg_field = (
                msg,
                convert.message_field(msg, self.node),
            )
        queued = Queued(self, sid, conn, msg, qos, retain, sub_ids, countdown)
        if conn is not None:
            conn.appending += 1  # counts in its backlog until the store answers
        if countdown is not None:
            countdown.left += 1
        self.store.append(sid[0], sid[1], 0, encoded[1], qos, retain, sub_ids, queued.done)
        self._queued.inc()

    def dropped(self, client_id: str, out: OutboundMessage, reason: str) -> None:
        self.m_dropped.labels(reason).inc()
        msg = out.message
        if out.qos or log.message_events_enabled():
            log.emit(
                "message.dropped",
                "info",
                msg_id=msg.msg_id,
                client_id=client_id,
                topic=msg.topic,
                qos=out.qos,
                reason=reason,
            )

    def _drop_msg(self, msg: Message, target: str, reason: str) -> None:
        self.m_dropped.labels(reason).inc()
        log.emit(
            "message.dropped",
            "info",
            msg_id=msg.msg_id,
            client_id=target,
            topic=msg.topic,
            qos=msg.qos,
            reason=reason,
        )

    # -- retained --------------------------------------------------------------------
    def _update_retained(self, msg: Message, countdown: Countdown | None) -> None:
        """Replicate the retained message; a QoS >= 1 publisher's answer waits for it."""
        key = convert.meta_key(msg.mountpoint, msg.topic)
        if msg.payload:
            self.retained.set(msg.mountpoint, msg.topic, msg)
            op = gossip_pb2.MetaOp(
                prefix="retain",
                key=key,
                value=convert.message_bytes(msg, self.node),
            )
        else:
            self.retained.clear(msg.mountpoint, msg.topic)
            op = gossip_pb2.MetaOp(prefix="retain", key=key, delete=True)
        log.emit("retain.updated", topic=msg.topic, size=len(msg.payload), cleared=not msg.payload)
        fut = asyncio.ensure_future(self.gossip.Put(gossip_pb2.PutRequest(ops=[op]), timeout=10))
        if countdown is not None and msg.qos:
            countdown.left += 1
            fut.add_done_callback(countdown.future_done)
        else:
            fut.add_done_callback(_log_put_failure)

    # -- subscriptions ---------------------------------------------------------------
    # A (UN)SUBSCRIBE changes routing when it is read: a publish handled after it reaches
    # (or no longer reaches) the session, before the answer, as 3.8.4 allows and
    # [MQTT-3.10.4-2] requires. The answer waits for the gossip write, started at once
    # with the subscriptions as they are now (``_put_subs``).
    def subscribe(self, conn: Connection, req: SubscribeRequest) -> None:
        sid = conn.sid
        assert sid is not None
        fresh: list[bool] = []
        for sub in req.subscriptions:
            opts = SubOptions(
                sub.qos,
                sub.no_local,
                sub.retain_as_published,
                sub.retain_handling,
                req.sub_id,
                self.node,
            )
            fresh.append(self.trie.add(sid, sub.topic_filter, opts))
        self.spawn(self._answer_subscribe(conn, sid, req, fresh, self._put_subs(sid)), "subscribe")

    async def _answer_subscribe(
        self,
        conn: Connection,
        sid: SubscriberId,
        req: SubscribeRequest,
        fresh: list[bool],
        written: Awaitable[bool],
    ) -> None:
        codes: list[int] = [sub.qos for sub in req.subscriptions]
        if not await written:
            codes = [ReasonCode.UNSPECIFIED_ERROR] * len(codes)
        conn.subscribed(req.packet_id, codes)
        if codes and codes[0] >= 0x80:
            return
        sub_ids = (req.sub_id,) if req.sub_id else ()
        wanted: list[tuple[str, int]] = []
        for sub, is_new in zip(req.subscriptions, fresh, strict=True):
            if sub.topic_filter.startswith("$share/"):
                continue  # [MQTT-3.8.4-? v5]: no retained messages for shared subscriptions
            if sub.retain_handling == 2 or (sub.retain_handling == 1 and not is_new):
                continue
            wanted.append((sub.topic_filter, sub.qos))
        # one copy of each, at the highest QoS of the packet's filters that match it
        for _topic, msg, sub_qos in self.retained.match_many(sid[0], wanted):
            qos = sub_qos if self.upgrade_qos else min(msg.qos, sub_qos)
            conn.deliver(OutboundMessage(msg, qos, True, sub_ids))

    def unsubscribe(self, conn: Connection, req: UnsubscribeRequest) -> None:
        sid = conn.sid
        assert sid is not None
        codes: list[int] = [
            ReasonCode.SUCCESS if self.trie.remove(sid, f) else ReasonCode.NO_SUBSCRIPTION_EXISTED
            for f in req.topic_filters
        ]
        self.spawn(self._answer_unsubscribe(conn, req, codes, self._put_subs(sid)), "unsubscribe")

    async def _answer_unsubscribe(
        self, conn: Connection, req: UnsubscribeRequest, codes: list[int], written: Awaitable[bool]
    ) -> None:
        if not await written:
            codes = [ReasonCode.UNSPECIFIED_ERROR] * len(codes)
        conn.unsubscribed(req.packet_id, codes)

    def _put_subs(self, sid: SubscriberId) -> Awaitable[bool]:
        """Write ``sid``'s subscriptions as they are now to gossip; True once written.

        The write is registered at once (``_subs_writes``, ``_subscribed``), so a session
        that ends right after its SUBSCRIBE reports its end only after the write."""
        subs = self.trie.subscriptions_of(sid)
        key = convert.meta_key(*sid)
        op = (
            gossip_pb2.MetaOp(prefix="subs", key=key, value=convert.subs_to_pb(self.node, subs))
            if subs
            else gossip_pb2.MetaOp(prefix="subs", key=key, delete=True)
        )
        self._subscribed.add(sid)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        writes = self._subs_writes.setdefault(sid, [])
        writes.append(done)
        return self._put(sid, op, done, writes)

    async def _put(
        self,
        sid: SubscriberId,
        op: gossip_pb2.MetaOp,
        done: asyncio.Future[None],
        writes: list[asyncio.Future[None]],
    ) -> bool:
        try:
            await self.gossip.Put(gossip_pb2.PutRequest(ops=[op]), timeout=10)
        except grpc.aio.AioRpcError as exc:
            rpc_failed("gossip", "Put", exc, "error")
            return False
        finally:
            done.set_result(None)
            writes.remove(done)
            if not writes and self._subs_writes.get(sid) is writes:
                del self._subs_writes[sid]
        return True

    # -- gossip replica --------------------------------------------------------------
    def apply_meta(self, update: gossip_pb2.MetaUpdate) -> None:
        mountpoint, name = convert.split_meta_key(update.key)
        if update.prefix == "subs":
            sid = (mountpoint, name)
            if sid in self.sessions:
                return  # online here: this process is authoritative for it
            self.trie.remove_all(sid)
            if not update.deleted:
                for topic_filter, opts in convert.subs_from_pb(update.value).items():
                    self.trie.add(sid, topic_filter, opts)
        elif update.prefix == "retain":
            if update.deleted:
                self.retained.clear(mountpoint, name)
            else:
                pb = common_pb2.MqttMessage.FromString(update.value)
                self.retained.set(mountpoint, name, convert.message_from_pb(pb))

    # -- wills -----------------------------------------------------------------------
    def publish_will(self, conn: Connection, will: Will, delay: int) -> None:
        sid = conn.sid
        if sid is None:
            return
        now = time.time()
        props = will.properties
        expiry = props.message_expiry_interval
        msg = Message(
            self.next_msg_id(),
            will.topic,
            will.payload,
            will.qos,
            will.retain,
            sid[1],
            sid[0],
            now,
            now + expiry if expiry else None,
            forwarded(props),
        )
        if delay <= 0:
            self.route(msg, None, None)
            return
        loop = asyncio.get_running_loop()
        old = self._wills.pop(sid, None)
        if old is not None:
            old.cancel()
        self._wills[sid] = loop.call_later(delay, self._fire_will, sid, msg)

    def _fire_will(self, sid: SubscriberId, msg: Message) -> None:
        self._wills.pop(sid, None)
        self.route(msg, None, None)

    def drop_all(self, reason: str) -> None:
        for conn in list(self.sessions.values()):
            conn.fail(ReasonCode.UNSPECIFIED_ERROR, reason)

    async def shutdown(self) -> None:
        for conn in list(self.sessions.values()):
            conn.shutdown()
        for handle in self._wills.values():
            handle.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)


def _log_put_failure(fut: asyncio.Future[Any]) -> None:
    if fut.cancelled():
        return
    exc = fut.exception()
    if isinstance(exc, grpc.aio.AioRpcError):
        rpc_failed("gossip", "Put", exc, "error")
    elif exc is not None:
        raise exc


def _registry_failed(method: str, exc: RegistryUnavailable) -> None:
    rpc_failed_as("registry", method, exc.code, exc.reason)


def _disconnected_reported(result: registry_pb2.ConnectionResult | RegistryUnavailable) -> None:
    if isinstance(result, RegistryUnavailable):
        _registry_failed("Disconnected", result)
