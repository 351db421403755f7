"""Replicated queues in the store (``services.msgstore.replicated``): positions kept with
the entries, a copy taking the primary's appends, a failover's fence, on the in-memory
engine and LMDB alike. The pure core's rules are tested in test_msgstore_replication;
here the stored copy must follow them and survive a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.common.session_key import SessionKey
from services.msgstore.cluster.replicator import probe
from services.msgstore.cluster.servicer import ReplicaServicer
from services.msgstore.engines.base import Engine
from services.msgstore.engines.lmdb_engine import LmdbEngine
from services.msgstore.engines.memory import MemoryEngine
from services.msgstore.model import (
    Ack,
    Append,
    AppendStatus,
    BatchResult,
    DeleteQueue,
    FenceQueue,
    OpenQueue,
    QueueState,
    ReplicaState,
    ReplicaWrite,
    WriteBatch,
)
from services.msgstore.queue import DBS, QueueStore
from services.msgstore.replica_reads import read_copy, read_entries, replicated_here
from services.msgstore.replication.log import Appended, Refused
from services.msgstore.replication.primary import Primary
from services.pb import common_pb2, msgstore_pb2

C1: SessionKey = ("", "c1")


class Node:
    def __init__(self, name: str, kind: str, path: Path) -> None:
        self.name = name
        self.kind = kind
        self.path = path / name
        self.engine = self._engine()
        self.store = QueueStore(self.engine)

    def _engine(self) -> Engine:
        if self.kind == "memory":
            return MemoryEngine(DBS)
        return LmdbEngine(self.path, DBS, 64 * 1024 * 1024, ordered_sync=False)

    def restart(self) -> None:
        if self.kind == "lmdb":
            self.engine.close()
            self.engine = self._engine()
        self.store = QueueStore(self.engine)

    def open(self, epoch: int, replicas: tuple[str, ...], **kw: bool) -> QueueState:
        (state,) = self.store.write_group([OpenQueue(C1, epoch, True, replicas=replicas, **kw)])
        assert isinstance(state, QueueState) and not state.error, state
        return state

    def append(self, *payloads: bytes) -> list[int]:
        (res,) = self.store.write_group([WriteBatch(1, tuple(Append(C1, 0, p) for p in payloads))])
        assert isinstance(res, BatchResult)
        return [r.seq for r in res.results]

    def ack(self, *seqs: int) -> None:
        self.store.write_group([WriteBatch(2, acks=(Ack(C1, 0, seqs),))])

    def job(self, job: ReplicaWrite | FenceQueue) -> ReplicaState:
        (state,) = self.store.write_group([job])
        assert isinstance(state, ReplicaState)
        return state

    def messages(self) -> list[bytes]:
        return [data for _, data in self.store.read(C1, 0, 0, 1000).entries]


@pytest.fixture(params=["memory", "lmdb"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def feed(primary: Primary, src: Node, dst: Node) -> ReplicaState:
    """One round of the shell's sender: what ``dst`` lacks, read from ``src``, written
    (a probe when the primary thinks it lacks nothing)."""
    req = primary.to_send(dst.name) or probe(primary, dst.name)
    if req.entries:
        first, last = req.entries[0][1], req.entries[-1][1]
        datas, acked = read_entries(src.store, C1, first, last)
    else:
        datas, acked = {}, src.store.state(C1).acked
    job = ReplicaWrite(
        C1,
        req.epoch,
        req.prev,
        tuple((e, s, datas.get(s, b"")) for e, s in req.entries),
        req.install,
        acked,
    )
    state = dst.job(job)
    answer = (
        Appended(state.epoch, state.upto)
        if state.ok
        else Refused(state.epoch, state.last[1], state.reason)
    )
    primary.on_reply(dst.name, answer)  # False once dst follows a newer epoch
    return state


def sync(primary: Primary, src: Node, dst: Node) -> ReplicaState:
    """Feed ``dst`` until the primary knows it holds everything (bounded)."""
    for _ in range(20):
        state = feed(primary, src, dst)
        if state.ok and primary.to_send(dst.name) is None:
            return state
    raise AssertionError(f"{dst.name} never caught up: {state}")


def replicate(src: Node, dst: Node) -> ReplicaState:
    """A primary at ``src``'s own epoch, built from its copy, feeds ``dst`` all of it."""
    copy = read_copy(src.store, C1)
    assert copy is not None
    return sync(Primary(src.name, copy.log.epoch, copy.log, copy.replicas, w=2), src, dst)


