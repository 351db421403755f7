"""This node's acceptor with its slots on disk: persisted, then answered.

Why a store of its own (``DATA_DIR/quorum``, an LMDB engine like the table's): the acceptor's
rule is that a promise or an accept reaches the disk before the proposer hears of it
(:mod:`services.registry.quorum.acceptor`), whatever ``msgstore.fsync`` says about
queues. A vote taken back after a crash can let two proposers both win.

Group commit: requests that arrive while a commit is on the disk wait and go together
in the next one (one transaction and one fsync for all of them), so an idle acceptor
answers after one fsync and a busy one does not pay one per request. The steps of one
batch are applied in memory in arrival order, and every reply of the batch leaves only
after its transaction committed.

The incarnation. Each start takes ``max(stored + 1, wall clock in µs)`` and writes it
before the first vote: a restart is a new incarnation (the proposer's ballots never
repeat), and so is a start on a wiped directory, as long as the clock did not go back
by more than the node's downtime.
"""

from __future__ import annotations

import asyncio
import time

from services.common.session_key import SessionKey
from services.pb import quorum_pb2
from services.registry.cluster import codec
from services.registry.engines.base import Engine, StoreError
from services.registry.leadership import key_bytes
from services.registry.quorum.acceptor import Acceptor, Slot
from services.registry.quorum.messages import Ballot, Reply, Request
from services.registry.quorum.register import Entry

_META = b"\x00incarnation"
_CATCHING_UP = b"\x00catching_up"


def _key_of(raw: bytes) -> SessionKey:
    mountpoint, _, client_id = raw.decode().partition("\0")
    return (mountpoint, client_id)


class AcceptorStore:
    """The slots on disk, the incarnation, and the acceptor built from them."""

    def __init__(self, engine: Engine, node: str) -> None:
        self.engine = engine
        slots: dict[SessionKey, Slot] = {}
        stored = 0
        catching_up = False
        for raw, value in engine.items():
            if raw == _META:
                stored = int(value.decode())
            elif raw == _CATCHING_UP:
                catching_up = True
            else:
                slots[_key_of(raw)] = codec.slot_of(quorum_pb2.Slot.FromString(value))
        # No store yet: a new node, or one that lost its disk and with it the votes it
        # cast. The two look alike, so both catch up before voting (see ``catchup``).
        catching_up = catching_up or stored == 0
        self.incarnation = max(stored + 1, time.time_ns() // 1000)
        changes: list[tuple[bytes, bytes | None]] = [(_META, str(self.incarnation).encode())]
        if catching_up:
            changes.append((_CATCHING_UP, b"1"))
        engine.write(changes)
        self.acceptor = Acceptor(node, self.incarnation, slots, catching_up=catching_up)
        self.highest_counter = max(
            (max(s.promised.counter, s.accepted.counter) for s in slots.values()), default=0
        )

    def write(self, slots: list[tuple[SessionKey, Slot]]) -> None:
        if slots:
            self.engine.write(
                [(key_bytes(key), codec.slot_pb(slot).SerializeToString()) for key, slot in slots]
            )

    def caught_up(self) -> None:
        """Vote from now on, and after any restart."""
        self.engine.write([(_CATCHING_UP, None)])
        self.acceptor.finish_catch_up()

    def close(self) -> None:
        self.engine.close()


class AcceptorShell:
    """Runs requests through the acceptor, one group commit per batch."""

    def __init__(self, store: AcceptorStore) -> None:
        self.store = store
        self._waiting: list[tuple[Request, asyncio.Future[Reply | None]]] = []
        self._committing = False
        # A failed write leaves votes in memory that are not on disk: from then on the
        # acceptor answers nothing (its node counts as down) until a restart reloads it.
        self.broken: StoreError | None = None

    @property
    def incarnation(self) -> int:
        return self.store.incarnation

    async def seed(self, items: list[tuple[SessionKey, Ballot, Entry | None]]) -> None:
        """Catch-up: store values committed without this acceptor, durably."""
        ready = self.store.acceptor.seed(items)
        await asyncio.to_thread(self.store.write, list(ready.persist))

    async def finish(self) -> None:
        await asyncio.to_thread(self.store.caught_up)

    async def step(self, request: Request) -> Reply | None:
        if self.broken is not None:
            raise self.broken
        done: asyncio.Future[Reply | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, done))
        if not self._committing:
            self._committing = True
            asyncio.get_running_loop().create_task(self._commit())
        return await done

    async def _commit(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                persist: list[tuple[SessionKey, Slot]] = []
                replies: list[Reply | None] = []
                for request, _ in batch:
                    ready = self.store.acceptor.step(request)
                    persist.extend(ready.persist)
                    replies.append(ready.reply)
                try:
                    await asyncio.to_thread(self.store.write, persist)
                except StoreError as exc:
                    self.broken = exc
                    for _, done in (*batch, *self._waiting):
                        if not done.done():
                            done.set_exception(exc)
                    self._waiting = []
                    return
                for (_, done), reply in zip(batch, replies, strict=True):
                    if not done.done():
                        done.set_result(reply)
        finally:
            self._committing = False
