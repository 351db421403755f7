"""Metadata replication between nodes: broadcast of local writes, and anti-entropy.

Theory of operation
-------------------
Subscriptions, retained messages and the session directory are DVV records
(``store``); replicas converge by exchanging whole record states, which every receiver
merges with ``dvv.sync`` through the committer (durable before visible, like a local
write). Two paths carry them:

* **Broadcast.** After each commit, the records that *local* writes changed go to every
  member that is up, on the cluster links (``Envelope.meta``). Records merged from a
  peer are not sent on: the writer reached every member it saw up.
* **Anti-entropy.** Every :data:`INTERVAL` (and at once when a peer comes up) this node
  sends a random up peer its bucket digest (``replication.digest``); the peer answers
  with its records of every bucket that differs, and this node pushes its own records of
  those buckets back. A broadcast lost to a full link, a node that was down or new, a
  healed partition: all are repaired by the next rounds, with no manual step.

Both directions are bounded (:data:`MAX_BATCH_BYTES` a reply or push, the rest waits
for the next round), and merges waiting for the committer are capped
(:data:`MAX_PENDING_MERGES`; past it a broadcast is dropped and counted, anti-entropy
brings it back).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Iterable

import grpc

from services.common import log
from services.common.background import report_crash
from services.gossip import codec
from services.gossip.cluster.node import ClusterNode
from services.gossip.committer import CommitError, Committer, ShuttingDown
from services.gossip.engines.base import WriteBatch
from services.gossip.replication.digest import Digest, differing
from services.gossip.store import MetaStore, Record, Txn
from services.pb import cluster_pb2

INTERVAL = 1.0  # s between anti-entropy rounds (jittered)
CALL_TIMEOUT = 5.0
MAX_BATCH_BYTES = 1 << 20  # per Exchange reply, Push or broadcast envelope
MAX_PENDING_MERGES = 64


class Replicator:
    def __init__(
        self,
        store: MetaStore,
        committer: Committer,
        cluster: ClusterNode,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.committer = committer
        self.cluster = cluster
        self.rng = rng or random.Random()
        self.digest = Digest()
        for prefix in store.resolvers:
            for rec in store.records(prefix):
                self.digest.put((rec.prefix, rec.key), _encode(rec))
        self._pending = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._due: list[str] = []  # peers that came up: exchange with them first
        # counters for the service's details
        self.sent = 0
        self.merged = 0
        self.dropped = 0
        self.bad = 0
        self.rounds = 0

    # -- wiring ------------------------------------------------------------------------
    def start(self) -> None:
        self.cluster.on_meta = self.receive
        self.cluster.on_peer_up = self.peer_up
        self._loop_task = asyncio.create_task(self._rounds(), name="meta-anti-entropy")
        self._loop_task.add_done_callback(report_crash)

    async def stop(self) -> None:
        tasks = [t for t in (self._loop_task, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def details(self) -> dict[str, int]:
        return {
            "records": len(self.digest),
            "broadcast": self.sent,
            "merged": self.merged,
            "dropped": self.dropped,
            "bad_records": self.bad,
            "rounds": self.rounds,
        }

    # -- after each commit (committer.on_durable) ---------------------------------------
    def on_durable(self, txn: Txn, batch: WriteBatch) -> None:
        # write_batch encodes txn.writes() in order, so the two line up
        for rec, (_ek, encoded) in zip(txn.writes(), batch.puts, strict=True):
            self.digest.put((rec.prefix, rec.key), encoded)
        for key in txn.removals():
            self.digest.remove(key)
        local = txn.local_writes()
        if local:
            for chunk in _chunks(_encode(r) for r in local):
                self.sent += len(chunk)
                self.cluster.broadcast(
                    cluster_pb2.Envelope(meta=cluster_pb2.MetaBatch(records=chunk))
                )

    # -- incoming ----------------------------------------------------------------------
    def receive(self, batch: cluster_pb2.MetaBatch) -> None:
        """A peer's broadcast: merge it in the background (bounded)."""
        if self._pending >= MAX_PENDING_MERGES:
            self.dropped += len(batch.records)
            return
        task = asyncio.create_task(self._merge_broadcast(batch.records), name="meta-merge")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(report_crash)

    async def _merge_broadcast(self, raw: Iterable[bytes]) -> None:
        await self.merge(raw)

    async def merge(self, raw: Iterable[bytes]) -> int:
        """Decode and merge records; undecodable or unknown ones are counted and skipped."""
        records = []
        for data in raw:
            try:
                prefix, key, clock = codec.decode_record(data)
            except codec.CodecError:
                self.bad += 1
                continue
            if prefix not in self.store.resolvers:
                self.bad += 1
                continue
            records.append(Record(prefix, key, clock))
        if not records:
            return 0
        self._pending += 1
        try:
            await self.committer.submit(lambda txn: txn.merge_remote(records))
        except ShuttingDown:
            return 0  # stopping: anti-entropy brings these back after the restart
        except CommitError as exc:
            log.emit("store.error", "error", op="merge", reason=str(exc))
            return 0
        finally:
            self._pending -= 1
        self.merged += len(records)
        return len(records)

    def exchange(self, request: cluster_pb2.Digest) -> cluster_pb2.ExchangeReply:
        """First half of a peer's anti-entropy round: our records where digests differ."""
        buckets = differing(self.digest.buckets, list(request.buckets))
        records, truncated = self._records_in(buckets)
        return cluster_pb2.ExchangeReply(
            buckets=buckets, batch=cluster_pb2.MetaBatch(records=records), truncated=truncated
        )

    async def push(self, batch: cluster_pb2.MetaBatch) -> cluster_pb2.PushReply:
        return cluster_pb2.PushReply(merged=await self.merge(batch.records))

    # -- our rounds --------------------------------------------------------------------
    def peer_up(self, node: str) -> None:
        self._due.append(node)
        self._wake.set()

    async def _rounds(self) -> None:
        while True:
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), INTERVAL * self.rng.uniform(0.75, 1.25))
            up = sorted(self.cluster.view.up - {self.cluster.node})
            due = [n for n in self._due if n in up]
            self._due.clear()
            peers = due or ([self.rng.choice(up)] if up else [])
            for peer in peers:
                await self._round(peer)

    async def _round(self, peer: str) -> None:
        stub = self.cluster.stub_for(peer)
        if stub is None:
            return
        self.rounds += 1
        meta = self.cluster.metadata()
        digest = cluster_pb2.Digest(buckets=self.digest.buckets)
        try:
            reply = await stub.Exchange(digest, timeout=CALL_TIMEOUT, metadata=meta)
            if not reply.buckets:
                return
            await self.merge(reply.batch.records)
            records, _ = self._records_in(list(reply.buckets))
            if records:
                await stub.Push(
                    cluster_pb2.MetaBatch(records=records), timeout=CALL_TIMEOUT, metadata=meta
                )
        except grpc.aio.AioRpcError:
            return  # the detector tells whether the peer is down; the next round retries

    def _records_in(self, buckets: list[int]) -> tuple[list[bytes], bool]:
        out: list[bytes] = []
        size = 0
        for prefix, key in self.digest.keys_in(buckets):
            rec = self.store.record(prefix, key)
            if rec is None:
                continue
            data = _encode(rec)
            if out and size + len(data) > MAX_BATCH_BYTES:
                return out, True
            out.append(data)
            size += len(data)
        return out, False


def _encode(rec: Record) -> bytes:
    return codec.encode_record(rec.prefix, rec.key, rec.clock)


def _chunks(encoded: Iterable[bytes]) -> Iterable[list[bytes]]:
    chunk: list[bytes] = []
    size = 0
    for data in encoded:
        if chunk and size + len(data) > MAX_BATCH_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(data)
        size += len(data)
    if chunk:
        yield chunk