def test_a_copy_holds_the_primarys_messages_at_their_positions(kind: str, tmp_path: Path) -> None:
    a, b = Node("a", kind, tmp_path), Node("b", kind, tmp_path)
    a.open(1, ("a", "b"))
    assert a.append(b"A", b"B", b"C") == [1, 2, 3]
    copy = read_copy(a.store, C1)
    assert copy is not None and copy.replicas == ("a", "b")
    assert copy.log.entries == [(1, 1), (1, 2), (1, 3)]
    p = Primary("a", 1, copy.log, copy.replicas, w=2)
    assert p.committed == 0
    state = sync(p, a, b)
    assert state.ok and state.upto == 3 and p.committed == 3
    assert b.messages() == [b"A", b"B", b"C"]
    b.restart()
    held = read_copy(b.store, C1)
    assert held is not None and held.log.entries == [(1, 1), (1, 2), (1, 3)]
    assert replicated_here(a.store, "a") == [C1] and replicated_here(b.store, "b") == []


def test_a_new_epoch_starts_a_run_and_acknowledged_entries_are_garbage(
    kind: str, tmp_path: Path
) -> None:
    a, b = Node("a", kind, tmp_path), Node("b", kind, tmp_path)
    a.open(1, ("a", "b"))
    a.append(b"A", b"B")
    a.open(3, ("a", "b"))  # the session resumed here at a higher epoch
    a.append(b"C")
    a.ack(1)
    copy = read_copy(a.store, C1)
    assert copy is not None
    assert copy.log.base == (1, 1) and copy.log.entries == [(1, 2), (3, 3)]
    p = Primary("a", 3, copy.log, copy.replicas, w=2)
    sync(p, a, b)
    assert p.committed == 3 and b.messages() == [b"B", b"C"]
    held = read_copy(b.store, C1)
    assert held is not None and held.log.entries[-1] == (3, 3)


def test_a_fenced_copy_refuses_the_old_primary_and_fails_over(kind: str, tmp_path: Path) -> None:
    """The seed's sequence in the store: B and C are on the replica when the primary
    dies; a failover fences the replica at a newer epoch, which then serves as the
    primary and continues after C, while the old primary's late appends are refused."""
    a, b = Node("a", kind, tmp_path), Node("b", kind, tmp_path)
    a.open(1, ("a", "b"))
    a.append(b"B", b"C")
    copy = read_copy(a.store, C1)
    assert copy is not None
    old = Primary("a", 1, copy.log, copy.replicas, w=2)
    sync(old, a, b)
    a.append(b"X")  # written on the old primary only: never committed
    old.write()
    fenced = b.job(FenceQueue(C1, 2))
    assert fenced.ok and fenced.last == (1, 2) and fenced.epoch == 2
    late = feed(old, a, b)
    assert not late.ok and late.epoch == 2
    assert not old.on_reply("b", Refused(late.epoch, late.last[1], late.reason))
    b.open(2, ("b", "a"))
    assert b.append(b"D") == [3]
    assert b.messages() == [b"B", b"C", b"D"]
    mine = read_copy(b.store, C1)
    assert mine is not None and mine.log.entries == [(1, 1), (1, 2), (2, 3)]
    # The old primary, back, is a replica now: its uncommitted X is replaced.
    new = Primary("b", 2, mine.log, mine.replicas, w=2)
    sync(new, b, a)
    assert a.messages() == [b"B", b"C", b"D"] and new.committed == 3


def test_an_install_replaces_a_copy_that_cannot_match(kind: str, tmp_path: Path) -> None:
    """A clean start moves the primary's base past everything a replica holds."""
    a, b = Node("a", kind, tmp_path), Node("b", kind, tmp_path)
    a.open(1, ("a", "b"))
    a.append(b"A", b"B")
    replicate(a, b)
    a.open(2, ("a", "b"), clean=True)
    a.append(b"N")
    copy = read_copy(a.store, C1)
    assert copy is not None and copy.log.base[1] == 2
    p = Primary("a", 2, copy.log, copy.replicas, w=2)
    sync(p, a, b)
    assert b.messages() == [b"N"] and p.committed == 3


def test_deleting_a_replicated_queue_forgets_its_record(kind: str, tmp_path: Path) -> None:
    a = Node("a", kind, tmp_path)
    a.open(1, ("a", "b"))
    a.append(b"A")
    (state,) = a.store.write_group([DeleteQueue(C1, 0, "test")])
    assert isinstance(state, QueueState) and state.deleted
    assert read_copy(a.store, C1) is None and replicated_here(a.store, "a") == []


