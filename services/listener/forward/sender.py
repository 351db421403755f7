"""The listener's forwarding to other nodes: one ordered, batched stream per peer node.

Theory of operation
-------------------
The router decides *forward* for a copy whose session lives on another node
(``routing.router``); :meth:`Forwarder.forward` puts it in that node's
:class:`~services.listener.forward.outbox.Outbox` and wakes the node's link task. The
link keeps one ``Forward.Stream`` call open to the node's listener (its address comes
from gossip, prefix ``listeners``), writes what waits in batches of up to
:data:`BATCH` copies, and reads the cumulative acknowledgements: each one answers the
copies' waiters (a QoS >= 1 publisher's ``Countdown``: its PUBACK waits for the remote
node to have delivered or durably queued the copy, invariant I1). A broken stream is
dialled again with backoff and everything unacknowledged is resent; the receiver drops
what it already had (``inbox``).

Back-pressure: a link is a party of :mod:`services.listener.flow`, like a slow
subscriber. Once :data:`LINK_LIMITS` ``.high`` copies wait for a node's
acknowledgement, the publishers that add to it stop being read until it drains to
``.low``; TCP then slows them to the pace of the link, with any QoS. Every
acknowledgement counts as progress (``flow.progressed``): a link that keeps moving
holds its publishers for as long as it is congested. One that is not acknowledged
within ``flow.FLOW_MAX_HOLD`` (its node is down or paused) holds nobody back until it
is: then the outbox bounds it (``cluster.forward_queue``), and a copy that waits longer
than ``cluster.forward_timeout`` is given up: dropped, logged, and its publisher
answered 0x80.

A node the cluster view shows down gets nothing written to it: its copies wait unsent.
Should their sessions fail over to another node meanwhile (the registry's ``moved``, or
their subscriptions in gossip naming the new node), the broker withdraws them
(:meth:`Forwarder.withdraw`) and routes them there, in order, before any later copy: a
copy that no stream carried cannot be on the old node, so it is sent once.

A shared group's QoS >= 1 copy for a member that is not persistent (``Copy.share``) is
owed by the group, not by that member. Once the receiving node has delivered it, the
link keeps it (:class:`~services.listener.forward.parked.Parked`) until the member's
outcome follows: acknowledged (PUBACK, or PUBREC for QoS 2), or lost (its session ended
first). A shared copy that the member lost, that failed or expired, that waits for or
was taken by a node the view shows down (the member died with its node), or that a
peer's previous run held, is handed to ``lost``, and the broker picks another member
for it. A slow member holds nothing else up: the link's acknowledgements go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol

import grpc

from services.common import log
from services.common.grpcutil import rpc_failed_as
from services.common.peer.channel import Caller, channel
from services.common.session_key import SessionKey
from services.listener import convert, flow
from services.listener.forward.outbox import Outbox, OutboxFull
from services.listener.forward.parked import Parked
from services.listener.forward.receiver import RUN_KEY
from services.listener.processes import node_of
from services.pb import forward_pb2

BATCH = 512  # copies per ForwardBatch
STREAM = "/ternmq.forward.Forward/Stream"
LINK_LIMITS = flow.FlowLimits(20_000, 10_000)  # copies unacknowledged: hold / release
CONNECT_TIMEOUT = 2.0
TICK = 0.5  # s between expiry checks
PARKED_MAX_AGE = 600.0  # s a shared copy waits for its member's outcome, at most
_NO_KEYS: frozenset[SessionKey] = frozenset()


class Waiter(Protocol):
    """What a copy's outcome is told to (a publisher's ``Countdown``)."""

    def step(self, failure: str | None) -> None: ...


@dataclass(slots=True, init=False)
class Copy:
    """One copy for another node, and who waits for it. ``body`` is its ``Forwarded``
    serialized without the ``seq`` (``convert.forwarded_body``): the link numbers it
    when it batches it (``convert.forward_batch``). Its ``__init__`` is written out: one
    is made per forwarded copy, and the one ``dataclass`` generates stays interpreted in
    the compiled build (see ``session.messages``)."""

    client_id: str
    qos: int
    body: bytes
    waiter: Waiter | None
    msg_id: str
    topic: str
    mountpoint: str
    share: str  # a shared group's copy for a member that is not persistent
    excluded: frozenset[SessionKey]  # members that lost it already

    def __init__(
        self,
        client_id: str,
        qos: int,
        body: bytes,
        waiter: Waiter | None,
        msg_id: str,
        topic: str,
        mountpoint: str = "",
        share: str = "",
        excluded: frozenset[SessionKey] = _NO_KEYS,
    ) -> None:
        self.client_id = client_id
        self.qos = qos
        self.body = body
        self.waiter = waiter
        self.msg_id = msg_id
        self.topic = topic
        self.mountpoint = mountpoint
        self.share = share
        self.excluded = excluded


Dropped = Callable[[str, Copy, str], None]  # (node, copy, reason)


class PeerLink:
    """The stream to one other node's listener, and the copies waiting for it. As a
    party of flow control it is a subscriber that publishers may wait for, never a
    publisher that waits."""

    def __init__(self, forwarder: Forwarder, node: str, capacity: int, timeout: float) -> None:
        self.closed = False
        self.flow: flow.FlowState | None = None
        self.forwarder = forwarder
        self.node = node
        self.timeout = timeout
        self.outbox: Outbox[Copy] = Outbox(capacity)
        self.parked: Parked[Copy] = Parked(capacity, PARKED_MAX_AGE)
        self.connected = False
        self.heard_upto = 0
        self.sent = 0
        self.batches = 0  # written: sent / batches is the link's mean batch
        self._wake = asyncio.Event()
        self._woken = False  # _wake is set: a Python method call saved per copy
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"forward-{self.node}")
        self._task.add_done_callback(_report_crash)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def backlog(self) -> int:
        return len(self.outbox)

    def pause_input(self) -> None:
        """Flow control's call for a publisher; a link is never one."""

    def resume_input(self) -> None:
        """As ``pause_input``."""

    def push(self, copy: Copy) -> None:
        try:
            self.outbox.push(copy, time.monotonic())
        except OutboxFull:
            self.forwarder.fail(self.node, copy, "forward_queue_full")
            return
        if not self._woken:
            self._woken = True
            self._wake.set()

    # -- the link task -----------------------------------------------------------------
    async def _run(self) -> None:
        backoff = 0.1
        while True:
            address = self.forwarder.peers.get(self.node)
            if address is None:
                await self._idle(TICK)
                continue
            # Batches are written already serialized (no request serializer).
            stream = self.forwarder.channel(address).stream_stream(
                STREAM, None, forward_pb2.ForwardAck.FromString
            )
            call = stream(None, metadata=self.forwarder.caller.metadata())
            reader: asyncio.Task[None] | None = None
            try:
                await asyncio.wait_for(call.wait_for_connection(), CONNECT_TIMEOUT)
                self._met(await call.initial_metadata())
                self.connected = True
                backoff = 0.1
                reader = asyncio.create_task(self._read(call), name=f"forward-acks-{self.node}")
                while not reader.done():
                    # Nothing goes to a node seen down: a stream that looks open may be
                    # dead (a partition), and a copy written to it is doubtful for ever
                    # (``resent_upto``). Held here instead, it can follow its session if
                    # that fails over elsewhere (``Forwarder.withdraw``), or go when the
                    # node is back.
                    copies = [] if self.held() else self.outbox.take(BATCH)
                    if not copies:
                        await self._idle(TICK, reader)
                        continue
                    await call.write(
                        convert.forward_batch(
                            self.forwarder.sender,
                            self.forwarder.incarnation,
                            self.heard_upto,
                            [(e[0], e[1].body) for e in copies],
                            self.outbox.resent_upto,
                            self.parked.heard(),
                        )
                    )
                    self.sent += len(copies)
                    self.batches += 1
                if reader.exception() is not None:
                    raise reader.exception()  # type: ignore[misc]
            except grpc.aio.AioRpcError as exc:
                if self.connected:
                    rpc_failed_as(
                        "forward",
                        f"Stream {self.node}",
                        exc.code().name,
                        str(exc.details()),
                        "info",
                    )
            except grpc.aio.UsageError:
                pass  # written to a call that had just ended: dialled again
            except TimeoutError:
                pass  # not answering: dialled again; the copies expire meanwhile
            finally:
                self.connected = False
                if reader is not None:
                    reader.cancel()
                call.cancel()
                self.outbox.rewind()
            await self._idle(backoff)
            backoff = min(backoff * 2, 1.0)

    def _met(self, metadata: object) -> None:
        """The peer's run, from its stream's initial metadata: the shared copies parked
        for an earlier run died with it, and go back to be picked again."""
        run = 0
        for key, value in metadata or ():  # type: ignore[attr-defined]
            if key == RUN_KEY:
                run = int(value)
        for copy in self.parked.peer_run(run):
            self.forwarder.lost(self.node, copy, "node_restarted")

    def held(self) -> bool:
        return node_of(self.node) in self.forwarder.down

    def wake(self) -> None:
        self._woken = True
        self._wake.set()

    async def _read(self, call: grpc.aio.StreamStreamCall) -> None:  # type: ignore[type-arg]
        async for ack in call:
            parked = self.parked
            self.heard_upto = max(self.heard_upto, ack.upto)
            failed = set(ack.failed)
            now = time.monotonic()
            for seq, copy, _pushed in self.outbox.ack(ack.upto):
                ok = not failed or seq not in failed
                if copy.share:
                    if ok:
                        parked.park(seq, copy, now)
                    else:
                        self.forwarder.lost(self.node, copy, "member_gone")
                elif copy.waiter is not None:
                    copy.waiter.step(None if ok else f"{self.node} did not take it")
            for seq in ack.settled:
                parked.settle(seq)
            for seq in ack.returned:
                back = parked.returned(seq)
                if back is not None:
                    self.forwarder.lost(self.node, back, "member_gone")
            flow.progressed(self, LINK_LIMITS)

    async def _idle(self, delay: float, reader: asyncio.Task[None] | None = None) -> None:
        """Wait for new copies, the reader's end or ``delay``; then expire old copies."""
        self._wake.clear()
        self._woken = False
        waits: list[asyncio.Future[object]] = [asyncio.ensure_future(self._wake.wait())]
        if reader is not None:
            waits.append(reader)  # type: ignore[arg-type]
        _done, pending = await asyncio.wait(
            waits, timeout=delay, return_when=asyncio.FIRST_COMPLETED
        )
        for fut in pending:
            if fut is not reader:
                fut.cancel()
        now = time.monotonic()
        for copy in self.outbox.expire(now, self.timeout):
            self.forwarder.fail(self.node, copy, "node_unreachable")
        self.parked.expire(now)
        flow.drained(self, LINK_LIMITS)


