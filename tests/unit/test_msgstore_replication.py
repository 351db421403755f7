"""The replicated queue's protocol core (services/msgstore/replication/): one replica's
append rule (against a list-of-positions model of the run-length log), installs, the
primary's commit rule, the failover choice; and, over random interleavings with lost,
duplicated and reordered messages, crashes of up to r - w nodes, restarts (a primary
rebuilt at its epoch), partitioned old primaries that keep going, garbage dropped and
clean starts, and failovers at any moment, that no committed entry is ever lost or
changed and that the copies converge once the network is quiet."""

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
    old = ReplicaLog.of([(1, 1), (1, 2)])
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
    p = Primary("a", 2, ReplicaLog.of([(1, 1), (2, 2), (2, 3)]), ["b"], w=1)
    assert p.to_send("b") is None  # assumed in step until it says otherwise
    p.on_reply("b", Refused(2, 1, "no entry"))
    assert p.to_send("b") == Append(2, (1, 1), ((2, 2), (2, 3)))


def test_failover_reads_r_minus_w_plus_one_copies_and_takes_the_most_recent() -> None:
    assert read_quorum(3, 2) == 2 and read_quorum(5, 3) == 3
    assert choose({"a": (2, 5)}, 3, 2) is None
    assert choose({"a": (2, 5), "b": (3, 4), "c": (3, 4)}, 3, 2) == "b"
    assert choose({"a": (2, 5), "c": (2, 7)}, 3, 2) == "c"


def test_a_tie_goes_to_the_copy_the_request_names_first() -> None:
    """A live handover names the old primary first: its copy ends where the replicas'
    do, but only it holds the acks its client sent out of order (S3)."""
    tied = {"a": (3, 4), "b": (3, 4), "c": (3, 4)}
    assert choose(tied, 3, 2) == "a"
    assert choose(tied, 3, 2, prefer=["c", "a", "b"]) == "c"
    assert choose(tied, 3, 2, prefer=["x", "b"]) == "b"  # named, though it did not answer
    assert choose({"a": (3, 5), "c": (3, 4)}, 3, 2, prefer=["c"]) == "a"  # never a shorter log


def test_a_log_keeps_runs_of_one_epoch() -> None:
    log = ReplicaLog.of([(1, 4), (1, 5), (2, 6), (4, 7), (4, 8)], epoch=4, base=(1, 3))
    assert log.runs == [(1, 4), (2, 6), (4, 7)] and log.last_seq == 8
    assert log.at(3) == (1, 3) and log.at(5) == (1, 5) and log.at(7) == (4, 7)
    assert log.at(2) is None and log.at(9) is None
    assert log.span(0, 6) == ((1, 4), (1, 5), (2, 6)) and log.span(8, 20) == ((4, 8),)
    assert log.write(5) == (5, 9) and log.runs[-1] == (5, 9)
    log.compact(5)
    assert log.base == (1, 5) and log.runs == [(2, 6), (4, 7), (5, 9)]
    log.compact(7)
    assert log.base == (4, 7) and log.runs == [(4, 8), (5, 9)]
    log.compact(9)
    assert log.base == (5, 9) and log.runs == [] and log.last() == (5, 9)