def test_a_primarys_drop_takes_a_replicas_copy_but_never_a_newer_primary(
    kind: str, tmp_path: Path
) -> None:
    """Found by the fault run: an old primary, told late that its session moved, deleted
    its queue and dropped its replicas' copies at the new owner's epoch, which deleted
    the queue the new owner had failed over onto one of them."""
    a, b = Node("a", kind, tmp_path), Node("b", kind, tmp_path)
    a.open(1, ("a", "b"))
    a.append(b"A")
    replicate(a, b)
    drop = DeleteQueue(C1, 1, "deleted on its primary", replica_only=True)
    (state,) = b.store.write_group([drop])
    assert isinstance(state, QueueState) and state.deleted  # a replica's copy goes
    replicate(a, b)
    assert b.job(FenceQueue(C1, 2)).ok
    b.open(2, ("b", "a"))  # failed over: b is the primary at epoch 2
    for epoch in (1, 2):
        (state,) = b.store.write_group([DeleteQueue(C1, epoch, "late drop", replica_only=True)])
        assert isinstance(state, QueueState) and not state.deleted and state.error, epoch
    assert b.messages() == [b"A"]


def test_a_late_eviction_never_deletes_a_replicas_copy_of_its_epoch_or_newer(
    kind: str, tmp_path: Path
) -> None:
    """Found by the 1,000-fault run: a node cut off while its session moved on was told
    late (an owed eviction at the epoch of the move) and deleted its queue, which by then
    was a replica the new owner's primary fed at that epoch. The copy came back with a
    hole, and a failover that read it lost the messages in the hole."""
    a, b = Node("a", kind, tmp_path), Node("b", kind, tmp_path)
    a.open(2, ("a", "b"))
    a.append(b"A", b"B")
    replicate(a, b)  # b's copy follows a's epoch 2
    for epoch in (1, 2):
        (state,) = b.store.write_group([DeleteQueue(C1, epoch, "taken over")])
        assert isinstance(state, QueueState) and not state.deleted and state.error, epoch
    assert b.messages() == [b"A", b"B"]
    (state,) = b.store.write_group([DeleteQueue(C1, 3, "taken over")])  # a newer owner's
    assert isinstance(state, QueueState) and state.deleted


def test_an_open_without_replicas_keeps_the_set_and_one_with_a_single_node_ends_it(
    kind: str, tmp_path: Path
) -> None:
    a = Node("a", kind, tmp_path)
    a.open(1, ("a", "b", "c"))
    a.open(1, ())  # a length limit change names no replicas
    copy = read_copy(a.store, C1)
    assert copy is not None and copy.replicas == ("a", "b", "c")
    a.open(2, ("a",))
    assert read_copy(a.store, C1) is None


def test_a_copy_fed_by_another_primary_refuses_this_nodes_own_appends(
    kind: str, tmp_path: Path
) -> None:
    """A stale route to the session's old node must not write into what is now another
    primary's copy; the node's registry opening the queue (it owns the session again)
    makes it writable."""
    a, b = Node("a", kind, tmp_path), Node("b", kind, tmp_path)
    a.open(1, ("a", "b"))
    a.append(b"A")
    replicate(a, b)
    (res,) = b.store.write_group([WriteBatch(1, (Append(C1, 0, b"stray"),))])
    assert isinstance(res, BatchResult) and res.results[0].status == AppendStatus.STALE_EPOCH
    assert a.job(FenceQueue(C1, 2)).ok  # a failover elsewhere fenced the old primary too
    (res,) = a.store.write_group([WriteBatch(1, (Append(C1, 0, b"late"),))])
    assert isinstance(res, BatchResult) and res.results[0].status == AppendStatus.STALE_EPOCH
    b.open(2, ("b", "a"))
    assert b.append(b"B") == [2] and b.messages() == [b"A", b"B"]


def test_a_new_primary_whose_seqs_are_behind_a_replicas_replaces_its_copy(
    kind: str, tmp_path: Path
) -> None:
    """A session started clean on a node whose own copy is short (its seqs lower than
    what a replica acknowledged from the old log): the new log's entries fall below the
    replica's base, and must not be taken as garbage there (they would count toward a
    commit on a copy that lacks them). The replica is refused until the install."""
    a, b, c = Node("a", kind, tmp_path), Node("b", kind, tmp_path), Node("c", kind, tmp_path)
    a.open(1, ("a", "b"))
    a.append(b"1", b"2", b"3", b"4")
    a.ack(1, 2, 3, 4)
    replicate(a, b)
    held = read_copy(b.store, C1)
    assert held is not None and held.log.base == (1, 4)
    c.open(5, ("c", "b"), clean=True)  # c never held the queue: its seqs start at 1
    assert c.append(b"N") == [1]
    copy = read_copy(c.store, C1)
    assert copy is not None
    p = Primary("c", 5, copy.log, copy.replicas, w=2)
    first = feed(p, c, b)
    assert not first.ok and p.committed == 0
    sync(p, c, b)
    assert p.committed == 1 and b.messages() == [b"N"]