class Forwarder:
    """Every link of this listener to the other nodes' listeners (and to its own node's
    other listener processes, which are routes as other nodes are)."""

    def __init__(
        self,
        node: str,
        route: str,
        sender: str,
        cookie: str,
        capacity: int,
        timeout: float,
        dropped: Dropped,
        lost: Dropped | None = None,
    ) -> None:
        """``dropped`` hears every copy given up; ``lost``, a shared group's copy that
        its member lost, for the group to pick another (without it they are dropped)."""
        self.node = node
        self.route = route
        self.sender = sender
        self.incarnation = secrets.randbits(63)
        self.capacity = capacity
        self.timeout = timeout
        self.dropped = dropped
        self.lost_shared = lost
        self.caller = Caller(cookie, node, "")
        self.peers: dict[str, str] = {}  # route -> its listener's forward address
        self.down: frozenset[str] = frozenset()  # nodes the cluster view shows down
        self.links: dict[str, PeerLink] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}

    def channel(self, address: str) -> grpc.aio.Channel:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = channel(address)
        return ch

    def set_down(self, nodes: frozenset[str]) -> None:
        """The cluster view's down members: their links hold their copies; those back
        up send what waited."""
        back = self.down - nodes
        gone = nodes - self.down
        self.down = nodes
        for route, link in self.links.items():
            if node_of(route) in back:
                link.wake()
            elif node_of(route) in gone:
                for copy in link.parked.take_all() + link.outbox.take_back(_shared):
                    self.lost(route, copy, "node_down")

    def set_peer(self, node: str, address: str | None) -> None:
        """A route's listener address from gossip (None: its record was deleted)."""
        if node == self.route:
            return
        if address is None:
            self.peers.pop(node, None)
        else:
            self.peers[node] = address

    def forward(self, node: str, copy: Copy, publisher: flow.FlowParty | None = None) -> None:
        """Send ``copy`` to ``node``; ``publisher`` (its connection) waits while the link
        is congested."""
        link = self.links.get(node)
        if link is None:
            link = self.links[node] = PeerLink(self, node, self.capacity, self.timeout)
            link.start()
        link.push(copy)
        if publisher is not None and len(link.outbox) >= LINK_LIMITS.high:
            flow.hold_back(link, publisher, asyncio.get_running_loop())

    def withdraw(self, node: str, keys: Collection[SessionKey]) -> list[Copy]:
        """Take back the copies for the sessions ``keys`` that wait for ``node`` and that
        no stream ever carried: those sessions moved away from it (a failover while it
        is down), and the copies must follow them rather than expire there."""
        link = self.links.get(node)
        if link is None or not link.outbox.unsent():
            return []
        return link.outbox.withdraw(lambda c: (c.mountpoint, c.client_id) in keys)

    def lost(self, node: str, copy: Copy, reason: str) -> None:
        """``copy``, a shared group's, did not reach its member at ``node``."""
        if self.lost_shared is None:
            self.fail(node, copy, reason)
        else:
            self.lost_shared(node, copy, reason)

    def fail(self, node: str, copy: Copy, reason: str) -> None:
        if copy.share and self.lost_shared is not None:
            self.lost_shared(node, copy, reason)  # another member may take it
            return
        self.dropped(node, copy, reason)
        if copy.waiter is not None:
            copy.waiter.step(f"{reason}: {node}")

    def details(self) -> dict[str, object]:
        return {
            n: {
                "address": self.peers.get(n, ""),
                "connected": link.connected,
                "held": link.held(),
                "waiting": len(link.outbox),
                "sent": link.sent,
                "batches": link.batches,
                "shared_unsettled": len(link.parked),
            }
            for n, link in sorted(self.links.items())
        }

    async def stop(self) -> None:
        for link in self.links.values():
            await link.stop()
        for ch in self._channels.values():
            await ch.close(None)


def _shared(copy: Copy) -> bool:
    return bool(copy.share)


def _report_crash(task: asyncio.Task[None]) -> None:
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    log.emit("internal.error", "error", op=task.get_name(), reason=repr(exc))
