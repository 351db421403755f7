"""A session's life as this listener sees it: registration, resume, takeover, end.

Theory of operation
-------------------
* CONNECT: ``register`` asks the registry (batched, answered by callback) to make the
  connection the live session of its id. On success the connection becomes the id's
  route target here; a clean start forgets the id's old subscriptions; a pending
  delayed will is void. A persistent session that is present resumes: its queue is
  read from ``acked + 1`` and replayed before live traffic (live queued copies arriving
  meanwhile are buffered by the connection and deduplicated by ``seq``).
* Takeover: the registry tells the old owner's listener (``takeover``); the old
  connection gets 0x8E (v5) or is closed, and reports its end as taken over.
* End: ``ended`` reports the end to the registry once the connection's store writes
  and subscription writes are in, so the registry's clean-up never races them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from services.common.grpcutil import CallFailed, rpc_failed, rpc_failed_as
from services.common.session_key import SessionKey
from services.listener import convert
from services.listener.meta_writer import MetaWriter
from services.listener.mqtt.types import ReasonCode
from services.listener.ports import ClientPort, QueueStore
from services.listener.registry_client import RegistryClient, RegistryUnavailable
from services.listener.routing.router import Router
from services.listener.session.actions import Ended, Register
from services.listener.session.messages import OutboundMessage
from services.listener.wills import Wills
from services.pb import common_pb2, registry_pb2, registry_pb2_grpc

READ_PAGE = 1000  # queue entries per Read on resume
EARLY_MAX = 10_000  # takeovers remembered ahead of their registration's answer
EARLY_TTL = 60.0  # s; an answer later than this never comes (the registry gave up)


class Lifecycle:
    __slots__ = (
        "early",
        "listener_id",
        "max_offline",
        "meta",
        "node",
        "registry_client",
        "route",
        "router",
        "spawn",
        "store",
        "wills",
    )

    def __init__(
        self,
        node: str,
        route: str,
        listener_id: str,
        max_offline: int,
        registry: registry_pb2_grpc.RegistryStub,
        store: QueueStore,
        router: Router[ClientPort],
        wills: Wills,
        meta: MetaWriter,
        spawn: Callable[[Awaitable[Any], str], None],
    ) -> None:
        self.node = node  # registrations are the node's
        self.route = route  # copies for this process's sessions come here
        self.listener_id = listener_id
        self.max_offline = max_offline
        self.registry_client = RegistryClient(registry, self._late_register)
        self.store = store
        self.router = router
        self.wills = wills
        self.meta = meta
        self.spawn = spawn
        # Takeovers that arrived before the registration they end (the command and the
        # answer travel on different streams): (key, epoch) -> when it arrived.
        self.early: dict[tuple[SessionKey, int], float] = {}

    # -- registration ----------------------------------------------------------------
    def register(self, conn: ClientPort, req: Register) -> None:
        """Ask the registry to make ``conn`` the live session of its id (batched; no task:
        the answer comes back as a callback, which is most of what makes a CONNECT cheap)."""
        key = (req.mountpoint, req.client_id)
        connect = req.connect
        # Filled in place: nested keyword construction copies each sub-message.
        op = registry_pb2.ConnectionOp()
        r = op.register
        r.key.mountpoint = req.mountpoint
        r.key.client_id = req.client_id
        r.node = self.node
        r.route = self.route
        r.listener_id = self.listener_id
        r.clean_start = req.clean_start
        r.session_expiry = req.session_expiry
        r.proto_ver = connect.protocol_version
        r.peer = conn.peer
        r.username = connect.username or ""
        r.max_offline_messages = self.max_offline
        self.registry_client.submit(
            op, lambda result: self._registered(conn, key, req.session_expiry, result)
        )

    def _registered(
        self,
        conn: ClientPort,
        key: SessionKey,
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
            self.meta.subscribed.discard(key)  # the registry dropped any subscriptions it had
        if conn.closed:  # the client went away while we waited: report it gone at once
            self._report_ended(key, reply.epoch, expiry, "closed", False)
            return
        if self.early and self.early.pop((key, reply.epoch), None) is not None:
            # Taken over (by a CONNECT on another node) before this answer arrived: the
            # registry already counts it ended; the client learns it was taken over.
            conn.registered(True, reply.epoch, reply.session_present, reply.persistent, 0)
            conn.takeover()
            return
        targets = self.router.targets
        old = targets.get(key)
        if old is not None and old is not conn:
            old.takeover()  # the registry's command may still be on its way
        self.wills.cancel(key)
        if not reply.session_present:
            self.router.forget(key)
        else:
            self._reown(key)
        targets[key] = conn
        resuming = reply.persistent and reply.session_present
        conn.resuming = resuming
        conn.registered(True, reply.epoch, reply.session_present, reply.persistent, 0)
        if resuming:
            self.spawn(self._resume(conn, key, reply.epoch), "resume")

    def _reown(self, key: SessionKey) -> None:
        """A session resumed here that lived on another node or listener process (its
        subscriptions name that route): they are this process's now, here and in gossip."""
        opts = self.router.trie.options_of(key)
        if opts is None or not opts.node or opts.node == self.route:
            return
        subs = self.router.move(key, self.route)
        self.spawn(self.meta.put_subscriptions(key, subs), "reown")

    def moved(self, key: common_pb2.SessionKey, route: str) -> None:
        """The registry handed this session to ``route`` (a node or a listener process):
        copies for it go there now, ahead of gossip (not while a connection here still
        holds it). Handed to this process, the subscriptions are rewritten in gossip as
        its own at once, so others route here before the client is even answered. The
        session resumed elsewhere, so a delayed will its last connection here left is
        void [MQTT-3.1.3-9]."""
        sk = (key.mountpoint, key.client_id)
        if sk in self.router.targets:
            return
        self.wills.cancel(sk)
        subs = self.router.move(sk, route)
        if subs and route == self.route:  # handed to this process: the subscriptions are ours
            self.spawn(self.meta.put_subscriptions(sk, subs), "reown")

    async def _resume(self, conn: ClientPort, key: SessionKey, epoch: int) -> None:
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
                if conn.closed:
                    return  # gone meanwhile: nothing to replay to, the queue stays stored
                reply = await self.store.read(key[0], key[1], epoch, after, READ_PAGE)
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
                if not reply.more:  # not the count: a page of large messages is short
                    break
        except CallFailed as exc:
            rpc_failed("msgstore", "Read", exc, "error")
            conn.fail(ReasonCode.SERVER_UNAVAILABLE, "queue unreadable")
            return
        conn.resume(queued, inbound, pubrel)

    # -- end -------------------------------------------------------------------------
    def ended(self, conn: ClientPort, action: Ended) -> None:
        key = conn.sid
        if key is None or conn.epoch == 0:
            return
        targets = self.router.targets
        if targets.get(key) is conn:
            del targets[key]
            if not conn.persistent:
                self.router.forget(key)
            self.router.released(key)
        # Acks and marks of this connection are durable, and its subscriptions in gossip,
        # before the registry may end the session (a clean one's end needs no task).
        args = (key, conn.epoch, action.session_expiry, action.reason, action.taken_over)
        self._report_when_written(args, self.meta.pending.get(key))

    def _report_when_written(
        self,
        args: tuple[SessionKey, int, int, str, bool],
        writes: list[asyncio.Future[None]] | None,
    ) -> None:
        """Report a connection's end once its store writes (and ``writes``, its gossip
        writes) are answered: at once when they are (no task), else after them."""
        if self.store.settled() and not writes:
            self._report_ended(*args)
        else:
            self.spawn(self._ended_later(self.store.flush(), writes or [], *args), "ended")

    async def _ended_later(
        self,
        flush: asyncio.Future[None],
        writes: list[asyncio.Future[None]],
        key: SessionKey,
        epoch: int,
        expiry: int,
        reason: str,
        taken_over: bool,
    ) -> None:
        await flush
        if writes:
            await asyncio.gather(*writes)
        self._report_ended(key, epoch, expiry, reason, taken_over)

    def _report_ended(
        self, key: SessionKey, epoch: int, expiry: int, reason: str, taken_over: bool
    ) -> None:
        op = registry_pb2.ConnectionOp()  # filled in place, as in ``register``
        d = op.disconnected
        d.key.mountpoint = key[0]
        d.key.client_id = key[1]
        d.epoch = epoch
        d.listener_id = self.listener_id
        d.session_expiry = expiry
        d.reason = reason
        d.taken_over = taken_over
        subscribed = self.meta.subscribed
        d.no_subscriptions = key not in subscribed
        if key not in self.router.targets:
            subscribed.discard(key)
        self.registry_client.submit(op, _disconnected_reported)

    def _late_register(
        self, req: registry_pb2.RegisterRequest, reply: registry_pb2.RegisterReply
    ) -> None:
        """A registration we gave up on succeeded after all: nobody serves it, say so."""
        key = (req.key.mountpoint, req.key.client_id)
        self._report_ended(key, reply.epoch, req.session_expiry, "closed", False)

    def takeover(self, key: common_pb2.SessionKey, old_epoch: int) -> None:
        """The registry waits for our Disconnected(taken_over) whether or not we still hold
        that connection; a connection gone already is reported once what it wrote to the
        store is answered."""
        sk = (key.mountpoint, key.client_id)
        conn = self.router.targets.get(sk)
        if conn is not None and conn.epoch == old_epoch and not conn.closed:
            conn.takeover()
            return
        if conn is None or conn.epoch < old_epoch:
            self._remember_early(sk, old_epoch)
        # The connection's last acks and marks may still be on their way to the store
        # (a write held for the replicas): the new owner's epoch would fence them, and
        # its replay resend what was acknowledged, without DUP.
        self._report_when_written((sk, old_epoch, 0, "taken_over", True), None)

    def _remember_early(self, key: SessionKey, epoch: int) -> None:
        now = time.monotonic()
        if len(self.early) >= EARLY_MAX:
            for k, at in list(self.early.items()):
                if now - at > EARLY_TTL:
                    del self.early[k]
        if len(self.early) < EARLY_MAX:
            self.early[(key, epoch)] = now


def _registry_failed(method: str, exc: RegistryUnavailable) -> None:
    rpc_failed_as("registry", method, exc.code, exc.reason)


def _disconnected_reported(result: registry_pb2.ConnectionResult | RegistryUnavailable) -> None:
    if isinstance(result, RegistryUnavailable):
        _registry_failed("Disconnected", result)