def test_a_huge_log_is_a_few_runs_and_appends_cost_their_length() -> None:
    n = 10**12
    log = ReplicaLog(2, (1, 10), [(1, 11), (2, n // 2)], n)
    assert log.append(Append(2, (2, n), ((2, n + 1),))) == Appended(2, n + 1)
    assert log.append(Append(2, (1, 11), ((1, 12),))) == Appended(2, 12), "a resend"
    assert log.last() == (2, n + 1)
    assert log.append(Append(3, (1, 12), ((3, 13),))) == Appended(3, 13)
    assert log.runs == [(1, 11), (3, 13)] and log.last() == (3, 13)
    log.compact(n)
    assert log.base == (3, 13) and log.runs == []


def test_an_install_replaces_a_copy_the_primary_can_no_longer_match() -> None:
    """The primary's copy starts at base (2, 7) (it compacted, or clean-started): the
    replica's (1, 1..5) has nothing to match there, so it gets an install."""
    replica = ReplicaLog.of([(1, s) for s in range(1, 6)], epoch=1)
    p = Primary("a", 2, ReplicaLog.of([], epoch=2, base=(2, 7)), ["a", "b"], w=2)
    assert p.write() == (2, 8)
    sent = []
    while (req := p.to_send("b")) is not None:
        sent.append(req)
        assert p.on_reply("b", replica.append(req))
        assert len(sent) < 5
    assert sent[-1] == Append(2, (2, 7), ((2, 8),), install=True)
    assert replica.base == (2, 7) and replica.entries == [(2, 8)]
    assert p.committed == 8 and p.match["b"] == 8 and p.next["b"] == 9
    # An install from an older epoch is refused like any append.
    assert isinstance(replica.append(Append(1, ORIGIN, ((1, 1),), install=True)), Refused)
    assert replica.entries == [(2, 8)]


def test_an_install_delivered_late_keeps_what_the_replica_acknowledged_since() -> None:
    """An install that arrives again after later appends is a resend where the replica
    holds its base: dropping what the replica acknowledged since would lose committed
    entries (they were counted on its copy) at the next failover."""
    b = ReplicaLog.of([(1, s) for s in range(1, 6)], epoch=1)
    p = Primary("a", 2, ReplicaLog.of([], epoch=2, base=(2, 7)), ["a", "b", "c"], w=2)
    p.write()
    p.on_reply("b", b.append(p.to_send("b")))  # type: ignore[arg-type]
    install = p.to_send("b")
    assert install is not None and install.install
    p.on_reply("b", b.append(install))
    p.write()
    p.write()
    p.on_reply("b", b.append(p.to_send("b")))  # type: ignore[arg-type]
    assert p.committed == 10 and b.last() == (2, 10)
    assert b.append(install) == Appended(2, 8)
    assert b.base == (2, 7) and b.last() == (2, 10)
    assert choose({"b": b.last(), "c": ORIGIN}, 3, 2) == "b", "and b still holds (2, 10)"
    # Where the replica holds the install's base, it drops what comes before, as the
    # primary did; where what follows is not the primary's, it is a suffix never committed.
    log = ReplicaLog.of([(1, 6), (1, 7), (2, 8), (2, 9)], epoch=2, base=(1, 5))
    assert log.append(Append(2, (1, 7), (), install=True)) == Appended(2, 7)
    assert log.base == (1, 7) and log.entries == [(2, 8), (2, 9)]
    assert log.append(Append(3, (1, 7), ((3, 8),), install=True)) == Appended(3, 8)
    assert log.base == (1, 7) and log.entries == [(3, 8)]


def test_an_append_of_another_history_below_a_replicas_base_is_not_taken_as_held() -> None:
    """A replica takes an append that ends at or below its base as held only when it is
    of the same history: garbage is committed, so the same on every copy of one log. A
    clean start that dropped entries not yet committed (or any new log whose base is
    below this one's) shows itself by an entry of an epoch newer than the replica's base:
    refused, so the entry is not counted on a copy that never held it, and the install
    that follows replaces the copy."""
    a, b, c = ReplicaLog(), ReplicaLog(), ReplicaLog()
    nodes = ["a", "b", "c"]
    p1 = Primary("a", 1, a, nodes, 2)
    p1.write()
    p1.write()  # (1, 1), (1, 2) on a alone, which is cut off
    a.compact(2)  # a clean start that does not wait for (1, 2) to commit
    b.fence(2)
    c.fence(2)
    p2 = Primary("b", 2, b, nodes, 2)  # the failover at 2 read b and c
    p2.barrier()  # (2, 1)
    reply = a.append(p2.to_send("a"))  # type: ignore[arg-type]
    assert isinstance(reply, Refused), "(2, 1) is not garbage on a"
    p2.on_reply("a", reply)
    assert p2.committed == 0, "only b holds (2, 1)"
    for _ in range(5):
        req = p2.to_send("a")
        if req is None:
            break
        p2.on_reply("a", a.append(req))
    assert a.entries == [(2, 1)] and p2.committed == 1


def test_the_walk_back_ends_in_an_install_at_worst() -> None:
    """A replica whose copy disagrees everywhere: each refusal moves ``next`` back, and at
    the primary's base the install is taken."""
    replica = ReplicaLog.of([(1, s) for s in range(1, 20)], epoch=1)
    log = ReplicaLog.of([(2, s) for s in range(11, 16)], epoch=2, base=(2, 10))
    p = Primary("a", 3, log, ["b"], w=2)
    p.barrier()
    for _ in range(20):
        req = p.to_send("b")
        if req is None:
            break
        p.on_reply("b", replica.append(req))
        assert p.match["b"] < p.next["b"] and p.next["b"] >= log.base[1]
    assert replica.base == (2, 10) and replica.entries == log.entries
    assert p.committed == 16


def test_a_primary_that_stays_counts_its_earlier_epochs_entries() -> None:
    """An Open on the node that stays the primary raises the epoch; an entry it wrote
    just before, under the old epoch, is committed by its copies (``floor``), not held
    until a later write of the new epoch comes."""
    logs = {n: ReplicaLog() for n in "abc"}
    p = Primary("a", 1, logs["a"], "abc", w=2)
    p.write()
    q = Primary("a", 2, logs["a"], "abc", w=2, floor=p.floor)

    def feed(primary: Primary, replica: str) -> None:
        """A probe (the primary thinks the replica holds everything), then what the
        refusal says it lacks."""
        probe = Append(primary.epoch, primary.log.last(), ())
        primary.on_reply(replica, logs[replica].append(probe))
        req = primary.to_send(replica)
        assert req is not None
        primary.on_reply(replica, logs[replica].append(req))

    feed(q, "b")
    assert q.committed == 1
    fresh = Primary("a", 3, logs["a"], "abc", w=2)  # after a failover: no tenure
    feed(fresh, "c")
    assert fresh.committed == 0


def test_a_primary_rebuilt_at_its_epoch_commits_new_writes() -> None:
    """A primary restarts at the same epoch: rebuilt from its own copy, it knows nothing
    of its replicas and finds out as a new primary does."""
    logs = {n: ReplicaLog() for n in "abc"}
    p = Primary("a", 1, logs["a"], "abc", w=2)
    for _ in range(3):
        p.write()
    p.on_reply("b", logs["b"].append(p.to_send("b")))  # type: ignore[arg-type]
    assert p.committed == 3
    p.write()  # (1, 4): on a alone when it restarts
    q = Primary("a", 1, logs["a"], "abc", w=2)
    assert q.committed == 0 and q.write() == (1, 5)
    for replica in ("c", "b", "c", "b"):
        req = q.to_send(replica)
        if req is not None:
            assert q.on_reply(replica, logs[replica].append(req))
    assert q.committed == 5 and logs["b"].entries == logs["c"].entries == logs["a"].entries


def test_first_from_finds_where_an_epoch_begins() -> None:
    log = ReplicaLog.of([(1, 1), (1, 2), (3, 3), (3, 4), (5, 5)])
    assert [log.first_from(e) for e in range(7)] == [1, 1, 3, 3, 5, 5, 6]
    log.compact(3)
    assert [log.first_from(e) for e in (1, 3, 4, 6)] == [4, 4, 5, 6]
    assert ReplicaLog().first_from(1) == 1


def test_a_read_serves_this_tenures_entries_once_committed() -> None:
    """An append sits in the primary's copy before W copies hold it: a resume's read
    must not hand it out yet (a failover could lose it after the subscriber had it)."""
    logs = {n: ReplicaLog() for n in "abc"}
    p = Primary("a", 1, logs["a"], "abc", w=2)
    p.write_many(2)
    assert p.serves() == 0, "on one copy of three"
    p.on_reply("b", logs["b"].append(p.to_send("b")))  # type: ignore[arg-type]
    assert p.committed == 2 and p.serves() == 2
    p.write()
    assert p.serves() == 2


def test_a_read_serves_what_the_primary_took_over_at_once() -> None:
    """Entries of earlier tenures (a failover's choice, or written before an Open raised
    the epoch) are served as held: the primary cannot count their copies until an entry
    of its own commits, and a resume must not wait for that while too few copies are up."""
    taken = ReplicaLog.of([(1, 1), (1, 2)])
    q = Primary("b", 3, taken, "abc", w=2)
    assert q.committed == 0 and q.serves() == 2
    q.barrier()
    q.write()
    assert q.serves() == 2, "the barrier and the new entry wait for their commit"
    stays = Primary("b", 4, taken, "abc", w=2, floor=q.floor)
    assert stays.serves() == 2, "an Open keeps the tenure: its own uncommitted wait still"


# -- the run-length log against a list of positions -------------------------------------


@dataclass
class ListLog:
    """The log as one position per entry: the reference for :class:`ReplicaLog`."""

    epoch: int = 0
    base: Position = ORIGIN
    entries: list[Position] = field(default_factory=list)

    def last(self) -> Position:
        return self.entries[-1] if self.entries else self.base

    def at(self, seq: int) -> Position | None:
        if seq == self.base[1]:
            return self.base
        i = seq - self.base[1] - 1
        return self.entries[i] if 0 <= i < len(self.entries) else None

    def fence(self, epoch: int) -> bool:
        if epoch < self.epoch:
            return False
        self.epoch = epoch
        return True

    def write(self, epoch: int) -> Position:
        self.entries.append((epoch, self.last()[1] + 1))
        return self.entries[-1]

    def append(self, req: Append) -> Appended | Refused:
        if req.epoch < self.epoch:
            return Refused(self.epoch, self.last()[1], f"epoch {req.epoch} < {self.epoch}")
        self.epoch = req.epoch
        upto = req.prev[1] + len(req.entries)
        prev, entries = req.prev, req.entries
        diverged = False
        if prev[1] < self.base[1]:
            drop = self.base[1] - prev[1]
            mine = entries[drop - 1] if drop <= len(entries) else None
            newer = any(e[0] > self.base[0] for e in (prev, *entries[:drop]))
            diverged = newer or (mine is not None and mine != self.base)
            if not diverged:
                if drop >= len(entries):
                    return Appended(self.epoch, upto)
                prev, entries = entries[drop - 1], entries[drop:]
        if diverged or self.at(prev[1]) != prev:
            if not req.install:
                return Refused(self.epoch, self.last()[1], f"no entry {prev}")
            self.base, self.entries = req.prev, []
            entries = req.entries
        elif req.install:
            self.compact(prev[1])
        for pos in entries:
            held = self.at(pos[1])
            if held == pos:
                continue
            if held is not None:
                del self.entries[pos[1] - self.base[1] - 1 :]
            self.entries.append(pos)
        return Appended(self.epoch, upto)

    def compact(self, upto_seq: int) -> None:
        n = min(upto_seq - self.base[1], len(self.entries))
        if n > 0:
            self.base = self.entries[n - 1]
            del self.entries[:n]


def _a_request(data: st.DataObject, ref: ListLog) -> Append:
    """An append a primary could send: its prev held here or anywhere, its entries
    contiguous after it with epochs that never go back, often resending what is held."""
    last = ref.last()[1]
    if data.draw(st.booleans()):
        seq = data.draw(st.integers(ref.base[1], last))
        prev = ref.at(seq) or ORIGIN
    else:
        prev = (data.draw(st.integers(0, 4)), data.draw(st.integers(0, last + 2)))
    entries: list[Position] = []
    epoch = prev[0]
    for seq in range(prev[1] + 1, prev[1] + 1 + data.draw(st.integers(0, 6))):
        held = ref.at(seq)
        if held is not None and held[0] >= epoch and data.draw(st.integers(0, 3)):
            epoch = held[0]
        else:
            epoch += data.draw(st.integers(0, 1))
        entries.append((epoch, seq))
    req_epoch = max(ref.epoch + data.draw(st.integers(-1, 1)), 0)
    return Append(req_epoch, prev, tuple(entries), install=data.draw(st.booleans()))


def _assert_same(log: ReplicaLog, ref: ListLog) -> None:
    assert (log.epoch, log.base, log.entries, log.last()) == (
        ref.epoch,
        ref.base,
        ref.entries,
        ref.last(),
    )
    ReplicaLog(log.epoch, log.base, list(log.runs), log.last_seq)  # runs valid and maximal
    for seq in range(ref.base[1] - 1, ref.last()[1] + 2):
        assert log.at(seq) == ref.at(seq)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_the_run_length_log_does_what_a_list_of_positions_does(data: st.DataObject) -> None:
    log, ref = ReplicaLog(), ListLog()
    for _ in range(data.draw(st.integers(1, 40))):
        op = data.draw(
            st.sampled_from(["append", "append", "write", "write_many", "fence", "compact"])
        )
        if op == "append":
            req = _a_request(data, ref)
            assert log.append(req) == ref.append(req), req
        elif op == "write":
            epoch = ref.last()[0] + data.draw(st.integers(0, 1))
            assert log.write(epoch) == ref.write(epoch)
        elif op == "write_many":
            epoch = ref.last()[0] + data.draw(st.integers(0, 1))
            n = data.draw(st.integers(1, 5))
            assert log.write_many(epoch, n) == [ref.write(epoch) for _ in range(n)][-1]
        elif op == "fence":
            epoch = ref.epoch + data.draw(st.integers(-1, 1))
            assert log.fence(epoch) == ref.fence(epoch)
        else:
            upto = data.draw(st.integers(0, ref.last()[1] + 1))
            log.compact(upto)
            ref.compact(upto)
        _assert_same(log, ref)
    assert ReplicaLog.of(ref.entries, ref.epoch, ref.base) == log


# -- the property ------------------------------------------------------------------------

# The sending primary, the append or its answer, and the primary's acknowledged index.
Message = tuple[Primary, Append | Appended | Refused, int]


@dataclass
class Cluster:
    r: int
    w: int
    logs: dict[str, ReplicaLog] = field(default_factory=dict)
    alive: set[str] = field(default_factory=set)
    primaries: list[Primary] = field(default_factory=list)  # every one, replaced too
    retired: set[int] = field(default_factory=set)  # ids of primaries rebuilt after a restart
    inflight: list[tuple[str, str, Message]] = field(default_factory=list)  # (to, from, _)
    epoch: int = 0
    owner: Primary | None = None  # the primary the register names (a failover, a reopen)
    chosen: dict[int, Position] = field(default_factory=dict)  # committed seq -> position
    served: dict[int, Position] = field(default_factory=dict)  # what a read handed out
    dropped: dict[int, set[Position]] = field(default_factory=dict)  # seq -> acked, emptied

    def __post_init__(self) -> None:
        self.nodes = [f"n{i}" for i in range(self.r)]
        self.logs = {n: ReplicaLog() for n in self.nodes}
        self.alive = set(self.nodes)

    def record_commits(self) -> None:
        for p in self.primaries:
            for seq in range(max(p.log.base[1], 1), p.committed + 1):
                pos = p.log.at(seq)
                if pos is not None and not p.replaced:
                    assert self.chosen.setdefault(seq, pos) == pos, (
                        f"seq {seq} committed as {self.chosen[seq]} and as {pos}"
                    )
        self.record_reads()

    def record_reads(self) -> None:
        """What a resume's read on the owner could hand out now, of its own tenure (what
        it took over is served as held, and may be what a later failover drops)."""
        p = self.owner
        if p is None or p.node not in self.alive or p.replaced or id(p) in self.retired:
            return
        for seq in range(max(p.log.first_from(p.floor), p.log.base[1] + 1), p.serves() + 1):
            pos = p.log.at(seq)
            assert pos is not None
            assert self.served.setdefault(seq, pos) == pos, (
                f"seq {seq} served as {self.served[seq]} and as {pos}"
            )

    def holds_or_dropped(self, log: ReplicaLog, seq: int, pos: Position) -> bool:
        """``log`` holds the committed ``pos``, or a primary dropped it as garbage."""
        return log.at(seq) == pos or (seq < log.base[1] and pos in self.dropped.get(seq, ()))

    def drop(self, p: Primary, upto_seq: int) -> None:
        """The client acknowledged ``p``'s entries up to ``upto_seq``, or emptied the queue
        (a clean start): only ever committed ones (see
        test_garbage_must_be_committed_so_a_clean_start_waits_for_its_commit)."""
        assert upto_seq <= p.committed
        for pos in p.log.span(p.log.base[1] + 1, upto_seq):
            self.dropped.setdefault(pos[1], set()).add(pos)
        p.log.compact(upto_seq)

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
        log.base, log.runs, log.last_seq = src.base, list(src.runs), src.last_seq  # and messages
        for seq, pos in self.chosen.items():
            assert self.holds_or_dropped(log, seq, pos), (
                f"the failover at {self.epoch} lost seq {seq} {pos}"
            )
        p = Primary(new, self.epoch, log, self.nodes, self.w)
        p.barrier()
        self.primaries.append(p)
        self.owner = p
        return True

    def deliver(self, to: str, frm: str, msg: Message) -> None:
        p, body, acked = msg
        if isinstance(body, Append):
            log = self.logs[to]
            reply = log.append(body)
            if isinstance(reply, Appended) and acked > log.base[1]:
                log.compact(acked)  # what the shell does with the primary's acked index
            self.inflight.append((frm, to, (p, reply, 0)))
        else:
            p.on_reply(frm, body)

    def step(self, op: int, k: int) -> None:
        """One event; ``k`` picks who or what it happens to."""
        working = [
            p
            for p in self.primaries
            if p.node in self.alive and not p.replaced and id(p) not in self.retired
        ]
        p = working[k % len(working)] if working else None
        if op == 0 and p is not None:
            if k % 4:
                p.write()
            else:  # a group commit's appends to one queue, handed over together
                p.write_many(1 + (k // 4) % 4)
        elif op == 1 and p is not None:
            replica = p.replicas[(k // 5) % len(p.replicas)] if p.replicas else None
            req = p.to_send(replica) if replica is not None else None
            if replica is not None and req is not None:
                self.inflight.append((replica, p.node, (p, req, p.log.base[1])))
        elif op == 2 and self.inflight:
            to, frm, msg = self.inflight.pop(k % len(self.inflight))
            if (k // 11) % 7 == 0:
                self.inflight.append((to, frm, msg))  # delivered twice
            if to in self.alive and (to != self.nodes[-1] or k % 3 == 0):
                self.deliver(to, frm, msg)  # the last node is on a flaky link
        elif op == 3 and self.inflight:
            self.inflight.pop(k % len(self.inflight))  # lost
        elif op == 4 and len(self.nodes) - len(self.alive) < self.r - self.w:
            live = sorted(self.alive)
            self.alive.discard(live[k % len(live)])  # SIGKILL; its log is on disk
        elif op == 5 and len(self.alive) < len(self.nodes):
            node = sorted(set(self.nodes) - self.alive)[k % (len(self.nodes) - len(self.alive))]
            self.alive.add(node)
            for old in [q for q in self.primaries if q.node == node and not q.replaced]:
                if id(old) not in self.retired:  # a primary restarts at its epoch
                    self.retired.add(id(old))
                    new = Primary(node, old.epoch, old.log, self.nodes, self.w)
                    self.primaries.append(new)
                    if old is self.owner:
                        self.owner = new
        elif op == 6 or not self.primaries:
            self.failover(k)
        elif op == 7 and p is not None:
            self.drop(p, p.committed - (k // 13) % 3)  # the client acknowledged these
        elif op == 8 and p is not None and p.committed == p.log.last_seq:
            self.drop(p, p.log.last_seq)  # a clean start: the queue is emptied
        elif op == 9 and p is not None:
            self.round(p, k)  # a moment of quiet: every live replica answers at once
        elif op == 10:
            self.reopen()
        self.record_commits()

    def reopen(self) -> None:
        """The client reconnects to the node of the current primary (the register's
        owner): an Open at a new epoch, no failover. The node keeps its tenure
        (``floor``), so what it wrote under its earlier epochs counts as its own."""
        p = self.owner
        if p is None or p.node not in self.alive or p.replaced or id(p) in self.retired:
            return
        self.epoch += 1
        self.retired.add(id(p))
        self.owner = Primary(p.node, self.epoch, p.log, self.nodes, self.w, p.floor)
        self.primaries.append(self.owner)

    def round(self, p: Primary, k: int = 0) -> bool:
        """``p`` sends every replica what it needs, and hears back; False if none did."""
        sent = False
        for n in p.replicas:
            req = p.to_send(n)
            if req is not None and n in self.alive and (n != self.nodes[-1] or k % 3 == 0):
                self.deliver(n, p.node, (p, req, p.log.base[1]))
                self.deliver(*self.inflight.pop())
                sent = True
        return sent

    def quiesce(self) -> Primary:
        """Everyone back, one more failover, and every message delivered."""
        self.alive = set(self.nodes)
        assert self.failover()
        p = self.primaries[-1]
        for _ in range(4 * self.r + 2 * (p.log.last_seq - p.log.base[1]) + 10):
            if not self.round(p):
                break
        else:
            raise AssertionError("the replicas did not converge")
        self.record_commits()
        return p


@settings(max_examples=500, deadline=None)
@given(
    rw=st.sampled_from([(3, 2), (3, 3), (5, 3), (2, 2), (1, 1)]),
    ops=st.lists(st.tuples(st.integers(0, 10), st.integers(0, 10_000)), min_size=20, max_size=300),
)
def test_no_committed_entry_is_ever_lost_or_changed(
    rw: tuple[int, int], ops: list[tuple[int, int]]
) -> None:
    r, w = rw
    c = Cluster(r, w)
    c.failover()
    for op, k in ops:
        c.step(op, k)
    p = c.quiesce()
    assert p.committed == p.log.last()[1], "a whole cluster commits everything"
    for seq, pos in c.chosen.items():
        assert all(c.holds_or_dropped(c.logs[n], seq, pos) for n in c.nodes), (seq, pos)
    for seq, pos in c.served.items():
        assert all(c.holds_or_dropped(c.logs[n], seq, pos) for n in c.nodes), ("served", seq, pos)
    for n in c.nodes:
        log, lo = c.logs[n], max(c.logs[n].base[1], p.log.base[1])
        ReplicaLog(log.epoch, log.base, list(log.runs), log.last_seq)  # a valid log
        assert log.last() == p.log.last(), n
        assert log.span(lo + 1, log.last_seq) == p.log.span(lo + 1, log.last_seq), n
