"""The proposer's shell: runs CASPaxos rounds over the members, batched, with retries.

A change for a key waits for the next round; a round starts at once when fewer than
:data:`MAX_ROUNDS` are in flight, so an idle node pays one round and a busy one carries
many keys per round ("send now if idle, gather while busy"). A round is one ballot, one
Prepare and one Accept per member (:mod:`services.registry.quorum.proposer`). This
node's own acceptor is called in-process; the others by gRPC with the cookie proof.

A round that is preempted or that hears no majority within ``round_timeout`` fails its
keys; :meth:`QuorumClient.change` retries with a short randomised backoff until its
``deadline`` and returns the last outcome. A failed outcome means *unknown*: the change
may still take effect later (the register's changes are written for that).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterable

import grpc

from services.common import log
from services.common.background import Background
from services.common.session_key import SessionKey
from services.registry.cluster import codec
from services.registry.cluster.acceptor_store import AcceptorShell
from services.registry.cluster.peers import Peers
from services.registry.engines.base import StoreError
from services.registry.quorum.messages import Ballot, Prepare, Reply, Send
from services.registry.quorum.proposer import Committed, Failed, Outcome, Output, Proposer
from services.registry.quorum.register import Change

MAX_ROUNDS = 2  # rounds in flight at once
BACKOFF_MAX = 0.2  # s, the longest wait before a retry


class QuorumClient:
    def __init__(
        self,
        node: str,
        acceptor: AcceptorShell,
        peers: Peers,
        members: Callable[[], Iterable[str]],
        round_timeout: float,
        deadline: float,
    ) -> None:
        self.node = node
        self.acceptor = acceptor
        self.peers = peers
        self.members = members
        self.round_timeout = round_timeout
        self.deadline = deadline
        self.proposer = Proposer(node, acceptor.incarnation, acceptor.store.highest_counter)
        self._queued: dict[SessionKey, list[tuple[Change, asyncio.Future[Outcome]]]] = {}
        self._waiting: dict[SessionKey, asyncio.Future[Outcome]] = {}
        self._rounds: dict[Ballot, asyncio.Task[None]] = {}
        self._tasks = Background()
        self.rounds = 0  # started, for details() and tests

    async def change(self, key: SessionKey, change: Change) -> Outcome:
        """Apply ``change`` to ``key``'s register: Committed, or the last Failed."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.deadline
        attempt = 0
        while True:
            done: asyncio.Future[Outcome] = loop.create_future()
            self._queued.setdefault(key, []).append((change, done))
            self._start_rounds()
            outcome = await done
            if isinstance(outcome, Committed) or loop.time() >= until:
                return outcome
            attempt += 1
            await asyncio.sleep(random.uniform(0, min(BACKOFF_MAX, 0.002 * 2**attempt)))

    def _start_rounds(self) -> None:
        while self._queued and len(self._rounds) < MAX_ROUNDS:
            changes: dict[SessionKey, Change] = {}
            for key in list(self._queued):
                if key in self._waiting:
                    continue  # its previous change is still in a round
                waiters = self._queued[key]
                change, done = waiters.pop(0)
                if not waiters:
                    del self._queued[key]
                changes[key] = change
                self._waiting[key] = done
            if not changes:
                return
            members = sorted(set(self.members()) | {self.node})
            ballot, out = self.proposer.propose(changes, members)
            self.rounds += 1
            self._rounds[ballot] = self._tasks.spawn(self._expire(ballot), "quorum-round")
            self._handle(out)

    async def _expire(self, ballot: Ballot) -> None:
        await asyncio.sleep(self.round_timeout)
        self._rounds.pop(ballot, None)
        self._handle(self.proposer.abandon(ballot))

    def _handle(self, out: Output) -> None:
        for send in out.sends:
            self._tasks.spawn(self._deliver(send), "quorum-send")
        for outcome in out.outcomes:
            done = self._waiting.pop(outcome.key, None)
            if done is not None and not done.done():
                done.set_result(outcome)
            self._round_over(outcome)
        if out.outcomes:
            self._start_rounds()

    def _round_over(self, outcome: Outcome) -> None:
        """Stop a round's timer once none of its keys is left in flight."""
        ballot = outcome.ballot
        if ballot in self._rounds and ballot not in self.proposer.in_flight().values():
            self._rounds.pop(ballot).cancel()

    async def _deliver(self, send: Send) -> None:
        try:
            reply = await self._call(send)
        except grpc.aio.AioRpcError as exc:
            log.emit(
                "rpc.failed",
                "debug",
                target=f"registry@{send.to}",
                method=type(send.message).__name__,
                code=exc.code().name,
                reason=exc.details() or "",
            )
            return
        except StoreError as exc:
            log.emit("store.error", "error", op="registry.acceptor", reason=str(exc))
            return
        if reply is not None:
            self._handle(self.proposer.step(reply))

    async def _call(self, send: Send) -> Reply | None:
        msg = send.message
        if send.to == self.node:
            return await self.acceptor.step(msg)
        stub = self.peers.stub(send.to)
        if stub is None:
            return None  # its registry is not known yet: as if it did not answer
        md = self.peers.metadata()
        if isinstance(msg, Prepare):
            pb = await stub.Prepare(codec.prepare_pb(msg), timeout=self.round_timeout, metadata=md)
            return codec.prepare_reply_of(pb)
        apb = await stub.Accept(codec.accept_pb(msg), timeout=self.round_timeout, metadata=md)
        return codec.accept_reply_of(apb)

    def details(self) -> dict[str, object]:
        return {
            "incarnation": self.acceptor.incarnation,
            "rounds": self.rounds,
            "in_flight": len(self.proposer.in_flight()),
        }

    async def close(self) -> None:
        await self._tasks.close()
        for done in self._waiting.values():
            if not done.done():
                done.cancel()


__all__ = ["Committed", "Failed", "QuorumClient"]
