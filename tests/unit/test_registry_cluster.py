"""The registry's cluster side, the parts without I/O: the claim's rules (floor, a
stranded queue, a queue that stays where it is until moved), the wire codec, and the
acceptor store's durability and group commit over the in-memory engine."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from services.registry.cluster import codec
from services.registry.cluster.acceptor_store import AcceptorShell, AcceptorStore
from services.registry.engines.base import Change
from services.registry.engines.memory import MemoryEngine, MemoryTable
from services.registry.quorum.acceptor import Slot
from services.registry.quorum.messages import (
    ZERO,
    Accept,
    AcceptReply,
    Ballot,
    Prepare,
    PrepareReply,
    Promise,
    Proposal,
    Refusal,
)
from services.registry.quorum.register import (
    DELETED,
    ONLINE,
    Adopt,
    Claim,
    Entry,
    Release,
    Relocate,
    stranded,
)

K = ("", "c1")
A, B, C = "a", "b", "c"

names = st.sampled_from(["a", "b", "c", "dev1@127.0.0.1"])
ballots = st.builds(Ballot, st.integers(0, 2**40), st.integers(0, 2**62), names)
entries = st.builds(
    Entry,
    names,
    st.integers(0, 2**40),
    st.lists(names, max_size=3).map(tuple),
    st.sampled_from([ONLINE, "offline", DELETED]),
    st.booleans(),
)
values = st.none() | entries
keys = st.tuples(st.sampled_from(["", "mp"]), st.text(min_size=1, max_size=8))


def test_a_claim_takes_the_epoch_above_the_register_and_the_floor() -> None:
    e = Claim(A, (A,), floor=1).apply(None)
    assert e == Entry(A, 1, (A,), ONLINE, False)
    assert Claim(B, (B,), floor=500).apply(e) == Entry(B, 500, (B,), ONLINE, False, prior=1)
    assert Claim(B, (B,), floor=0).apply(Entry(A, 7, (A,), ONLINE)) == Entry(
        B, 8, (B,), ONLINE, prior=7
    )


def test_resuming_a_queue_whose_every_holder_is_down_leaves_the_register_as_it_is() -> None:
    held = Entry(A, 4, (A,), ONLINE, persistent=True)
    refused = Claim(B, (B,), resume=True, down=frozenset({A}), persistent=True)
    assert refused.apply(held) is held
    assert stranded(held, B, frozenset({A}))
    assert not stranded(held, A, frozenset({A})), "the holder itself may take it back"
    assert not stranded(held, B, frozenset()), "a live holder hands it over"
    # A clean start, or a session that was not persistent, goes ahead.
    assert Claim(B, (B,), down=frozenset({A})).apply(held) == Entry(B, 5, (B,), ONLINE, prior=4)
    clean = Entry(A, 4, (A,), ONLINE, persistent=False)
    resumed = Claim(B, (B,), resume=True, down=frozenset({A})).apply(clean)
    assert resumed is not None and resumed.owner == B
    assert not stranded(Entry(A, 4, (A,), DELETED, persistent=True), B, frozenset({A}))


def test_a_resumed_queue_stays_on_its_holders_until_it_is_recorded_as_moved() -> None:
    held = Entry(A, 4, (A,), ONLINE, persistent=True)
    claimed = Claim(B, (B,), resume=True, persistent=True).apply(held)
    assert claimed == Entry(B, 5, (A,), ONLINE, True, prior=4)
    moved = Relocate(5, (B,)).apply(claimed)
    assert moved == Entry(B, 5, (B,), ONLINE, True, prior=4)
    assert Relocate(4, (B,)).apply(claimed) is claimed, "an older epoch moves nothing"
    assert Release(5).apply(moved) == Entry(B, 5, (B,), DELETED, True, prior=4)


@given(ballots, ballots, values)
def test_a_slot_survives_the_wire_and_the_disk(
    promised: Ballot, accepted: Ballot, v: object
) -> None:
    slot = Slot(promised, accepted, v)  # type: ignore[arg-type]
    assert codec.slot_of(codec.slot_pb(slot)) == slot


@given(ballots, st.lists(keys, max_size=4), st.lists(st.tuples(keys, values), max_size=4))
def test_every_quorum_message_survives_the_wire(
    b: Ballot, ks: list[tuple[str, str]], props: list[tuple[tuple[str, str], Entry | None]]
) -> None:
    prepare = Prepare(b, tuple(ks))
    assert codec.prepare_of(codec.prepare_pb(prepare)) == prepare
    accept = Accept(b, 9, tuple(Proposal(k, v) for k, v in props))
    assert codec.accept_of(codec.accept_pb(accept)) == accept
    reply = PrepareReply(
        b,
        "n",
        3,
        tuple(Promise(k, b, v) for k, v in props),
        tuple(Refusal(k, ZERO) for k in ks),
    )
    assert codec.prepare_reply_of(codec.prepare_reply_pb(reply)) == reply
    areply = AcceptReply(b, "n", 3, tuple(ks), tuple(Refusal(k, b) for k in ks))
    assert codec.accept_reply_of(codec.accept_reply_pb(areply)) == areply


class CountingEngine(MemoryEngine):
    def __init__(self, table: MemoryTable) -> None:
        super().__init__(table)
        self.writes = 0

    def write(self, changes: list[Change]) -> None:  # type: ignore[override]
        self.writes += 1
        super().write(changes)


def test_votes_are_on_disk_before_the_reply_and_a_restart_keeps_them() -> None:
    table = MemoryTable()
    store = AcceptorStore(MemoryEngine(table), A)
    store.caught_up()  # a new node with nothing to learn
    shell = AcceptorShell(store)
    b = Ballot(1, 1, B)
    e = Entry(B, 1, (B,), ONLINE)

    async def vote() -> None:
        await shell.step(Prepare(b, (K,)))
        await shell.step(Accept(b, store.incarnation, (Proposal(K, e),)))

    asyncio.run(vote())
    again = AcceptorStore(MemoryEngine(table), A)
    assert again.acceptor.slot(K) == Slot(b, b, e)
    assert again.incarnation > store.incarnation
    assert again.highest_counter == 1


def test_requests_that_arrive_during_a_commit_share_the_next_one() -> None:
    engine = CountingEngine(MemoryTable())
    store = AcceptorStore(engine, A)
    store.caught_up()
    shell = AcceptorShell(store)
    start = engine.writes

    async def many() -> list[object]:
        return await asyncio.gather(
            *(shell.step(Prepare(Ballot(1, 1, B), ((str(i), "c"),))) for i in range(50))
        )

    replies = asyncio.run(many())
    assert all(isinstance(r, PrepareReply) and len(r.promises) == 1 for r in replies)
    assert engine.writes - start <= 2, engine.writes - start


def test_adopt_enters_an_unknown_session_and_never_takes_one_away() -> None:
    assert Adopt(A, 9, True).apply(None) == Entry(A, 9, (A,), ONLINE, True)
    gone = Entry(B, 4, (B,), DELETED)
    assert Adopt(A, 9, False).apply(gone) == Entry(A, 9, (A,), ONLINE, False, prior=4)
    assert Adopt(A, 3, False).apply(gone) is gone, "released at a newer epoch: stale here"
    live = Entry(B, 2, (B,), ONLINE)
    assert Adopt(A, 9, False).apply(live) is live


def test_a_store_without_votes_catches_up_before_voting_even_after_a_restart() -> None:
    table = MemoryTable()
    store = AcceptorStore(MemoryEngine(table), A)
    assert store.acceptor.catching_up, "a fresh store may be a wiped one"
    again = AcceptorStore(MemoryEngine(table), A)
    assert again.acceptor.catching_up, "the flag is on disk until the catch-up ends"
    shell = AcceptorShell(again)
    b = Ballot(3, 1, B)
    e = Entry(B, 4, (B,), ONLINE)

    async def catch_up() -> object:
        refused = await shell.step(Prepare(b, (K,)))
        await shell.seed([(K, b, e)])
        await shell.finish()
        return refused

    refused = asyncio.run(catch_up())
    assert isinstance(refused, PrepareReply) and not refused.promises
    after = AcceptorStore(MemoryEngine(table), A)
    assert not after.acceptor.catching_up
    assert after.acceptor.slot(K) == Slot(b, b, e)


nodes = st.sampled_from([A, B, C])
changes = st.one_of(
    st.builds(
        Claim,
        nodes,
        st.lists(nodes, min_size=1, max_size=2).map(tuple),
        st.just(ONLINE),
        st.booleans(),
        st.integers(0, 50),
        st.booleans(),
        st.frozensets(nodes),
    ),
    st.builds(Release, st.integers(0, 50)),
    st.builds(Relocate, st.integers(0, 50), st.lists(nodes, min_size=1, max_size=2).map(tuple)),
    st.builds(Adopt, nodes, st.integers(1, 50), st.booleans()),
)


@given(st.lists(changes, max_size=40))
def test_no_sequence_of_changes_lowers_an_epoch_or_takes_a_live_session_by_adopting(
    seq: list[object],
) -> None:
    """Whatever the proposers apply, in any order: epochs never go down, a claim raises
    the epoch unless it leaves the value as it was (a stranded queue), a tombstone keeps
    its epoch, and Adopt never replaces a live session."""
    value: Entry | None = None
    for change in seq:
        new = change.apply(value)  # type: ignore[attr-defined]
        if value is not None:
            assert new is not None, "a register is never emptied"
            assert new.epoch >= value.epoch
        if isinstance(change, Claim):
            assert new is value or (new is not None and new.epoch > (value.epoch if value else 0))
            if new is not value:
                assert new is not None and new.owner == change.node and new.live
        if isinstance(change, Adopt) and value is not None and value.live:
            assert new is value
        if isinstance(change, (Release, Relocate)) and value is not None:
            assert new is not None and new.epoch == value.epoch and new.owner == value.owner
        value = new
