"""The session directory's quorum register: each piece by example, then the whole cluster
under Hypothesis.

The examples pin the rules one by one (ballot order, the acceptor's two rules, the
proposer's majority over members, batching, the catch-up of a wiped acceptor). The
property tests run :mod:`tests.unit.quorum_sim` — several proposers on 3 and 5 members,
with loss, duplication, reordering, restarts, abandoned rounds and wiped disks — and
judge the history afterwards: no lost update, one owner per epoch, epochs that never
fall, reads that are never stale.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.session_key import SessionKey
from services.registry.quorum.acceptor import Acceptor, CatchUpError, Slot
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
    Reply,
    Request,
    Send,
)
from services.registry.quorum.proposer import Committed, Failed, KeyBusy, Output, Proposer
from services.registry.quorum.register import (
    DELETED,
    OFFLINE,
    ONLINE,
    Change,
    Claim,
    Entry,
    FailOver,
    Read,
    Release,
    SetState,
    subscriptions_ours,
    subscriptions_void,
)
from tests.unit.quorum_sim import Faults, Sim, check, chosen

K: SessionKey = ("", "c1")
K2: SessionKey = ("", "c2")
K3: SessionKey = ("m", "c1")
ABC = ["a", "b", "c"]


def b(counter: int, node: str = "p", incarnation: int = 1) -> Ballot:
    return Ballot(counter, incarnation, node)


def e(owner: str, epoch: int, state: str = ONLINE) -> Entry:
    return Entry(owner, epoch, (owner,), state)


# -- the register's values and changes ---------------------------------------------------


def test_worked_example_of_the_changes() -> None:
    e1 = Claim("a", ("a", "b")).apply(None)
    assert e1 == Entry("a", 1, ("a", "b"), ONLINE)
    e2 = SetState(1, OFFLINE).apply(e1)
    assert e2 == Entry("a", 1, ("a", "b"), OFFLINE)
    e3 = SetState(7, ONLINE).apply(e2)
    assert e3 == e2
    e4 = Claim("b", ("b", "c")).apply(e3)
    assert e4 == Entry("b", 2, ("b", "c"), ONLINE, prior=1)
    e5 = Release(2).apply(e4)
    assert e5 == Entry("b", 2, ("b", "c"), DELETED, prior=1)


def test_a_released_register_keeps_its_epoch_for_the_next_claim() -> None:
    gone = Release(3).apply(e("a", 3))
    assert gone is not None and gone.state == DELETED
    assert Claim("b", ("b",)).apply(gone) == Entry("b", 4, ("b",), ONLINE, prior=3)
    assert Release(3).apply(None) is None
    assert SetState(1, OFFLINE).apply(None) is None
    assert Read().apply(gone) is gone


def test_a_failover_takes_an_offline_replicated_session_only_from_the_dead_owner() -> None:
    owned = Claim("a", ("a", "b", "c"), persistent=True).apply(None)
    assert owned is not None
    moved = FailOver("a", "b", ("b", "c")).apply(owned)
    assert moved == Entry("b", 2, ("b", "c"), OFFLINE, True, prior=1)
    # a second failover for the same death, or one by a node without a copy: nothing
    assert FailOver("a", "c", ("c", "b")).apply(moved) == moved
    assert FailOver("a", "d", ("d",)).apply(owned) == owned
    # a session that is not persistent has no queue to save; a deleted one has none left
    clean = Claim("a", ("a", "b")).apply(None)
    assert FailOver("a", "b", ("b",)).apply(clean) == clean
    gone = Release(1).apply(owned)
    assert FailOver("a", "b", ("b",)).apply(gone) == gone
    assert FailOver("a", "b", ("b",)).apply(None) is None
    # the floor keeps the node's own fencing tokens below the new epoch
    assert FailOver("a", "b", ("b",), floor=9).apply(owned) == Entry(
        "b", 9, ("b",), OFFLINE, True, prior=1
    )


def test_only_a_session_nobody_else_owns_loses_its_subscriptions_with_a_stale_report() -> None:
    # never claimed, or released: nobody's session, a stale report may drop them
    assert subscriptions_ours(None, "a", 4)
    assert subscriptions_ours(Release(4).apply(e("b", 4)), "a", 2)
    # a's own session at the reported epoch, or an older one: a's to drop
    assert subscriptions_ours(e("a", 4), "a", 4)
    assert subscriptions_ours(e("a", 3, OFFLINE), "a", 4)
    # handed over to b after epoch 4 (the flong case): b's listener re-owns them
    assert not subscriptions_ours(Claim("b", ("b",)).apply(e("a", 4)), "a", 4)
    # a newer registration of a itself, not yet in its table
    assert not subscriptions_ours(e("a", 5), "a", 4)
    # the start-up sweep: a clean session of a is gone with the restart, a persistent
    # one is on disk (if the table lacks it, something else is wrong: keep them)
    assert subscriptions_ours(e("a", 4), "a", None)
    assert not subscriptions_ours(Entry("a", 4, ("a",), OFFLINE, True), "a", None)
    assert not subscriptions_ours(e("b", 4), "a", None)


def test_a_clean_takeover_from_another_node_voids_the_old_subscriptions() -> None:
    persistent = Entry("a", 4, ("a",), ONLINE, True)
    clean = e("a", 4)
    # b claims: a clean start, or a session that was clean, leaves them to nobody
    assert subscriptions_void(persistent, "b", clean_start=True)
    assert subscriptions_void(clean, "b", clean_start=False)
    # a resumed persistent session brings them (b's listener re-owns them)
    assert not subscriptions_void(persistent, "b", clean_start=False)
    # nothing before, a released one (its end dropped them), or this node's own
    assert not subscriptions_void(None, "b", clean_start=True)
    assert not subscriptions_void(Release(4).apply(persistent), "b", clean_start=True)
    assert not subscriptions_void(clean, "a", clean_start=True)
    # and the two rules never both hand them out: the claimer voids them exactly when
    # the old owner may not drop them itself
    claimed = Claim("b", ("b",)).apply(clean)
    assert subscriptions_void(clean, "b", True) and not subscriptions_ours(claimed, "a", 4)


@given(
    st.lists(
        st.tuples(st.sampled_from(["claim", "release", "offline"]), st.sampled_from(ABC)),
        max_size=12,
    ),
    st.sampled_from(ABC),
)
def test_a_node_never_drops_the_subscriptions_of_a_session_claimed_after_its_epoch(
    steps: list[tuple[str, str]], node: str
) -> None:
    """Whatever happened to the register, a report of ``node`` at any epoch it held
    drops nothing once another node has claimed the id since."""
    value: Entry | None = None
    held: list[int] = []  # epochs ``node`` owned
    for op, who in steps:
        if op == "claim":
            value = Claim(who, (who,)).apply(value)
            assert value is not None
            if who == node:
                held.append(value.epoch)
        elif op == "release" and value is not None:
            value = Release(value.epoch).apply(value)
        elif value is not None:
            value = SetState(value.epoch, OFFLINE).apply(value)
    for epoch in held:
        ours = subscriptions_ours(value, node, epoch)
        if value is not None and value.live and value.owner != node:
            assert not ours
        if value is not None and value.live and value.epoch > epoch:
            assert not ours
        if value is None or not value.live:
            assert ours


# -- ballots -------------------------------------------------------------------------------


def test_ballots_order_by_counter_then_incarnation_then_node() -> None:
    assert ZERO < Ballot(1, 0, "") < Ballot(1, 0, "a") < Ballot(1, 1, "a") < Ballot(2, 0, "a")
    assert Ballot(2, 1, "a") > Ballot(1, 99, "z")


def test_a_restarted_node_never_mints_a_ballot_it_used_before() -> None:
    """Counters restart at 0; the incarnation (new at every start) keeps ballots apart."""
    first, _ = Proposer("a", incarnation=1).propose({K: Read()}, ABC)
    second, _ = Proposer("a", incarnation=2).propose({K: Read()}, ABC)
    assert first.counter == second.counter == 1
    assert first != second
    # or the same incarnation, with the counter the shell saved
    third, _ = Proposer("a", incarnation=2, counter=second.counter).propose({K: Read()}, ABC)
    assert third > second


# -- the acceptor --------------------------------------------------------------------------


def test_acceptor_promises_reports_and_refuses_lower_ballots() -> None:
    acc = Acceptor("a", 5)
    r1 = acc.step(Prepare(b(2), (K,)))
    assert r1.persist == ((K, Slot(b(2))),)
    assert r1.reply == PrepareReply(b(2), "a", 5, (Promise(K, ZERO, None),), ())
    r2 = acc.step(Prepare(b(1, "q"), (K,)))
    assert r2.persist == ()
    assert r2.reply == PrepareReply(b(1, "q"), "a", 5, (), (Refusal(K, b(2)),))
    r3 = acc.step(Accept(b(2), 5, (Proposal(K, e("p", 1)),)))
    assert r3.persist == ((K, Slot(b(2), b(2), e("p", 1))),)
    assert r3.reply == AcceptReply(b(2), "a", 5, (K,), ())
    r4 = acc.step(Prepare(b(3, "q"), (K,)))
    assert r4.reply == PrepareReply(b(3, "q"), "a", 5, (Promise(K, b(2), e("p", 1)),), ())


def test_a_duplicated_prepare_gets_the_same_answer_and_persists_nothing() -> None:
    acc = Acceptor("a", 1)
    first = acc.step(Prepare(b(2), (K,)))
    again = acc.step(Prepare(b(2), (K,)))
    assert again.reply == first.reply
    assert again.persist == ()


def test_acceptor_accepts_only_the_ballot_it_promised() -> None:
    acc = Acceptor("a", 1)
    # never promised b(5): refused, though nothing higher was promised either
    r = acc.step(Accept(b(5), 1, (Proposal(K, e("p", 1)),)))
    assert r.reply == AcceptReply(b(5), "a", 1, (), (Refusal(K, ZERO),))
    acc.step(Prepare(b(2), (K,)))
    acc.step(Prepare(b(3, "q"), (K,)))
    r = acc.step(Accept(b(2), 1, (Proposal(K, e("p", 1)),)))
    assert r.reply == AcceptReply(b(2), "a", 1, (), (Refusal(K, b(3, "q")),))
    assert acc.slot(K) == Slot(b(3, "q"))
    # a duplicated Accept of the promised ballot is accepted again, same value
    ok = Accept(b(3, "q"), 1, (Proposal(K, e("q", 1)),))
    assert acc.step(ok).reply == acc.step(ok).reply == AcceptReply(b(3, "q"), "a", 1, (K,), ())


def test_an_accept_for_another_incarnation_is_refused() -> None:
    acc = Acceptor("a", 2, {K: Slot(b(4))})
    r = acc.step(Accept(b(4), 1, (Proposal(K, e("p", 1)),)))
    assert r.reply == AcceptReply(b(4), "a", 2, (), (Refusal(K, ZERO),))
    assert r.persist == ()


def test_one_prepare_carries_many_keys_and_each_is_answered_on_its_own() -> None:
    acc = Acceptor("a", 1, {K2: Slot(b(9, "q")), K3: Slot(b(1), b(1), e("p", 3))})
    r = acc.step(Prepare(b(4), (K, K2, K3)))
    assert r.reply == PrepareReply(
        b(4),
        "a",
        1,
        (Promise(K, ZERO, None), Promise(K3, b(1), e("p", 3))),
        (Refusal(K2, b(9, "q")),),
    )
    assert dict(r.persist) == {K: Slot(b(4)), K3: Slot(b(4), b(1), e("p", 3))}


def test_an_acceptor_catching_up_refuses_to_vote_until_seeded_and_finished() -> None:
    acc = Acceptor("a", 3, catching_up=True)
    r = acc.step(Prepare(b(2), (K, K2)))
    assert r.reply == PrepareReply(b(2), "a", 3, (), (Refusal(K, ZERO), Refusal(K2, ZERO)))
    assert r.persist == ()
    assert acc.step(Accept(b(2), 3, (Proposal(K, None),))).reply == AcceptReply(
        b(2), "a", 3, (), (Refusal(K, ZERO),)
    )
    seeded = acc.seed([(K, b(7), e("c", 2)), (K2, b(3), e("b", 1))])
    assert dict(seeded.persist) == {K: Slot(b(7), b(7), e("c", 2)), K2: Slot(b(3), b(3), e("b", 1))}
    assert acc.seed([(K, b(6), e("c", 1))]).persist == ()  # older than the slot: ignored
    acc.finish_catch_up()
    assert not acc.catching_up
    r = acc.step(Prepare(b(8), (K,)))
    assert isinstance(r.reply, PrepareReply)
    assert r.reply.promises == (Promise(K, b(7), e("c", 2)),)
    try:
        acc.seed([(K, b(9), None)])
    except CatchUpError:
        pass
    else:
        raise AssertionError("seeded an acceptor that votes")


requests = st.lists(
    st.tuples(
        st.sampled_from(["prepare", "accept"]),
        st.integers(1, 4),  # ballot counter
        st.sampled_from(["p", "q"]),  # proposer
        st.lists(st.sampled_from([K, K2, K3]), min_size=1, max_size=3),
        st.integers(1, 2),  # addressed incarnation
        st.booleans(),  # restart after this step
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(requests)
def test_an_acceptor_restarted_from_what_it_persisted_answers_as_if_it_never_stopped(
    steps: list[tuple[str, int, str, list[SessionKey], int, bool]],
) -> None:
    """The durability contract: the slots in ``Ready.persist`` are the whole state."""
    steady = Acceptor("a", 1)
    disk: dict[SessionKey, Slot] = {}
    restarted = Acceptor("a", 1)
    for kind, counter, node, keys, inc, restart in steps:
        ballot = Ballot(counter, 1, node)
        msg: Request = (
            Prepare(ballot, tuple(keys))
            if kind == "prepare"
            else Accept(ballot, inc, tuple(Proposal(k, e(node, counter)) for k in keys))
        )
        want, got = steady.step(msg), restarted.step(msg)
        assert got.reply == want.reply
        disk.update(got.persist)
        if restart:
            restarted = Acceptor("a", 1, disk)
    assert {k: restarted.slot(k) for k in (K, K2, K3)} == {k: steady.slot(k) for k in (K, K2, K3)}


# -- the proposer --------------------------------------------------------------------------


def test_worked_example_of_the_proposer() -> None:
    e4 = Entry("c", 4, ("c", "a"), ONLINE)
    p = Proposer("a", incarnation=7)
    ballot, out = p.propose({K: Claim("a", ("a", "b"))}, ABC)
    assert ballot == Ballot(1, 7, "a")
    assert out == Output(tuple(Send(m, Prepare(ballot, (K,))) for m in ABC))
    assert p.step(PrepareReply(ballot, "b", 1, (Promise(K, ZERO, None),), ())) == Output()
    out = p.step(PrepareReply(ballot, "c", 2, (Promise(K, Ballot(1, 3, "c"), e4),), ()))
    new = Entry("a", 5, ("a", "b"), ONLINE, prior=4)
    assert out.sends == (
        Send("b", Accept(ballot, 1, (Proposal(K, new),))),
        Send("c", Accept(ballot, 2, (Proposal(K, new),))),
    )
    assert p.step(AcceptReply(ballot, "b", 1, (K,), ())) == Output()
    out = p.step(AcceptReply(ballot, "c", 2, (K,), ()))
    assert out.outcomes == (Committed(K, ballot, e4, new),)
    assert p.in_flight() == {}


def test_a_round_sends_one_prepare_and_one_accept_per_member_for_all_its_keys() -> None:
    p = Proposer("a", 1)
    changes: dict[SessionKey, Change] = {K: Claim("a", ("a",)), K2: Read(), K3: Release(1)}
    ballot, out = p.propose(changes, ["a", "b", "c", "d", "e"])
    assert [s.to for s in out.sends] == ["a", "b", "c", "d", "e"]
    assert all(s.message == Prepare(ballot, (K, K2, K3)) for s in out.sends)
    promises = (Promise(K, ZERO, None), Promise(K2, ZERO, None), Promise(K3, b(1), e("x", 1)))
    sends: list[Send] = []
    for m in ("c", "d", "e"):
        sends += p.step(PrepareReply(ballot, m, 1, promises, ())).sends
    assert [s.to for s in sends] == ["c", "d", "e"]
    accept = sends[0].message
    assert isinstance(accept, Accept)
    assert accept.proposals == (
        Proposal(K, e("a", 1)),
        Proposal(K2, None),
        Proposal(K3, e("x", 1, DELETED)),
    )


def test_a_majority_of_members_is_needed_whoever_is_up() -> None:
    """Two promises of five members are not a majority, however many members are down;
    duplicates and replies from non-members do not count either."""
    p = Proposer("a", 1)
    ballot, _ = p.propose({K: Read()}, ["a", "b", "c", "d", "e"])
    yes = (Promise(K, ZERO, None),)
    for reply in [
        PrepareReply(ballot, "a", 1, yes, ()),
        PrepareReply(ballot, "a", 1, yes, ()),
        PrepareReply(ballot, "a", 2, yes, ()),
        PrepareReply(ballot, "b", 1, yes, ()),
        PrepareReply(ballot, "zz", 1, yes, ()),
    ]:
        assert p.step(reply) == Output()
    assert p.step(PrepareReply(ballot, "c", 1, yes, ())).sends != ()


def test_a_higher_ballot_fails_the_key_and_the_retry_outbids_it() -> None:
    p = Proposer("a", 1)
    ballot, _ = p.propose({K: Read(), K2: Read()}, ABC)
    higher = Ballot(40, 3, "b")
    out = p.step(PrepareReply(ballot, "b", 1, (Promise(K2, ZERO, None),), (Refusal(K, higher),)))
    assert out.outcomes == (Failed(K, ballot, higher),)
    assert p.in_flight() == {K2: ballot}  # the other key goes on
    retry, _ = p.propose({K: Read()}, ABC)
    assert retry > higher


def test_a_key_fails_when_a_majority_can_no_longer_promise() -> None:
    """Members that do not vote (catching up) are refusals at or below our ballot."""
    p = Proposer("a", 1)
    ballot, _ = p.propose({K: Read()}, ABC)
    assert p.step(PrepareReply(ballot, "b", 4, (), (Refusal(K, ZERO),))) == Output()
    out = p.step(PrepareReply(ballot, "c", 4, (), (Refusal(K, ZERO),)))
    assert out.outcomes == (Failed(K, ballot, None),)


def test_phase_two_goes_only_to_the_members_that_promised() -> None:
    p = Proposer("a", 1)
    ballot, _ = p.propose({K: Read()}, ["a", "b", "c", "d", "e"])
    yes = (Promise(K, b(1), e("x", 1)),)
    for m in "abc":
        out = p.step(PrepareReply(ballot, m, 1, yes, ()))
    assert {s.to for s in out.sends} == {"a", "b", "c"}
    # a late promise holding nothing newer than the value built on joins the vote ...
    out = p.step(PrepareReply(ballot, "d", 3, (Promise(K, ZERO, None),), ()))
    assert out.sends == (Send("d", Accept(ballot, 3, (Proposal(K, e("x", 1)),))),)
    # ... one holding a newer value does not: its Accept is never sent, its vote not counted
    assert p.step(PrepareReply(ballot, "e", 1, (Promise(K, b(2), e("y", 2)),), ())) == Output()
    assert p.step(AcceptReply(ballot, "e", 1, (K,), ())) == Output()
    # nor does a voter restarted under another incarnation
    for m in "ab":
        assert p.step(AcceptReply(ballot, m, 1, (K,), ())) == Output()
    assert p.step(AcceptReply(ballot, "d", 4, (K,), ())) == Output()
    assert p.step(AcceptReply(ballot, "c", 1, (), (Refusal(K, ZERO),))) == Output()
    out = p.step(AcceptReply(ballot, "d", 3, (K,), ()))
    assert out.outcomes == (Committed(K, ballot, e("x", 1), e("x", 1)),)


def test_a_key_fails_when_a_majority_of_its_voters_refuse_the_accept() -> None:
    p = Proposer("a", 1)
    ballot, _ = p.propose({K: Read()}, ABC)
    for m in "ab":
        p.step(PrepareReply(ballot, m, 1, (Promise(K, ZERO, None),), ()))
    assert p.step(AcceptReply(ballot, "b", 1, (), (Refusal(K, ZERO),))) == Output(
        (), (Failed(K, ballot, None),)
    )


def test_abandon_fails_what_is_left_and_later_replies_are_ignored() -> None:
    p = Proposer("a", 1)
    ballot, _ = p.propose({K: Read(), K2: Read()}, ABC)
    assert p.abandon(ballot).outcomes == (Failed(K, ballot, None), Failed(K2, ballot, None))
    assert p.in_flight() == {}
    assert p.step(PrepareReply(ballot, "b", 1, (Promise(K, ZERO, None),), ())) == Output()
    assert p.abandon(ballot) == Output()


def test_a_key_in_flight_cannot_start_another_round() -> None:
    p = Proposer("a", 1)
    ballot, _ = p.propose({K: Read()}, ABC)
    for bad in [{K: Read(), K2: Read()}, {}]:
        try:
            p.propose(bad, ABC)
        except ValueError as err:
            assert isinstance(err, KeyBusy) == bool(bad)
        else:
            raise AssertionError("accepted a busy key or an empty round")
    p.abandon(ballot)
    p.propose({K: Read()}, ABC)


# -- wiring them together ------------------------------------------------------------------


def run_waves(proposer: Proposer, acceptors: dict[str, Acceptor], out: Output) -> list[Output]:
    """Deliver everything a wave produced, hop by hop; returns what each proposer step made."""
    steps: list[Output] = []
    sends = list(out.sends)
    while sends:
        replies: list[Reply] = []
        for s in sends:
            ready = acceptors[s.to].step(s.message)
            assert ready.reply is not None
            replies.append(ready.reply)
        outs = [proposer.step(r) for r in replies]
        steps.append(Output(sum((o.sends for o in outs), ()), sum((o.outcomes for o in outs), ())))
        sends = list(steps[-1].sends)
    return steps


@given(st.sampled_from([3, 5]), st.lists(st.integers(0, 4), min_size=1, max_size=8))
@settings(max_examples=30, deadline=None)
def test_a_lone_proposer_commits_every_change_in_two_round_trips(n: int, picks: list[int]) -> None:
    members = [f"n{i}" for i in range(n)]
    acceptors = {m: Acceptor(m, 1) for m in members}
    p = Proposer("n0", 1)
    for epoch, pick in enumerate(picks, start=1):
        changes: dict[SessionKey, Change] = {K: Claim(members[pick % n], ("x",)), K2: Read()}
        _, out = p.propose(changes, members)
        waves = run_waves(p, acceptors, out)
        assert len(waves) == 2  # prepare and promises, accept and acceptances
        assert len(waves[0].sends) == len(members)  # one Accept per member, both keys in it
        done = {c.key: c for c in waves[1].outcomes if isinstance(c, Committed)}
        assert set(done) == {K, K2}
        claimed = done[K].value
        assert claimed is not None and claimed.epoch == epoch


def test_a_wiped_acceptor_that_votes_at_once_can_lose_a_commit() -> None:
    """Why catching up exists: ``a`` and ``b`` commit epoch 1 for ``a``; ``a`` loses its
    disk; if it voted with the blank state, ``c`` (cut off from ``b``) could read the
    register as empty from ``a`` and itself, and commit a second epoch 1, owned by ``c``."""

    def cluster() -> dict[str, Acceptor]:
        acceptors = {m: Acceptor(m, 1) for m in ABC}
        pa = Proposer("a", 1)
        _, out = pa.propose({K: Claim("a", ("a",))}, ABC)
        to_ab = Output(tuple(s for s in out.sends if s.to != "c"))
        assert run_waves(pa, acceptors, to_ab)[-1].outcomes[0] == Committed(
            K, Ballot(1, 1, "a"), None, Entry("a", 1, ("a",), ONLINE)
        )
        return acceptors

    unsafe = cluster()
    unsafe["a"] = Acceptor("a", 2)  # wiped, and voting at once: the bug
    pc = Proposer("c", 1)
    ballot, out = pc.propose({K: Claim("c", ("c",))}, ABC)
    to_ac = Output(tuple(s for s in out.sends if s.to != "b"))
    lost = run_waves(pc, unsafe, to_ac)[-1].outcomes
    assert lost == (Committed(K, ballot, None, Entry("c", 1, ("c",), ONLINE)),)

    safe = cluster()
    safe["a"] = Acceptor("a", 2, catching_up=True)  # the rule: a refuses to vote
    pc = Proposer("c", 1)
    ballot, out = pc.propose({K: Claim("c", ("c",))}, ABC)
    to_ac = Output(tuple(s for s in out.sends if s.to != "b"))
    assert run_waves(pc, safe, to_ac) == [Output()]  # no majority without b
    to_b = Output(tuple(s for s in out.sends if s.to == "b"))
    done = run_waves(pc, safe, to_b)[-1].outcomes
    assert done == (
        Committed(K, ballot, Entry("a", 1, ("a",), ONLINE), Entry("c", 2, ("c",), ONLINE, prior=1)),
    )


def test_a_promise_of_a_wiped_incarnation_is_never_combined_with_the_new_ones_vote() -> None:
    """Why Accepts name the incarnation that promised. ``c`` holds a promise from ``a``
    made before ``a`` was wiped; ``a`` catches up (nothing to seed yet), then helps ``b``
    commit epoch 1 for ``b`` and, on a duplicated Prepare, promises ``c``'s ballot too. If
    ``a`` accepted ``c``'s Accept, ``c`` would commit a second epoch 1, built on the empty
    register its stale promise reported."""
    acceptors = {m: Acceptor(m, 1) for m in ABC}

    def deliver(p: Proposer, send: Send) -> Output:
        ready = acceptors[send.to].step(send.message)
        assert ready.reply is not None
        return p.step(ready.reply)

    pc, qb = Proposer("c", 1), Proposer("b", 1)
    ballot_c, out = pc.propose({K: Claim("c", ("c",))}, ABC)
    prepare_c = {s.to: s for s in out.sends}
    assert deliver(pc, prepare_c["a"]) == Output()  # a's promise, then a loses its disk
    acceptors["a"] = Acceptor("a", 2, catching_up=True)
    assert acceptors["b"].known_keys() == acceptors["c"].known_keys() == []
    acceptors["a"].finish_catch_up()

    ballot_b, out = qb.propose({K: Claim("b", ("b",))}, ABC)
    accepts = [a for s in out.sends if s.to != "c" for a in deliver(qb, s).sends]
    done = [o for a in accepts for o in deliver(qb, a).outcomes]
    assert done == [Committed(K, ballot_b, None, Entry("b", 1, ("b",), ONLINE))]

    out = deliver(pc, prepare_c["c"])  # c's own promise: with a's old one, a majority
    assert [(s.to, s.message) for s in out.sends] == [
        ("a", Accept(ballot_c, 1, (Proposal(K, Entry("c", 1, ("c",), ONLINE)),))),
        ("c", Accept(ballot_c, 1, (Proposal(K, Entry("c", 1, ("c",), ONLINE)),))),
    ]
    assert deliver(pc, prepare_c["a"]) == Output()  # the duplicate: a (2) promises ballot_c
    assert acceptors["a"].slot(K).promised == ballot_c
    results = [o for s in out.sends for o in deliver(pc, s).outcomes]
    assert results == [Failed(K, ballot_c, None)]
    assert acceptors["a"].slot(K).value == Entry("b", 1, ("b",), ONLINE)


def test_a_wiped_node_catches_up_and_votes_again() -> None:
    sim = Sim(3, seed=1)
    for i in range(4):
        sim.propose("n0", {K: Claim(f"n{i % 3}", ("n0",)), K2: Claim("n1", ("n1",))})
        sim.drain()
    assert sim.wipe("n1") and not sim.wipe("n2")  # one at a time on three members
    assert sim.nodes["n1"].acceptor.catching_up
    while sim.nodes["n1"].catch_up is not None:
        sim.catch_up_step("n1")
        sim.drain()
    assert sim.nodes["n1"].acceptor.slot(K).value == Entry("n0", 4, ("n0",), ONLINE, prior=3)
    # n1 votes again: with n2 wiped now, n0 and n1 still make a majority
    assert sim.wipe("n2")
    assert sim.read_all("n0")[K] == Entry("n0", 4, ("n0",), ONLINE, prior=3)
    check(sim)


# -- the cluster under Hypothesis ----------------------------------------------------------


def run_cluster(sim: Sim, steps: int) -> None:
    """Faults for ``steps`` steps, then a quiet network: every node reads every key, all
    reads agree, and the whole history passes the checker."""
    sim.run(steps)
    sim.quiesce()
    views = [sim.read_all(name) for name in sim.names]
    assert all(v == views[0] for v in views)
    check(sim)
    last = {key: values[-1][1] for key, values in chosen(sim).items()}
    assert views[0] == {key: last.get(key) for key in sim.keys}


faults = st.builds(
    Faults,
    propose=st.sampled_from([0.05, 0.15, 0.3]),
    loss=st.sampled_from([0.0, 0.05, 0.2]),
    dup=st.sampled_from([0.0, 0.05, 0.2]),
    abandon=st.sampled_from([0.0, 0.02, 0.05]),
    restart=st.sampled_from([0.0, 0.02, 0.05]),
)


@settings(max_examples=800, deadline=None)
@given(
    st.sampled_from([3, 5]),
    st.integers(0, 2**32 - 1),
    faults,
    st.integers(1, 5),
    st.integers(50, 400),
)
def test_concurrent_proposers_with_loss_duplication_reordering_and_restarts(
    n: int, seed: int, f: Faults, proposers: int, steps: int
) -> None:
    run_cluster(Sim(n, seed, f, proposers=proposers), steps)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([3, 5]), st.integers(0, 2**32 - 1), faults, st.integers(100, 400))
def test_wiped_acceptors_catch_up_without_losing_a_commit(
    n: int, seed: int, f: Faults, steps: int
) -> None:
    """Wipes, catch-ups and votes under faults; then every catch-up finishes on a quiet
    network and the caught-up acceptors vote through a second faulty phase."""
    sim = Sim(n, seed, Faults(f.propose, f.loss, f.dup, f.abandon, f.restart, wipe=0.02))
    sim.run(steps)
    sim.settle_catch_ups()
    run_cluster(sim, steps)