def test_the_delivery_state_travels_with_an_append(kind: str, tmp_path: Path) -> None:
    """QoS 2 exactly once across a failover: the copy's marks become the primary's (the
    packet ids whose PUBREC went out, the seqs whose PUBREL is owed) and so does what
    was sent to the client."""
    b = Node("b", kind, tmp_path)
    entries = ((1, 1, b"A"), (1, 2, b"B"))
    state = b.job(ReplicaWrite(C1, 1, (0, 0), entries, state=(1, (7, 9), (2,))))
    assert state.ok
    got = b.store.state(C1)
    assert (got.delivered_upto, got.inbound_qos2, got.outbound_pubrel) == (1, (7, 9), (2,))
    # a later append names the new state, which replaces the old one (not a union)
    b.job(ReplicaWrite(C1, 1, (1, 2), ((1, 3, b"C"),), state=(2, (9,), ())))
    got = b.store.state(C1)
    assert (got.delivered_upto, got.inbound_qos2, got.outbound_pubrel) == (2, (9,), ())
    # an append without a state leaves it as it is
    b.job(ReplicaWrite(C1, 1, (1, 3), ((1, 4, b"D"),)))
    assert b.store.state(C1).inbound_qos2 == (9,)


def test_a_fence_on_a_node_without_a_copy_still_refuses_the_old_primary(
    kind: str, tmp_path: Path
) -> None:
    """A failover read that finds no copy on ``b`` (its install had not come yet) must
    still fence ``b``: else the old primary's next append creates the copy at the old
    epoch there, and ``a`` + ``b`` make a write quorum the new primary never reads."""
    a, b = Node("a", kind, tmp_path), Node("b", kind, tmp_path)
    a.open(1, ("a", "b"))
    a.append(b"A")
    fenced = b.job(FenceQueue(C1, 2))
    assert fenced.ok and not fenced.exists and fenced.epoch == 2
    b.restart()  # the fence is durable
    copy = read_copy(a.store, C1)
    assert copy is not None
    old = Primary("a", 1, copy.log, copy.replicas, w=2)
    late = feed(old, a, b)
    assert not late.ok and late.epoch == 2
    assert old.committed == 0
    assert b.messages() == []


def test_a_fence_reports_the_set_the_copys_primary_fed_it_as(kind: str, tmp_path: Path) -> None:
    """A failover widens its read by this set (``Failover._read_copies``)."""
    a, b = Node("a", kind, tmp_path), Node("b", kind, tmp_path)
    a.open(1, ("a", "b", "c"))
    a.append(b"A")
    fed = b.job(ReplicaWrite(C1, 1, (0, 0), ((1, 1, b"A"),), replicas=("a", "b", "c")))
    assert fed.ok
    assert b.job(FenceQueue(C1, 2)).replicas == ("a", "b", "c")
    assert a.job(FenceQueue(C1, 3)).replicas == ("a", "b", "c")
    assert Node("c", kind, tmp_path).job(FenceQueue(C1, 3)).replicas == ()


def test_a_fetch_cut_by_size_answers_only_the_positions_it_read(kind: str, tmp_path: Path) -> None:
    """A failover copies a queue from a replica page by page. A page cut at 16 MB must
    end at its last message: a position past it sent without its message would be taken
    for an acknowledged one, and the message lost."""
    a = Node("a", kind, tmp_path)
    a.open(1, ("a", "b"))
    mb = 1024 * 1024
    a.append(*(bytes([65 + i]) * mb for i in range(17)))  # 17 MB: two pages
    servicer = ReplicaServicer(a.store, None, None)  # type: ignore[arg-type]

    def fetch(after: int) -> msgstore_pb2.FetchReply:
        request = msgstore_pb2.FetchRequest(
            key=common_pb2.SessionKey(mountpoint=C1[0], client_id=C1[1]), epoch=1, after_seq=after
        )
        return asyncio.run(servicer.Fetch(request, None))

    first = fetch(0)
    assert first.last_seq == 17 and len(first.entries) == 16
    assert all(len(e.delivery) == mb for e in first.entries)
    rest = fetch(first.entries[-1].seq)
    assert [(e.seq, len(e.delivery)) for e in rest.entries] == [(17, mb)]
