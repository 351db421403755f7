"""Moving a session from the node that owned it to the node its client reconnected to.

Theory of operation. The new owner ``B`` has already won the client id's register (a
Claim at a new epoch ``e``); the old owner ``A`` still holds the session: maybe a live
connection, maybe an offline persistent session with a queue. Then:

1. ``B`` asks ``A`` to **TAKE** it (epoch ``e``). ``A`` closes the connection as a local
   takeover would (0x8E, or a close for 3.1.1, once its acks and marks are durable; its
   listener points the id's routes at ``B`` from then on), reads the queue's live
   entries, and forgets the session. A clean start (``discard``) deletes the queue at
   once. A request below the epoch ``A`` holds is refused: a stale new owner.
2. ``B`` opens its own queue at ``e`` and appends the entries in their order (with the
   QoS 2 packet ids still awaiting PUBREL), durably.
3. ``B`` asks ``A`` to **RELEASE** it: ``A`` hands over what reached its queue after the
   TAKE's read (copies routed before the subscriptions moved), then deletes its queue.
   Only then is there one copy, at ``B``; the session there is offline and
   ``session_present`` for the client that resumes it.

A crash of ``A`` between 1 and 3 leaves its queue with no session record, which its
restart sweeps: the entries ``B`` holds survive, the tail does not. A crash of ``B``
before 2 completes fails the CONNECT; the client's next CONNECT claims a newer epoch
and asks ``A`` again, which still has the queue (its TAKE is repeatable until RELEASE).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from services.common import log
from services.common.session_key import SessionKey
from services.pb import msgstore_pb2, quorum_pb2
from services.registry.backends import BackendError
from services.registry.cluster import codec
from services.registry.epoch_marks import EpochMarks
from services.registry.records import moved_command
from services.registry.sessions import US, DeleteQueue, NotifyTakeover, OpenQueue, Session

if TYPE_CHECKING:
    from services.registry.registrar import Registrar


CLAIMED_MAX = 100_000  # ids whose winning claim here is remembered


@dataclass(slots=True)
class _Given:
    """A session this node handed over (TAKE done, RELEASE not yet)."""

    epoch: int  # the queue's epoch here
    session: Session
    last_seq: int
    unconfirmed: bool = False  # the connection's end was not confirmed (``Takeovers.run``)


@dataclass(slots=True)
class Taken:
    """What the new owner received."""

    present: bool = False
    persistent: bool = False
    session_expiry: int = 0
    proto_ver: int = 4
    entries: list[msgstore_pb2.QueueEntry] = field(default_factory=list)
    inbound_qos2: list[int] = field(default_factory=list)
    last_seq: int = 0
    delivered_upto: int = 0  # in the old queue's seqs, as ``outbound_pubrel``
    outbound_pubrel: list[int] = field(default_factory=list)
    unconfirmed: bool = False  # the old connection may have sent what no mark records


class Giver:
    """The old owner's side: answers TAKE and RELEASE."""

    def __init__(self, registrar: Registrar) -> None:
        self.registrar = registrar
        self._given: dict[SessionKey, _Given] = {}
        # The newest epoch this node's own claims won per id (bounded, oldest first):
        # a TAKE below it comes from a claim that lost to this node's, and must not
        # carry off the session this node's registration is about to resume.
        self._claimed = EpochMarks(CLAIMED_MAX)
        # Sessions this node's own claims are moving here (``Claims._move_queue``): id ->
        # (the claim's epoch, set once the move has ended).
        self._moving: dict[SessionKey, tuple[int, asyncio.Event]] = {}

    def claimed(self, key: SessionKey, epoch: int) -> None:
        self._claimed.raise_to(key, epoch)

    @contextlib.contextmanager
    def moving(self, key: SessionKey, epoch: int) -> Iterator[None]:
        """A claim of this node at ``epoch`` is moving ``key``'s session here: its queue
        is copied, and the move recorded in the register, before the table holds the
        session. A newer claim's TAKE that arrived in between found nothing here and
        started the session afresh, while the messages sat in this node's copy (the S4
        race test's refusals: a later CONNECT then read this copy at an older epoch and
        was refused). Such a TAKE now waits for the move to end (``handle``)."""
        done = asyncio.Event()
        self._moving[key] = (epoch, done)
        try:
            yield
        finally:
            del self._moving[key]  # one move of an id at a time: it runs under its claim lock
            done.set()

    async def handle(self, req: quorum_pb2.HandoverRequest) -> quorum_pb2.HandoverReply:
        key = codec.key_of(req.key)
        r = self.registrar
        moving = self._moving.get(key)
        take = req.phase != quorum_pb2.HANDOVER_RELEASE
        if take and moving is not None and moving[0] < req.epoch:
            # Waited for outside the id's lock, which the move does not take: a move
            # waits on nothing but the store, the register and the old owner's RELEASE.
            await moving[1].wait()
        async with r.locks.hold(key):
            try:
                if req.phase == quorum_pb2.HANDOVER_RELEASE:
                    return await self._release(key, req)
                return await self._take(key, req)
            except BackendError as exc:
                return quorum_pb2.HandoverReply(error=str(exc))

    async def _take(
        self, key: SessionKey, req: quorum_pb2.HandoverRequest
    ) -> quorum_pb2.HandoverReply:
        r = self.registrar
        mine = self._claimed.get(key)
        if mine > req.epoch:
            return quorum_pb2.HandoverReply(error=f"claimed here at epoch {mine}")
        r.fence(key, req.epoch)
        given = self._given.get(key)
        s = r.table.get(key)
        if s is not None and s.epoch >= req.epoch:
            return quorum_pb2.HandoverReply(error=f"epoch {s.epoch} here is not older")
        if s is None and given is None:
            return quorum_pb2.HandoverReply(present=False)
        if s is not None:
            confirmed = True
            if s.online or s.recovered:
                step = NotifyTakeover(s.listener_id, key, s.epoch, req.epoch, req.node)
                confirmed = await r.takeovers.run(step, s)
                now = r.table.get(key)
                if now is not None and now.epoch != s.epoch:
                    # Replaced while the old connection was asked to go: this node's own
                    # claim holds the claim lock, not this one, and may have adopted the
                    # session meanwhile (a failover). The request is judged again against
                    # what is here now; taking the table's session as the one asked for
                    # forgot that adopted one (a fault run: session_present = 0).
                    return await self._take(key, req)
                s = now or s
            r.table.forget(key, s.epoch)
            await r.committer.sync(key)
            given = _Given(s.epoch, s, 0, not confirmed)
            self._given[key] = given
            log.emit(
                "session.handover",
                client_id=key[1],
                mountpoint=key[0],
                old_node=r.settings.node,
                new_node=req.node,
                epoch=req.epoch,
            )
        assert given is not None
        s = given.session
        reply = quorum_pb2.HandoverReply(
            present=True,
            persistent=s.persistent,
            session_expiry=min(s.session_expiry, 0xFFFFFFFF),
            proto_ver=s.proto_ver,
            unconfirmed=given.unconfirmed,
        )
        if not s.queued or req.keep_queue:
            # keep_queue: a replicated queue, of which this node holds a replica.
            del self._given[key]
            return reply
        if req.discard or not s.persistent:
            del self._given[key]  # given up whether or not the store deletes the queue
            await r.queues.delete(DeleteQueue(key, req.epoch, "taken over"))
            return reply
        try:
            entries, state = await r.backends.read_queue(key, given.epoch, 0)
        except BackendError as exc:
            # The queue is at a newer epoch than the session here, yet older than the
            # claim: this node claimed the id itself, adopted the session's queue at that
            # epoch, and then refused the CONNECT (another claim overtook it). The queue
            # is the session's all the same; read it at its own epoch.
            if not given.epoch < exc.store_epoch < req.epoch:
                raise
            given.epoch = exc.store_epoch
            entries, state = await r.backends.read_queue(key, given.epoch, 0)
        reply.entries.extend(entries)
        reply.inbound_qos2.extend(state.inbound_qos2)
        reply.outbound_pubrel.extend(state.outbound_pubrel)
        given.last_seq = entries[-1].seq if entries else state.last_seq
        reply.delivered_upto = given.last_seq if given.unconfirmed else state.delivered_upto
        reply.last_seq = given.last_seq
        return reply

    async def reclaim(self, key: SessionKey) -> Session | None:
        """Take back a persistent session this node handed over (TAKE) that its taker
        never released: that claim failed after the TAKE (its relocation lost to a newer
        claim, or its CONNECT refused), so the queue, whole, is still here and nowhere
        else. Installed in the table offline at the queue's epoch, for the registration
        under way here to resume; None when nothing was given, or the table holds a
        session of the id again."""
        r = self.registrar
        async with r.locks.hold(key):
            given = self._given.get(key)
            if given is None or r.table.get(key) is not None:
                return None
            del self._given[key]
            if given.unconfirmed:  # as a local takeover would: every entry counts as sent
                await r.all_delivered(key, given.epoch)
            s = given.session
            taken = Taken(True, True, s.session_expiry, s.proto_ver)
            back = adopted(key, r.settings.node, given.epoch, taken, r.clock())
            r.table.adopt(back)
            log.emit(
                "session.reclaimed",
                "info",
                client_id=key[1],
                mountpoint=key[0],
                epoch=given.epoch,
                last_seq=given.last_seq,
            )
            return back

    async def merge(self, req: quorum_pb2.MergeRequest) -> quorum_pb2.MergeReply:
        """The owner's side of a merge: the lost copy's entries go after what the
        session's queue holds, at its current epoch. A session that is online sees them
        when it next resumes (the registry cannot hand a message to a connection)."""
        key = codec.key_of(req.key)
        r = self.registrar
        async with r.locks.hold(key):
            s = r.table.get(key)
            if s is None or not s.queued:
                return quorum_pb2.MergeReply(error="no queue for this session here")
            try:
                await r.backends.append_entries(key, s.epoch, list(req.entries))
            except BackendError as exc:
                return quorum_pb2.MergeReply(error=str(exc))
        log.emit(
            "session.merged",
            client_id=key[1],
            mountpoint=key[0],
            from_node=req.node,
            messages=len(req.entries),
        )
        return quorum_pb2.MergeReply(merged=len(req.entries))

    async def _release(
        self, key: SessionKey, req: quorum_pb2.HandoverRequest
    ) -> quorum_pb2.HandoverReply:
        r = self.registrar
        given = self._given.pop(key, None)
        if given is None:
            return quorum_pb2.HandoverReply(present=False)
        # From now on this node's listeners send the session's copies to its new node;
        # what reached the queue before that goes in the tail.
        r.hub.broadcast(moved_command(key, req.route or req.node))
        if req.keep_queue:
            return quorum_pb2.HandoverReply(present=True, persistent=True)
        entries, _ = await r.backends.read_queue(key, given.epoch, req.after_seq)
        await r.queues.delete(DeleteQueue(key, req.epoch, "taken over"))
        reply = quorum_pb2.HandoverReply(present=True, persistent=True)
        reply.entries.extend(entries)
        return reply


def adopted(key: SessionKey, node: str, epoch: int, taken: Taken, now_us: int) -> Session:
    """The session ``taken`` as this node's table holds it, offline, just before the
    registration that resumes it (``epoch`` is below the registration's)."""
    return Session(
        key=key,
        epoch=epoch,
        online=False,
        node=node,
        listener_id="",
        session_expiry=taken.session_expiry,
        proto_ver=taken.proto_ver,
        connected_us=now_us - US,
        disconnected_us=now_us,
        queued=True,
    )


def open_step(key: SessionKey, epoch: int) -> OpenQueue:
    return OpenQueue(key, epoch, clean=True, max_len=0)
