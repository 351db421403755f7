"""The session table: one entry per (mountpoint, client id), epochs, takeover plans, expiry.

Theory of operation. The registry leader of a client id keeps its session here: online on
some listener, or offline and waiting for the client (persistent sessions), until it
expires. Nothing here does I/O or reads the clock; each call takes ``now_us`` (wall clock,
µs) and answers with data: a :class:`Plan` whose :meth:`Plan.steps` the server executes
(the takeover first, then :meth:`SessionTable.commit` and the other steps together;
:meth:`SessionTable.restore` undoes the commit when one of them fails).

Epochs. Every registration gets a new epoch, strictly greater than any epoch this table
ever issued — not only greater than the previous session's. A session that ended is
forgotten, and a client id that comes back must still never see an epoch a stale
connection or store write may carry, so the table keeps one counter (Lamport style:
``epoch = max(counter, previous) + 1``). The server persists a reservation above the
counter before an epoch leaves the process, so a restart continues above it.

Takeover. Registering an id that is online (or was online when the registry restarted:
``recovered``) first tells the old listener (:class:`NotifyTakeover`); the server waits,
bounded, for that listener's Disconnected with the old epoch, so the old connection has
flushed its store writes before the new one reads the queue. A Disconnected whose epoch
is not the current session's is stale (a late report from a replaced connection) and is
ignored.

Worked example: c1 registers (epoch 1, persistent), disconnects (offline, expires in
60 s), reconnects with clean_start=false at +10 s: epoch 2, session present, the queue is
opened with epoch 2 (fencing out epoch 1 writers). A late Disconnected(epoch 1) changes
nothing. If c1 stays away for 60 s, :meth:`SessionTable.due` returns it: its queue and
subscriptions are deleted and it is forgotten.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from services.common.session_key import SessionKey

NEVER = 0xFFFFFFFF  # session expiry meaning "never expires"
US = 1_000_000


@dataclass(frozen=True, slots=True)
class Policy:
    """The node's limits on session expiry and offline queues.

    ``persistent_client_expiration`` applies to MQTT 3.1/3.1.1 sessions with
    clean_session=false; ``max_session_expiry_interval`` caps what an MQTT 5 client asks for.
    Both in seconds, ``NEVER`` for no limit. ``max_offline_messages`` 0 = unlimited.

    A queue's length limit depends on whether its session is online: while it is, the
    queue holds what is in flight and buffered for it (``max_online_len`` =
    max_online_messages + the inflight window); once it is offline, what it may collect
    (``max_offline_messages``). Every Open gives the store both; the listener marks each
    append made while it holds no connection of the session, and the store applies the
    offline limit to those.
    """

    persistent_client_expiration: int = NEVER
    max_session_expiry_interval: int = NEVER
    max_offline_messages: int = 0
    max_online_len: int = 0

    @property
    def queue_limits(self) -> tuple[int, int]:
        """A queue's online and offline limits, as an Open sets them."""
        return self.max_online_len, self.max_offline_messages

    def expiry(self, proto_ver: int, requested: int) -> int:
        """The expiry the session really gets, in seconds (0 = ends with the connection)."""
        if requested == 0:
            return 0
        if proto_ver >= 5:
            return min(requested, self.max_session_expiry_interval)
        # v3/v4 with clean_session=false: the listener sends NEVER ("as configured").
        return self.persistent_client_expiration if requested == NEVER else requested


