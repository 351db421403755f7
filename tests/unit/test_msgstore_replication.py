"""The replicated queue's protocol core (services/msgstore/replication/): one replica's
append rule, the primary's commit rule, the failover choice; and, over random
interleavings with lost, duplicated and reordered messages, crashes of up to r - w
nodes, restarts, partitioned old primaries that keep going and failovers at any moment,
that no committed entry is ever lost or changed."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from services.msgstore.replication.failover import choose, read_quorum
from services.msgstore.replication.log import (
    ORIGIN,
    Append,
    Appended,
    Position,
    Refused,
    ReplicaLog,
)
from services.msgstore.replication.primary import Primary


def test_a_replica_takes_contiguous_appends_and_refuses_gaps_and_old_epochs() -> None:
    log = ReplicaLog()
    assert log.append(Append(1, ORIGIN, ((1, 1), (1, 2)))) == Appended(1, 2)
    assert isinstance(log.append(Append(1, (1, 5), ((1, 6),))), Refused)
    assert log.append(Append(1, (1, 1), ((1, 2),))) == Appended(1, 2), "a resend"
    assert log.append(Append(2, (1, 1), ((2, 2),))) == Appended(2, 2)
    assert log.entries == [(1, 1), (2, 2)], "an uncommitted suffix replaced"
    refused = log.append(Append(1, (2, 2), ((1, 3),)))
    assert isinstance(refused, Refused) and refused.epoch == 2
    assert not log.fence(1) and log.fence(3)
    assert isinstance(log.append(Append(2, (2, 2), ((2, 3),))), Refused), "fenced"


def test_compaction_keeps_the_matching_check_at_the_boundary() -> None:
    log = ReplicaLog()
    log.append(Append(1, ORIGIN, ((1, 1), (1, 2), (1, 3))))
    log.compact(2)
    assert log.base == (1, 2) and log.entries == [(1, 3)]
    assert log.append(Append(1, (1, 2), ((1, 3), (1, 4)))) == Appended(1, 4)
    assert log.append(Append(1, ORIGIN, ((1, 1), (1, 2), (1, 3)))) == Appended(1, 3)
    assert log.entries == [(1, 3), (1, 4)]


def test_the_primary_commits_on_w_copies_and_only_by_its_own_epoch() -> None:
    p = Primary("a", 1, ReplicaLog(), ["a", "b", "c"], w=2)
    assert p.write() == (1, 1) and p.committed == 0
    req = p.to_send("b")
    assert req == Append(1, ORIGIN, ((1, 1),))
    assert p.on_reply("b", Appended(1, 1)) and p.committed == 1
    # A new primary with an older entry it took over: not committed by counting copies
    old = ReplicaLog(entries=[(1, 1), (1, 2)])
    q = Primary("b", 3, old, ["a", "b", "c"], w=2)
    q.on_reply("c", Appended(3, 2))
    assert q.committed == 0, "copies of an older epoch's entry do not commit it"
    assert q.barrier() == (3, 3)
    q.on_reply("c", Appended(3, 3))
    assert q.committed == 3, "the barrier commits what came before"
    assert not q.on_reply("a", Refused(4, 0, "fenced")), "replaced"


def test_figure_8_a_copy_of_an_older_epochs_entry_does_not_commit_it() -> None:
    """Raft's figure 8, with three replicas and w = 2: counting copies of an entry the
    primary took over from an older epoch would commit it, and the next failover could
    then choose a copy without it."""
    a, b, c = ReplicaLog(), ReplicaLog(), ReplicaLog()
    nodes = ["a", "b", "c"]
    p1 = Primary("a", 1, a, nodes, 2)
    p1.write()
    for log in (b, c):
        log.append(Append(1, ORIGIN, ((1, 1),)))
    Primary("a", 2, a, nodes, 2).write()  # (2, 2) on a alone; a dies
    assert choose({"b": b.last(), "c": c.last()}, 3, 2) == "b"
    b.fence(3)
    c.fence(3)
    Primary("b", 3, b, nodes, 2).write()  # (3, 2) on b alone; b dies, a returns
    assert choose({"a": a.last(), "c": c.last()}, 3, 2) == "a"
    a.fence(4)
    c.fence(4)
    p4 = Primary("a", 4, a, nodes, 2)
    reply = c.append(Append(4, (1, 1), ((2, 2),)))  # what a sends c first
    assert reply == Appended(4, 2)
    p4.on_reply("c", reply)
    assert p4.committed == 0, "(2, 2) is on a and c, but not committed by that"
    # Were it committed, the next failover (a dead) would lose it:
    assert choose({"b": b.last(), "c": c.last()}, 3, 2) == "b" and b.at(2) == (3, 2)
    # Its barrier, once on c, commits (2, 2) with it, and then no failover loses it.
    p4.barrier()
    p4.on_reply("c", c.append(p4.to_send("c")))  # type: ignore[arg-type]
    assert p4.committed == 3 and c.last() == (4, 3)
    assert choose({"b": b.last(), "c": c.last()}, 3, 2) == "c"


def test_a_refused_append_is_sent_again_from_further_back() -> None:
    p = Primary("a", 2, ReplicaLog(entries=[(1, 1), (2, 2), (2, 3)]), ["b"], w=1)
    assert p.to_send("b") is None  # assumed in step until it says otherwise
    p.on_reply("b", Refused(2, 1, "no entry"))
    assert p.to_send("b") == Append(2, (1, 1), ((2, 2), (2, 3)))


def test_failover_reads_r_minus_w_plus_one_copies_and_takes_the_most_recent() -> None:
    assert read_quorum(3, 2) == 2 and read_quorum(5, 3) == 3
    assert choose({"a": (2, 5)}, 3, 2) is None
    assert choose({"a": (2, 5), "b": (3, 4), "c": (3, 4)}, 3, 2) == "b"
    assert choose({"a": (2, 5), "c": (2, 7)}, 3, 2) == "c"


# -- the property ------------------------------------------------------------------------


@dataclass
class Cluster:
    r: int
    w: int
    logs: dict[str, ReplicaLog] = field(default_factory=dict)
    alive: set[str] = field(default_factory=set)
    primaries: list[Primary] = field(default_factory=list)  # every one, replaced too
    inflight: list[tuple[str, str, object]] = field(default_factory=list)  # (to, from, msg)
    epoch: int = 0
    chosen: dict[int, Position] = field(default_factory=dict)  # committed seq -> position

    def __post_init__(self) -> None:
        self.nodes = [f"n{i}" for i in range(self.r)]
        self.logs = {n: ReplicaLog() for n in self.nodes}
        self.alive = set(self.nodes)

    def record_commits(self) -> None:
        for p in self.primaries:
            for seq in range(1, p.committed + 1):
                pos = p.log.at(seq)
                if pos is not None and not p.replaced:
                    assert self.chosen.setdefault(seq, pos) == pos, (
                        f"seq {seq} committed as {self.chosen[seq]} and as {pos}"
                    )

    def failover(self, k: int = 0) -> bool:
        live = sorted(self.alive)
        if len(live) < read_quorum(self.r, self.w):
            return False
        self.epoch += 1
        new = live[k % len(live)]
        size = read_quorum(self.r, self.w) + (k // 7) % (
            len(live) - read_quorum(self.r, self.w) + 1
        )
        read = {new, *(live[(k // 3 + i) % len(live)] for i in range(size))}
        lasts = {}
        for n in sorted(read):
            if self.logs[n].fence(self.epoch):
                lasts[n] = self.logs[n].last()
        truth = choose(lasts, self.r, self.w)
        if truth is None:
            return False
        src = self.logs[truth]
        log = self.logs[new]
        log.base, log.entries = src.base, list(src.entries)  # the shell copies the messages
        for seq, pos in self.chosen.items():
            assert log.at(seq) == pos, f"the failover at {self.epoch} lost seq {seq} {pos}"
        p = Primary(new, self.epoch, log, self.nodes, self.w)
        p.barrier()
        self.primaries.append(p)
        return True

    def step(self, op: int, k: int) -> None:
        """One event; ``k`` picks who or what it happens to."""
        working = [p for p in self.primaries if p.node in self.alive and not p.replaced]
        if op == 0 and working:
            working[k % len(working)].write()
        elif op == 1 and working:
            p = working[k % len(working)]
            replica = p.replicas[(k // 5) % len(p.replicas)] if p.replicas else None
            req = p.to_send(replica) if replica is not None else None
            if replica is not None and req is not None:
                self.inflight.append((replica, p.node, (p, req)))
        elif op == 2 and self.inflight:
            to, frm, msg = self.inflight.pop(k % len(self.inflight))
            if (k // 11) % 7 == 0:
                self.inflight.append((to, frm, msg))  # delivered twice
            if to not in self.alive:
                return
            p, body = msg  # type: ignore[misc]
            if isinstance(body, Append):
                reply = self.logs[to].append(body)
                self.inflight.append((frm, to, (p, reply)))
            else:
                p.on_reply(frm, body)
        elif op == 3 and self.inflight:
            self.inflight.pop(k % len(self.inflight))  # lost
        elif op == 4 and len(self.nodes) - len(self.alive) < self.r - self.w:
            live = sorted(self.alive)
            self.alive.discard(live[k % len(live)])  # SIGKILL; its log is on disk
        elif op == 5 and len(self.alive) < len(self.nodes):
            dead = sorted(set(self.nodes) - self.alive)
            self.alive.add(dead[k % len(dead)])
        elif op == 6 or not self.primaries:
            self.failover(k)
        self.record_commits()


@settings(max_examples=500, deadline=None)
@given(
    rw=st.sampled_from([(3, 2), (3, 3), (5, 3), (2, 2), (1, 1)]),
    ops=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 10_000)), min_size=20, max_size=300),
)
def test_no_committed_entry_is_ever_lost_or_changed(
    rw: tuple[int, int], ops: list[tuple[int, int]]
) -> None:
    r, w = rw
    c = Cluster(r, w)
    c.failover()
    for op, k in ops:
        c.step(op, k)
    # quiesce: everyone back, one more failover, deliver everything
    c.alive = set(c.nodes)
    assert c.failover()
    p = c.primaries[-1]
    for _ in range(4 * r + len(p.log.entries)):
        for replica in p.replicas:
            req = p.to_send(replica)
            if req is not None:
                p.on_reply(replica, c.logs[replica].append(req))
    c.record_commits()
    assert p.committed == p.log.last()[1], "a whole cluster commits everything"
    for seq, pos in c.chosen.items():
        assert all(c.logs[n].at(seq) == pos for n in c.nodes), (seq, pos)
