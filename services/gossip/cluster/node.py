"""The gossip service's cluster shell: joins, links to peers, the detector's clock, the view.

Theory of operation. The pure cores decide (``membership.members``: who is a member;
``membership.detector``: who is up); this module only moves their messages and keeps
time:

* **Links.** For every other member, one outgoing ``Cluster.Link`` stream carries this
  node's detector messages and member-list states to it, through a bounded queue (a
  paused peer fills it and further messages are dropped: the detector tolerates loss).
  When an established link fails, the peer's process or host is gone or unreachable:
  ``peer_disconnected`` makes it down at once (the SIGKILL fast path); a peer that only
  stopped answering (SIGSTOP) is found by the probes. The link is re-dialled with
  backoff for as long as the peer is a member.
* **Joining.** With ``cluster.seeds`` set and no other member known, the node calls
  ``Join`` on each seed in turn until one answers with a member list that holds it.
  Until then it is not *joined* and ``/health`` says 503.
* **Member list.** Changed by joins (and, later, leaves); spread by piggybacking the
  state on links when it changes and by a push-pull ``Sync`` with a random member every
  :data:`SYNC_INTERVAL`. Persisted to ``data_dir/cluster/members.json`` on every change
  (membership is durable: a restarted node knows its cluster).
* **View.** After every change: members, the detector's up set, the majority flag; the
  difference is logged (``node.up``/``node.down``/``node.joined``/``node.left``,
  ``netsplit.detected``/``healed``).

The detector's incarnation starts from the wall clock in milliseconds, so a restarted
node refutes whatever ``Dead`` rumour its previous run left behind without storing a
counter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc

from services.common import log
from services.common.background import report_crash
from services.common.grpcutil import rpc_failed_as
from services.common.peer.channel import Caller, channel
from services.common.peer.identity import Identity
from services.gossip.cluster import address_book as ab
from services.gossip.cluster import wire
from services.gossip.membership import members as ml
from services.gossip.membership.detector import Detector
from services.gossip.membership.messages import Output
from services.gossip.membership.view import View, diff, make_view
from services.pb import cluster_pb2, cluster_pb2_grpc, gossip_pb2

SYNC_INTERVAL = 1.0  # s between push-pull member-list exchanges
JOIN_RETRY = 0.5  # s between rounds of Join calls to the seeds
LINK_QUEUE = 256  # messages waiting for a link before new ones are dropped
CALL_TIMEOUT = 2.0  # s for Join and Sync
MIN_TICK, MAX_TICK = 0.005, 0.2  # s: the detector's clock, within these bounds


class ClusterNode:
    def __init__(
        self,
        identity: Identity,
        cookie: str,
        seeds: tuple[str, ...],
        state_dir: Path,
        rng: random.Random | None = None,
        discovering: bool = False,
    ) -> None:
        self.node = identity.node
        self.identity = identity
        self.cookie = cookie
        self.seeds = seeds
        self.state_path = state_dir / "members.json"
        self.rng = rng or random.Random()
        self.address = ""  # set by start(): the bound inter-node address
        self.members, self.book = self._load()
        self.members = ml.join(self.members, self.node)
        # With discovery, a node that knows no other member is not joined until its first
        # look finds others to join, or finds nobody (then it starts the cluster).
        self.joined = (not seeds and not discovering) or len(ml.members(self.members)) > 1
        self.caller: Caller | None = None
        self.detector: Detector | None = None
        self.view = View(self.node, frozenset({self.node}), frozenset({self.node}))
        self._queues: dict[str, asyncio.Queue[cluster_pb2.Envelope]] = {}
        self._links: dict[str, asyncio.Task[None]] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._view_changed = asyncio.Event()  # replaced at each change: waiters see one
        self._published: tuple[View, bool] | None = None
        self._split_at: float | None = None  # monotonic time the majority was lost
        self._stopping = False
        self.dropped = 0  # messages a full link queue or an unknown address lost
        self.link_up: dict[str, bool] = {}  # outgoing links established now
        self.heard: dict[str, int] = {}  # detector messages received, by sender
        self.bad_messages = 0  # undecodable messages from peers
        # Set by the service: metadata records a peer broadcast, and a peer that came up
        # (the metadata replicator catches it up at once rather than at its next round).
        self.on_meta: Callable[[cluster_pb2.MetaBatch], None] | None = None
        self.on_peer_up: Callable[[str], None] | None = None

    # -- persistence -------------------------------------------------------------------
    def _load(self) -> tuple[ml.MemberList, dict[str, ab.Entry]]:
        try:
            raw = json.loads(self.state_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return ml.empty(), {}
        records = tuple(
            ml.Record(r["node"], int(r["version"]), ml.Status(int(r["status"])))
            for r in raw["records"]
        )
        book = {n: ab.Entry(e["address"], int(e["incarnation"])) for n, e in raw["book"].items()}
        return ml.check(ml.MemberList(records)), book

    def _save(self) -> None:
        data = {
            "records": [
                {"node": r.node, "version": r.version, "status": int(r.status)}
                for r in self.members.records
            ],
            "book": {
                n: {"address": e.address, "incarnation": e.incarnation}
                for n, e in sorted(self.book.items())
            },
        }
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, address: str) -> None:
        loop = asyncio.get_running_loop()
        self.address = address
        self.caller = Caller(self.cookie, self.node, address)
        self.book = ab.put(self.book, self.node, ab.Entry(address, self.identity.incarnation))
        self.detector = Detector(
            self.node,
            ml.members(self.members),
            self.rng,
            incarnation=time.time_ns() // 1_000_000,
            now=loop.time(),
        )
        self._save()
        self._refresh()
        self._tasks = [
            asyncio.create_task(self._clock(), name="cluster-clock"),
            asyncio.create_task(self._sync_loop(), name="cluster-sync"),
        ]
        if not self.joined:
            self._tasks.append(asyncio.create_task(self._join_loop(), name="cluster-join"))
        for task in self._tasks:
            task.add_done_callback(report_crash)

    async def stop(self) -> None:
        self._stopping = True
        self._view_changed.set()  # view watchers end
        tasks = [*self._tasks, *self._links.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for ch in self._channels.values():
            await ch.close(None)

    # -- the view ----------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Joined, and in the majority: what ``/health`` needs from the cluster."""
        return self.joined and self.view.has_majority

    def details(self) -> dict[str, Any]:
        detector = self.detector
        rows = []
        for r in self.members.records:
            belief = detector.peer(r.node) if detector is not None else None
            entry = self.book.get(r.node)
            if r.status is ml.Status.LEFT:
                state = "left"
            elif r.status is ml.Status.LEAVING:
                state = "leaving"
            else:
                state = "up" if r.node in self.view.up else "down"
            rows.append(
                {
                    "node": r.node,
                    "state": state,
                    "address": entry.address if entry else "",
                    "belief": belief[0].name.lower() if belief else "self",
                }
            )
        return {
            "node": self.node,
            "incarnation": f"{self.identity.incarnation:016x}",
            "address": self.address,
            "joined": self.joined,
            "majority": self.view.has_majority,
            "members": rows,
            "links": {
                n: {"up": self.link_up.get(n, False), "queued": q.qsize()}
                for n, q in sorted(self._queues.items())
            },
            "heard": dict(sorted(self.heard.items())),
            "dropped": self.dropped,
            "bad_messages": self.bad_messages,
        }

    def _refresh(self) -> None:
        """Recompute the view; log what changed; follow the member list with links."""
        assert self.detector is not None
        new = make_view(self.node, self.members, self.detector.up)
        for event in diff(self.view, new):
            level = "warning" if event.name in ("node.down", "netsplit.detected") else "info"
            fields = dict(event.fields)
            if event.name == "netsplit.detected":
                self._split_at = time.monotonic()
            elif event.name == "netsplit.healed":
                since = self._split_at
                fields["duration_s"] = round(time.monotonic() - since, 3) if since else 0.0
                self._split_at = None
            log.emit(event.name, level, **fields)
        old_up, self.view = self.view.up, new
        if self.on_peer_up is not None:
            for node in sorted(new.up - old_up - {self.node}):
                self.on_peer_up(node)
        if self._published != (new, self.joined):
            self._published = (new, self.joined)
            changed, self._view_changed = self._view_changed, asyncio.Event()
            changed.set()
        others = ml.members(self.members) - {self.node}
        for node in others - set(self._links):
            self._queues[node] = asyncio.Queue(LINK_QUEUE)
            self._links[node] = task = asyncio.create_task(self._link(node), name=f"link-{node}")
            task.add_done_callback(report_crash)
        for node in set(self._links) - others:
            self._links.pop(node).cancel()
            self._queues.pop(node, None)

    def view_pb(self) -> gossip_pb2.ClusterView:
        return gossip_pb2.ClusterView(
            self_node=self.node,
            members=sorted(self.view.members),
            up=sorted(self.view.up),
            majority=self.view.has_majority,
            joined=self.joined,
        )

    async def views(self) -> AsyncIterator[gossip_pb2.ClusterView]:
        """The view now, then after each change; a slow reader skips to the latest."""
        while not self._stopping:
            changed = self._view_changed
            yield self.view_pb()
            await changed.wait()

    def _apply(self, out: Output) -> None:
        for send in out.sends:
            self._send(send.to, cluster_pb2.Envelope(detector=wire.message_to_pb(send.message)))
        if out.changes:
            self._refresh()
        self._wake.set()

    def broadcast(self, envelope: cluster_pb2.Envelope) -> None:
        """Send to every other member that is up now (a down one catches up later)."""
        for node in sorted(self.view.up - {self.node}):
            self._send(node, envelope)

    def stub_for(self, node: str) -> cluster_pb2_grpc.ClusterStub | None:
        entry = self.book.get(node)
        return self._stub(entry.address) if entry is not None else None

    def _send(self, node: str, envelope: cluster_pb2.Envelope) -> None:
        queue = self._queues.get(node)
        if queue is None or queue.full():
            self.dropped += 1
            return
        queue.put_nowait(envelope)

    # -- member list -------------------------------------------------------------------
    def member_state(self) -> cluster_pb2.MemberState:
        return wire.state_to_pb(self.members, self.book)

    def merge_state(self, pb: cluster_pb2.MemberState) -> bool:
        """Merge a peer's member list and addresses; True if ours changed."""
        try:
            theirs, book = wire.state_from_pb(pb)
        except wire.WireError:
            self.bad_messages += 1
            return False
        return self._adopt(ml.merge(self.members, theirs), ab.merge(self.book, book))

    def join_request(self, req: cluster_pb2.JoinRequest) -> cluster_pb2.JoinReply:
        """A node asks to join through us: merge what it knows, then add it."""
        try:
            theirs, book = wire.state_from_pb(req.state)
        except wire.WireError:
            self.bad_messages += 1
            theirs, book = ml.empty(), {}
        book = ab.merge(self.book, book)
        if req.address:
            book = ab.put(book, req.node, ab.Entry(req.address, req.incarnation))
        self._adopt(ml.join(ml.merge(self.members, theirs), req.node), book)
        return cluster_pb2.JoinReply(state=self.member_state())

    def _adopt(self, members: ml.MemberList, book: dict[str, ab.Entry]) -> bool:
        """Take ``members`` and ``book`` (each already merged with ours): persist them,
        follow the member list with the detector and the links, spread a member change.
        True if anything changed."""
        if members == self.members and book == self.book:
            return False
        changed_members = members != self.members
        self.members, self.book = members, book
        if len(ml.members(members)) > 1 and self.node in ml.members(members):
            self.joined = True
        elif self.node not in ml.members(members):
            self.joined = False  # removed while it could not hear: it serves nobody now
        self._save()
        if self.detector is None:
            return True  # start() builds the detector and the links from this state
        if changed_members:
            loop = asyncio.get_running_loop()
            self._apply(self.detector.set_members(ml.members(members), loop.time()))
            state = self.member_state()
            for node in ml.members(members) - {self.node}:  # spread the change
                self._send(node, cluster_pb2.Envelope(members=state))
        self._refresh()
        return True

    # -- detector ----------------------------------------------------------------------
    def receive(self, envelope: cluster_pb2.Envelope) -> None:
        body = envelope.WhichOneof("body")
        if body == "members":
            self.merge_state(envelope.members)
            return
        if body == "meta":
            if self.on_meta is not None:
                self.on_meta(envelope.meta)
            return
        if body != "detector" or self.detector is None:
            self.bad_messages += 1
            return
        try:
            message = wire.message_from_pb(envelope.detector)
        except wire.WireError:
            self.bad_messages += 1
            return
        self.heard[message.src] = self.heard.get(message.src, 0) + 1
        self._apply(self.detector.receive(message, asyncio.get_running_loop().time()))

    async def _clock(self) -> None:
        loop = asyncio.get_running_loop()
        assert self.detector is not None
        while True:
            delay = min(MAX_TICK, max(MIN_TICK, self.detector.next_wakeup() - loop.time()))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._apply(self.detector.tick(loop.time()))

    # -- I/O ---------------------------------------------------------------------------
    def _stub(self, address: str) -> cluster_pb2_grpc.ClusterStub:
        ch = self._channels.get(address)
        if ch is None:
            ch = self._channels[address] = channel(address)
        return cluster_pb2_grpc.ClusterStub(ch)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata()

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        assert self.caller is not None
        return self.caller.metadata()

    async def _link(self, node: str) -> None:
        backoff = 0.1
        queue = self._queues[node]
        while not self._stopping:
            entry = self.book.get(node)
            if entry is None:
                await asyncio.sleep(JOIN_RETRY)
                continue
            established = False

            async def outgoing() -> AsyncIterator[cluster_pb2.Envelope]:
                yield cluster_pb2.Envelope(members=self.member_state())
                while True:
                    yield await queue.get()

            call = self._stub(entry.address).Link(outgoing(), metadata=self._metadata())
            try:
                # A peer that accepts TCP but never answers (paused, still starting) would
                # hold the dial forever: give up and dial again.
                await asyncio.wait_for(call.initial_metadata(), CALL_TIMEOUT)
                if call.done():  # refused or unreachable: a failed call returns here too
                    code, reason = (await call.code()).name, str(await call.details())
                else:
                    established = self.link_up[node] = True
                    backoff = 0.1
                    async for envelope in call:
                        self.receive(envelope)
                    code, reason = "STREAM_ENDED", "the peer closed the link"
            except grpc.aio.AioRpcError as exc:
                code, reason = exc.code().name, str(exc.details())
            except TimeoutError:
                code, reason = "DEADLINE_EXCEEDED", f"no answer within {CALL_TIMEOUT:g}s"
            finally:
                call.cancel()
                self.link_up[node] = False
            if established and self.detector is not None:
                rpc_failed_as("cluster", f"Link {node}", code, reason, "info")
                loop = asyncio.get_running_loop()
                self._apply(self.detector.peer_disconnected(node, loop.time()))
            elif code == "UNAUTHENTICATED":
                rpc_failed_as("cluster", f"Link {node}", code, reason)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def remove(self, node: str) -> gossip_pb2.JoinClusterReply:
        """``cluster leave node=NODE`` for a member that is down: it leaves the member list
        (and every majority). Refused for a member that is up, this one included: its
        sessions' queues would have to move first, which needs the session directory."""
        members = ml.members(self.members)
        if node not in members:
            return gossip_pb2.JoinClusterReply(ok=False, reason=f"{node} is not a member")
        if node in self.view.up:
            return gossip_pb2.JoinClusterReply(
                ok=False,
                reason=f"{node} is up: stop it first (a live member's queues cannot move yet)",
            )
        self._adopt(ml.finish_leave(self.members, node), self.book)
        return gossip_pb2.JoinClusterReply(ok=True, members=sorted(ml.members(self.members)))

    def discovered(self, found: dict[str, str]) -> None:
        """What discovery found registered (node -> inter-node address), this node
        included. Not joined: join those (none: this node starts the cluster). Joined:
        join any that is not a member yet, so two clusters that formed apart in a race
        merge into one."""
        others = {n: a for n, a in found.items() if n != self.node}
        if not self.joined:
            if others:
                self.seeds = tuple(sorted(set(others.values())))
            else:
                self.joined = True
                if self.detector is not None:
                    self._refresh()
            return
        members = ml.members(self.members)
        for node, address in sorted(others.items()):
            if node not in members:
                task = asyncio.create_task(self.join_via(address), name=f"join-{node}")
                task.add_done_callback(_report_join)

    async def join_via(self, seed: str) -> gossip_pb2.JoinClusterReply:
        """Join the cluster of the member at ``seed`` now (``cluster join``)."""
        if seed == self.address:
            return gossip_pb2.JoinClusterReply(ok=False, reason="that is this node's address")
        try:
            reply = await self._stub(seed).Join(
                self._join_request(), timeout=CALL_TIMEOUT, metadata=self._metadata()
            )
        except grpc.aio.AioRpcError as exc:
            rpc_failed_as("cluster", f"Join {seed}", exc.code().name, str(exc.details()))
            return gossip_pb2.JoinClusterReply(
                ok=False, reason=f"{seed}: {exc.code().name}: {exc.details()}"
            )
        self.merge_state(reply.state)
        return gossip_pb2.JoinClusterReply(ok=self.joined, members=sorted(ml.members(self.members)))

    def _join_request(self) -> cluster_pb2.JoinRequest:
        return cluster_pb2.JoinRequest(
            node=self.node,
            address=self.address,
            incarnation=self.identity.incarnation,
            state=self.member_state(),
        )

    async def _join_loop(self) -> None:
        while not self.joined and not self._stopping:
            for seed in self.seeds:
                if seed == self.address:
                    continue
                try:
                    reply = await self._stub(seed).Join(
                        self._join_request(), timeout=CALL_TIMEOUT, metadata=self._metadata()
                    )
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                        rpc_failed_as(
                            "cluster", f"Join {seed}", exc.code().name, str(exc.details())
                        )
                    continue
                self.merge_state(reply.state)
                if self.joined:
                    return
            await asyncio.sleep(JOIN_RETRY)

    async def _sync_loop(self) -> None:
        while True:
            await asyncio.sleep(SYNC_INTERVAL * self.rng.uniform(0.75, 1.25))
            # every member, not only those seen up: a node that was removed while it was
            # away hears it this way (nobody probes a non-member, so to it all look down)
            peers = sorted(ml.members(self.members) - {self.node})
            if not peers:
                continue
            entry = self.book.get(self.rng.choice(peers))
            if entry is None:
                continue
            try:
                reply = await self._stub(entry.address).Sync(
                    self.member_state(), timeout=CALL_TIMEOUT, metadata=self._metadata()
                )
            except grpc.aio.AioRpcError:
                continue  # the detector tells whether it is down
            self.merge_state(reply)


def _report_join(task: asyncio.Task[gossip_pb2.JoinClusterReply]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.emit("internal.error", "error", op=task.get_name(), reason=repr(exc))