@dataclass(frozen=True, slots=True)
class Session:
    key: SessionKey
    epoch: int
    online: bool
    node: str
    listener_id: str
    session_expiry: int  # effective seconds; 0 = ends with the connection; NEVER
    proto_ver: int
    connected_us: int
    disconnected_us: int = 0
    peer: str = ""
    username: str = ""
    recovered: bool = False  # marked offline by a registry restart, not by its listener
    queued: bool = False  # has a queue in the msgstore (persistent, or resumed one)

    @property
    def persistent(self) -> bool:
        return self.session_expiry > 0

    @property
    def durable(self) -> bool:
        """Kept on disk and in the session directory. A clean session without a queue is
        neither: it cannot outlive a registry restart (listeners drop their connections
        when the registry comes back), so writing it down would buy nothing."""
        return self.queued or self.session_expiry > 0

    @property
    def expires_at_us(self) -> int | None:
        """When an offline session expires; None while online or for NEVER."""
        if self.online or self.session_expiry == NEVER:
            return None
        return self.disconnected_us + self.session_expiry * US

    def expired(self, now_us: int) -> bool:
        at = self.expires_at_us
        return at is not None and at <= now_us

    def ended(self, session_expiry: int, now_us: int) -> Session:
        """This session once its connection ended, built field by field: it runs once
        per disconnection, and ``dataclasses.replace`` stays interpreted in the compiled
        build and looks each field up by name (about 5 µs of the 67 a register and its
        disconnect cost the registrar)."""
        return Session(
            key=self.key,
            epoch=self.epoch,
            online=False,
            node=self.node,
            listener_id=self.listener_id,
            session_expiry=session_expiry,
            proto_ver=self.proto_ver,
            connected_us=self.connected_us,
            disconnected_us=now_us if self.online else self.disconnected_us,
            peer=self.peer,
            username=self.username,
            recovered=False,
            queued=self.queued,
        )


@dataclass(frozen=True, slots=True)
class Connect:
    """A Register request, as the core sees it."""

    key: SessionKey
    node: str
    listener_id: str
    clean_start: bool
    session_expiry: int
    proto_ver: int
    peer: str = ""
    username: str = ""
    max_offline_messages: int = 0  # 0 = the node's setting
    route: str = ""  # the listener process's routing name ("" = node)


# -- steps the server executes, in order --------------------------------------------


@dataclass(frozen=True, slots=True)
class NotifyTakeover:
    """Tell the old listener to close its connection; wait (bounded) for its Disconnected."""

    listener_id: str
    key: SessionKey
    old_epoch: int
    new_epoch: int
    new_node: str


@dataclass(frozen=True, slots=True)
class OpenQueue:
    key: SessionKey
    epoch: int
    clean: bool
    max_len: int  # while the session is online (0 = unlimited)
    max_offline: int = 0  # for appends made while it is offline (0 = unlimited)


@dataclass(frozen=True, slots=True)
class DeleteQueue:
    key: SessionKey
    epoch: int
    reason: str


@dataclass(frozen=True, slots=True)
class PublishSession:
    """Write the session directory record (None: delete it); maybe drop the subscriptions."""

    key: SessionKey
    session: Session | None
    drop_subs: bool
    directory: bool = True  # False: only the subscriptions (no record was ever written)


Step = NotifyTakeover | OpenQueue | DeleteQueue | PublishSession


@dataclass(frozen=True, slots=True)
class Plan:
    session: Session  # installed by commit()
    previous: Session | None
    session_present: bool
    max_len: int
    # No other node can have held the id (alone, no claimed epoch): nothing of it exists
    # outside this table.
    only_node: bool = False
    max_offline: int = 0

    @property
    def keeps_queue(self) -> bool:
        """A queue is kept for a persistent session, and for a resumed one until it ends."""
        return self.session.persistent or self.session_present

    @property
    def takeover(self) -> Session | None:
        prev = self.previous
        return prev if prev is not None and (prev.online or prev.recovered) else None

    @property
    def resumes_offline(self) -> bool:
        """Resuming a session no connection holds: its queue's Open (not clean) deletes
        no entry and fences out no live writer (the last one reported its end after its
        writes were durable), so it may complete after the answer."""
        return self.session_present and self.takeover is None

    def steps(self) -> list[Step]:
        """Takeover first (the old connection flushes), then the queue and the directory.

        Without a present session the old state is wiped: the queue is opened clean (or the
        old one deleted) and the subscriptions dropped. A clean session replacing nothing
        needs no step at all, which is what makes a plain CONNECT cheap: no subscriptions
        or queue can exist for an id the table does not hold (sessions end through
        :func:`end_steps`, and a registry restart first drops the subscriptions of every
        session it does not know).
        """
        s = self.session
        prev = self.previous
        out: list[Step] = []
        old = self.takeover
        if old is not None:
            out.append(NotifyTakeover(old.listener_id, s.key, old.epoch, s.epoch, s.node))
        if self.keeps_queue:
            clean = not self.session_present
            out.append(OpenQueue(s.key, s.epoch, clean, self.max_len, self.max_offline))
        elif prev is not None and prev.queued:
            out.append(DeleteQueue(s.key, s.epoch, "clean start"))
        if s.durable:
            # Nothing to drop for an id that never lived anywhere but in this table: no
            # subscriptions outlive the session that made them (see above).
            drop = not self.session_present and (prev is not None or not self.only_node)
            out.append(PublishSession(s.key, s, drop_subs=drop))
        elif prev is not None:
            out.append(PublishSession(s.key, None, drop_subs=True, directory=prev.durable))
        return out


def end_steps(session: Session, reason: str, drop_subs: bool = True) -> list[Step]:
    """Forgetting a session: its queue, its subscriptions and its directory record go.

    ``drop_subs`` False (the listener reported the connection never subscribed) skips the
    subscriptions of a session that is not durable; a durable one always drops them.
    """
    out: list[Step] = []
    if session.queued:
        out.append(DeleteQueue(session.key, session.epoch, reason))
    if session.durable:
        out.append(PublishSession(session.key, None, drop_subs=True))
    elif drop_subs:
        out.append(PublishSession(session.key, None, drop_subs=True, directory=False))
    return out


class SessionTable:
    """Sessions by key, the epoch counter, and a heap of expiry deadlines."""

    def __init__(self, policy: Policy, epoch: int = 0) -> None:
        self.policy = policy
        self.epoch = epoch  # the highest epoch issued
        self.online = 0  # sessions online now (a gauge)
        self._sessions: dict[SessionKey, Session] = {}
        # (deadline_us, key, epoch); entries may be stale, checked when popped
        self._deadlines: list[tuple[int, SessionKey, int]] = []

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(self._sessions.values())

    def get(self, key: SessionKey) -> Session | None:
        return self._sessions.get(key)

    def _put(self, session: Session) -> None:
        old = self._sessions.get(session.key)
        self.online += int(session.online) - int(old is not None and old.online)
        self._sessions[session.key] = session
        at = session.expires_at_us
        if at is not None:
            heapq.heappush(self._deadlines, (at, session.key, session.epoch))

    def load(self, sessions: Iterable[Session], now_us: int) -> list[Session]:
        """Rebuild after a restart; sessions recorded online become offline (``recovered``).

        Their listeners died with the node, or live on and are told of any takeover.
        Returns the recovered sessions, whose directory records must be updated.
        """
        recovered = []
        for s in sessions:
            if s.online:
                s = replace(s, online=False, recovered=True, disconnected_us=now_us)
                recovered.append(s)
            self.raise_epoch(s.epoch)
            self._put(s)
        return recovered

    def raise_epoch(self, floor: int) -> None:
        """Never issue an epoch at or below ``floor`` (seen in storage or another service)."""
        self.epoch = max(self.epoch, floor)

    def plan_register(
        self, c: Connect, now_us: int, epoch: int = 0, only_node: bool = True
    ) -> Plan:
        """Decide a registration; advances the epoch counter, changes no session yet.

        ``epoch``: the one the cluster's directory gave this registration (0: alone, take
        the next). It is above every epoch this table had issued when the claim began,
        and the id's lock kept its session from changing since. ``only_node``: this node
        has no other member (a minority side registering during a netsplit has some)."""
        prev = self._sessions.get(c.key)
        resumable = prev is not None and prev.persistent and not prev.expired(now_us)
        present = resumable and not c.clean_start
        only_node = only_node and not epoch
        if epoch:
            if prev is not None and epoch <= prev.epoch:
                raise ValueError(f"epoch {epoch} is not above the session's {prev.epoch}")
            self.epoch = max(self.epoch, epoch)
        else:
            self.epoch = max(self.epoch, prev.epoch if prev else 0) + 1
            epoch = self.epoch
        expiry = self.policy.expiry(c.proto_ver, c.session_expiry)
        session = Session(
            key=c.key,
            epoch=epoch,
            online=True,
            node=c.node,
            listener_id=c.listener_id,
            session_expiry=expiry,
            proto_ver=c.proto_ver,
            connected_us=now_us,
            peer=c.peer,
            username=c.username,
            queued=expiry > 0 or present,
        )
        max_offline = c.max_offline_messages or self.policy.max_offline_messages
        return Plan(session, prev, present, self.policy.max_online_len, only_node, max_offline)

    def demote(self, key: SessionKey) -> None:
        """The session here is stale (another node owned the id since): it is never resumed;
        a registration still closes its connection and deletes its queue."""
        s = self._sessions.get(key)
        if s is not None:
            self._put(replace(s, session_expiry=0))

    def adopt(self, session: Session) -> None:
        """Install a session handed over by another node (offline, just before the
        registration that resumes it)."""
        self.raise_epoch(session.epoch)
        self._put(session)

    def commit(self, plan: Plan) -> bool:
        """Install a registration whose steps succeeded, unless a newer epoch got in first."""
        current = self._sessions.get(plan.session.key)
        if current is not None and current.epoch > plan.session.epoch:
            return False
        self._put(plan.session)
        return True

    def restore(self, key: SessionKey, epoch: int, previous: Session | None) -> bool:
        """Undo the commit of the registration of ``epoch``, whose writes failed: the
        session the table held before it (``previous``; None: none) is back. The epoch
        counter stays where it is: ``epoch`` is never issued again. False when ``epoch``
        is no longer the current session (nothing to undo)."""
        current = self._sessions.get(key)
        if current is None or current.epoch != epoch:
            return False
        if previous is None:
            self.online -= int(current.online)
            del self._sessions[key]
        else:
            self._put(previous)
        return True

    def disconnected(
        self, key: SessionKey, epoch: int, session_expiry: int | None, now_us: int
    ) -> Session | None:
        """The connection of ``epoch`` ended; None when that is not the current session.

        ``session_expiry`` (the listener's encoding, as in Register) updates an MQTT 5
        session's expiry; it cannot turn an ending session (0) into a persistent one
        [MQTT-3.14.2-2]. MQTT 3 sessions keep theirs. The caller ends the returned session
        when it is not persistent.
        """
        s = self._sessions.get(key)
        if s is None or s.epoch != epoch:
            return None
        expiry = s.session_expiry
        if session_expiry is not None and s.proto_ver >= 5 and expiry != 0:
            expiry = self.policy.expiry(s.proto_ver, session_expiry)
        updated = s.ended(expiry, now_us)
        self._put(updated)
        return updated

    def due(self, now_us: int, limit: int) -> list[Session]:
        """Up to ``limit`` offline sessions whose expiry passed (ended ones are due at once)."""
        out: dict[SessionKey, Session] = {}
        heap = self._deadlines
        while heap and heap[0][0] <= now_us and len(out) < limit:
            _, key, epoch = heapq.heappop(heap)
            s = self._sessions.get(key)
            if s is not None and s.epoch == epoch and s.expired(now_us):
                out[key] = s
        return list(out.values())

    def retry_at(self, session: Session, at_us: int) -> None:
        """Check an expired session again at ``at_us`` (its cleanup failed)."""
        heapq.heappush(self._deadlines, (at_us, session.key, session.epoch))

    def forget(self, key: SessionKey, epoch: int) -> bool:
        """Remove the session of ``epoch``; False when another epoch replaced it meanwhile."""
        s = self._sessions.get(key)
        if s is None or s.epoch != epoch:
            return False
        self.online -= int(s.online)
        del self._sessions[key]
        return True

    def find(self, client_id: str = "", limit: int = 0) -> list[Session]:
        """Sessions sorted by key, only ``client_id``'s when given; ``limit`` 0 = all."""
        found = sorted(
            (s for s in self._sessions.values() if not client_id or s.key[1] == client_id),
            key=lambda s: s.key,
        )
        return found[:limit] if limit else found
