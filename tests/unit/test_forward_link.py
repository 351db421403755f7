"""The forwarding link's two ends, over a simulated stream that breaks, loses what is in
flight and reconnects: each copy is routed at most once and in order, every copy's
waiter hears exactly one outcome, and a failed copy is never reported as delivered."""

from __future__ import annotations

import random
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.listener.forward.inbox import Inbox
from services.listener.forward.outbox import Outbox, OutboxFull
from services.listener.forward.parked import Parked
from services.listener.forward.sender import Copy
from services.pb import common_pb2

T = TypeVar("T")


def _sent(entries: list[tuple[int, T, float]]) -> list[tuple[int, T]]:
    return [(seq, item) for seq, item, _pushed in entries]


def test_outbox_resends_after_a_break_and_acks_in_order() -> None:
    o: Outbox[str] = Outbox(capacity=10)
    assert [o.push(x, 0.0) for x in "abc"] == [1, 2, 3]
    assert _sent(o.take(2)) == [(1, "a"), (2, "b")]
    assert _sent(o.take(5)) == [(3, "c")] and o.unsent() == 0
    o.rewind()
    assert o.unsent() == 3
    assert _sent(o.take(5)) == [(1, "a"), (2, "b"), (3, "c")]
    assert _sent(o.ack(2)) == [(1, "a"), (2, "b")]
    o.rewind()
    assert _sent(o.take(5)) == [(3, "c")]


def test_outbox_is_bounded_and_expires_the_oldest() -> None:
    o: Outbox[int] = Outbox(capacity=2)
    o.push(1, 0.0)
    o.push(2, 5.0)
    with pytest.raises(OutboxFull):
        o.push(3, 5.0)
    assert o.expire(now=11.0, max_age=10.0) == [1]
    assert _sent(o.take(5)) == [(2, 2)]
    o.push(3, 11.0)
    assert len(o) == 2


def test_outbox_withdraws_only_what_no_stream_carried() -> None:
    o: Outbox[str] = Outbox(capacity=10)
    for x in "abcde":
        o.push(x, 0.0)
    assert _sent(o.take(2)) == [(1, "a"), (2, "b")]
    o.rewind()  # a and b may have reached the peer: resent_upto 2
    assert o.withdraw(lambda x: x in "abd") == ["d"]
    assert _sent(o.take(9)) == [(1, "a"), (2, "b"), (3, "c"), (5, "e")]  # 4 is a gap
    assert o.withdraw(lambda x: True) == []  # all sent on this stream
    assert _sent(o.ack(5)) == [(1, "a"), (2, "b"), (3, "c"), (5, "e")]
    assert len(o) == 0


def test_outbox_takes_back_what_it_is_told_sent_or_not_and_keeps_the_rest_in_order() -> None:
    o: Outbox[str] = Outbox(capacity=10)
    for x in "abcdef":
        o.push(x, 0.0)
    assert _sent(o.take(3)) == [(1, "a"), (2, "b"), (3, "c")]
    assert o.take_back(lambda x: x in "bde") == ["b", "d", "e"]  # sent first, then unsent
    assert _sent(o.take(9)) == [(6, "f")]
    o.rewind()
    assert _sent(o.take(9)) == [(1, "a"), (3, "c"), (6, "f")]
    assert _sent(o.ack(6)) == [(1, "a"), (3, "c"), (6, "f")]


def test_inbox_drops_resends_and_acks_cumulatively() -> None:
    box = Inbox()
    assert [box.accept(1), box.accept(2), box.accept(2)] == [True, True, False]
    box.complete(2, ok=True)
    assert box.take_ack() is None  # 1 is still out
    box.complete(1, ok=False)
    assert box.take_ack() == (2, [1], [], [])
    assert box.take_ack() is None
    assert box.take_ack(again=True) == (2, [1], [], [])  # a new stream hears it again
    box.confirm(2)
    assert box.take_ack(again=True) == (2, [], [], [])
    assert box.accept(3)
    box.complete(3, ok=False)
    assert box.take_ack() == (3, [3], [], [])  # lost with a broken stream
    box.confirm(2)  # a batch sent before the sender heard it
    assert box.take_ack(again=True) == (3, [3], [], [])  # so the failure is still told
    box.confirm(3)
    assert box.accept(7)  # a gap: the sender expired 4..6
    box.complete(7, ok=True)
    assert box.take_ack() == (7, [], [], [])


ops = st.lists(
    st.sampled_from(
        [
            "push",
            "push",
            "send",
            "deliver",
            "complete",
            "complete",
            "ack",
            "break",
            "tick",
            "restart",
            "withdraw",
        ]
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(ops, st.randoms(use_true_random=False))
def test_a_breaking_link_routes_each_copy_at_most_once_in_order_with_one_outcome_each(
    script: list[str], rng: random.Random
) -> None:
    """Across broken streams and restarts of the receiving node too: a copy its previous
    run may have taken (routed, outcome unknown: a replica may hold it) is never routed
    again; it is answered as failed instead (``resent_upto``, ``Inbox.doubtful``)."""
    outbox: Outbox[int] = Outbox(capacity=50)
    inbox = Inbox()
    fresh = True  # the receiver has no inbox for this sender yet
    # (sender's acked, batch, resent_upto)
    to_receiver: list[tuple[int, list[tuple[int, int]], int]] = []
    to_sender: list[tuple[int, list[int], list[int], list[int]]] = []
    routed: list[int] = []
    pending: dict[int, int] = {}  # seq -> item, routed and not complete
    fate: dict[int, bool | None] = {}  # item -> completed ok? (None: unknown)
    outcomes: dict[int, str] = {}
    heard_upto = 0
    now = 0.0
    next_item = 0

    def step(op: str, allow_break: bool = True) -> None:
        nonlocal heard_upto, now, next_item, inbox, fresh
        if op == "push":
            try:
                outbox.push(next_item, now)
            except OutboxFull:
                outcomes[next_item] = "refused"
            next_item += 1
        elif op == "send":
            batch = _sent(outbox.take(rng.randint(1, 5)))
            if batch:
                to_receiver.append((heard_upto, batch, outbox.resent_upto))
        elif op == "deliver" and to_receiver:
            acked, batch, resent_upto = to_receiver.pop(0)
            if fresh:
                inbox.doubtful_upto = resent_upto
                fresh = False
            inbox.confirm(acked)
            for seq, item in batch:
                if not inbox.accept(seq):
                    continue
                if inbox.doubtful(seq):
                    inbox.complete(seq, False)
                    continue
                routed.append(item)
                pending[seq] = item
            ack = inbox.take_ack()
            if ack:
                to_sender.append(ack)
        elif op == "complete" and pending:
            seq = rng.choice(sorted(pending))
            ok = rng.random() < 0.8
            fate[pending.pop(seq)] = ok
            inbox.complete(seq, ok)
            ack = inbox.take_ack()
            if ack:
                to_sender.append(ack)
        elif op == "ack" and to_sender:
            upto, failed, _settled, _returned = to_sender.pop(0)
            heard_upto = max(heard_upto, upto)
            for seq, item, _pushed in outbox.ack(upto):
                ok = seq not in failed
                assert item not in outcomes, "two outcomes for one copy"
                outcomes[item] = "ok" if ok else "failed"
        elif op == "break" and allow_break:
            to_receiver.clear()
            to_sender.clear()
            outbox.rewind()
            again = inbox.take_ack(again=True)
            if again:
                to_sender.append(again)
        elif op == "restart":
            # The receiving node dies: what it had routed and not completed may or may
            # not have been taken (unknown), and its next run starts with no inbox.
            for item in pending.values():
                fate[item] = None
            pending.clear()
            # A copy it completed whose ack had not reached the sender is doubtful too:
            # resent to the next run, it is answered as failed though it was delivered
            # (its publisher sends again: at least once, never lost).
            for item, ok in fate.items():
                if ok and item not in outcomes:
                    fate[item] = None
            inbox, fresh = Inbox(), True
            to_receiver.clear()
            to_sender.clear()
            outbox.rewind()
        elif op == "withdraw":
            # sessions moved off the peer: their copies no stream carried go elsewhere
            for item in outbox.withdraw(lambda _item: rng.random() < 0.5):
                assert item not in outcomes
                outcomes[item] = "rerouted"
        elif op == "tick":
            now += 4.0
            for item in outbox.expire(now, 10.0):
                assert item not in outcomes
                outcomes[item] = "expired"

    for op in script:
        step(op)
    # heal: no more breaks or expiry; everything in flight finishes
    for i in range(4000):
        if not len(outbox) and not to_receiver and not to_sender and not pending:
            break
        step(("send", "deliver", "complete", "ack")[i % 4], allow_break=False)
    assert not len(outbox)
    assert routed == sorted(routed), "copies routed out of order"
    assert len(routed) == len(set(routed)), "a copy was routed twice"
    rerouted = {item for item, outcome in outcomes.items() if outcome == "rerouted"}
    assert not rerouted & set(routed), "a withdrawn copy reached the peer too"
    assert set(outcomes) == set(range(next_item))
    for item, outcome in outcomes.items():
        if outcome == "ok":
            assert fate.get(item) is True, f"copy {item} reported delivered but was not"
        elif outcome == "failed":  # never routed, or failed, or a restart's unknown
            assert fate.get(item) is not True


class _Publisher:
    """A connection as flow control sees it."""

    def __init__(self) -> None:
        self.closed = False
        self.flow = None
        self.paused = False

    def backlog(self) -> int:
        return 0

    def pause_input(self) -> None:
        self.paused = True

    def resume_input(self) -> None:
        self.paused = False


def _copy() -> Copy:
    return Copy("c", 0, b"", None, "m", "t")


def test_a_congested_link_holds_its_publishers_until_it_drains() -> None:
    import asyncio

    from services.listener import flow
    from services.listener.forward.sender import LINK_LIMITS, Forwarder

    async def run() -> None:
        fw = Forwarder(
            "a@h", "a@h", "a@h/l", "cookie", 10 * LINK_LIMITS.high, 60.0, lambda *a: None
        )
        pub = _Publisher()
        try:
            for _ in range(LINK_LIMITS.high - 1):
                fw.forward("b@h", _copy(), pub)  # type: ignore[arg-type]
            assert not pub.paused
            fw.forward("b@h", _copy(), pub)  # type: ignore[arg-type]
            assert pub.paused, "the link reached its high mark"
            link = fw.links["b@h"]
            sent = link.outbox.take(LINK_LIMITS.high)
            link.outbox.ack(sent[LINK_LIMITS.high - LINK_LIMITS.low - 2][0])
            flow.drained(link, LINK_LIMITS)
            assert pub.paused, "not yet down to the low mark"
            link.outbox.ack(sent[LINK_LIMITS.high - LINK_LIMITS.low][0])
            flow.drained(link, LINK_LIMITS)
            assert not pub.paused
        finally:
            await fw.stop()

    asyncio.run(run())


def test_a_link_that_keeps_moving_holds_its_publishers_and_a_stuck_one_lets_go() -> None:
    """Acknowledgements are progress: a congested link holds its publishers past
    FLOW_MAX_HOLD as long as they come; without them it is given up on in that time."""
    import asyncio

    from services.listener import flow
    from services.listener.forward.sender import LINK_LIMITS, Forwarder

    async def run() -> None:
        fw = Forwarder(
            "a@h", "a@h", "a@h/l", "cookie", 10 * LINK_LIMITS.high, 60.0, lambda *a: None
        )
        pub = _Publisher()
        try:
            for _ in range(LINK_LIMITS.high + 200):
                fw.forward("b@h", _copy(), pub)  # type: ignore[arg-type]
            link = fw.links["b@h"]
            sent = link.outbox.take(LINK_LIMITS.high + 200)
            assert pub.paused
            steps = int(2 * flow.FLOW_MAX_HOLD / 0.1)
            for i in range(steps):  # ten acks a hold period, never down to the low mark
                await asyncio.sleep(0.1)
                link.outbox.ack(sent[i][0])
                flow.progressed(link, LINK_LIMITS)
                assert pub.paused, f"let go while the link moved ({(i + 1) * 0.1:.1f} s)"
            await asyncio.sleep(flow.FLOW_MAX_HOLD * 1.5)  # no acks now
            assert not pub.paused, "a link that stopped moving still holds its publishers"
        finally:
            await fw.stop()

    asyncio.run(run())


@given(
    st.lists(
        st.tuples(
            st.integers(1, 2**63),
            st.text(max_size=8),
            st.text(max_size=30),
            st.integers(0, 2),
            st.booleans(),
            st.lists(st.integers(1, 2**28 - 1), max_size=3).map(tuple),
            st.builds(
                lambda t, p: common_pb2.MqttMessage(topic=t, payload=p).SerializeToString(),
                st.text(max_size=20),
                st.binary(max_size=200),
            ),
        ),
        max_size=20,
    ),
    st.text(max_size=40),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63),
)
@settings(max_examples=200, deadline=None)
def test_a_hand_written_batch_reads_back_as_the_generated_classes_would(
    items: list[tuple[int, str, str, int, bool, tuple[int, ...], bytes]],
    sender: str,
    incarnation: int,
    acked: int,
) -> None:
    from services.listener import convert
    from services.pb import forward_pb2

    bodies = [(seq, convert.forwarded_body(*rest)) for seq, *rest in items]  # type: ignore[arg-type]
    batch = forward_pb2.ForwardBatch.FromString(
        convert.forward_batch(sender, incarnation, acked, bodies)
    )
    assert (batch.sender, batch.incarnation, batch.acked) == (sender, incarnation, acked)
    assert batch.resent_upto == 0
    again = convert.forward_batch(sender, incarnation, acked, bodies, resent_upto=acked + 7)
    assert forward_pb2.ForwardBatch.FromString(again).resent_upto == acked + 7
    got = [
        (
            i.seq,
            i.mountpoint,
            i.client_id,
            i.qos,
            i.retain,
            tuple(i.sub_ids),
            i.message.SerializeToString(),
        )
        for i in batch.items
    ]
    assert got == items
    one = forward_pb2.Forwarded(
        seq=1, client_id="c", qos=1, sub_ids=[5, 300], message=common_pb2.MqttMessage(topic="t")
    ).SerializeToString()
    assert (
        convert.forward_batch(
            "", 0, 0, [(1, convert.forwarded_body("", "c", 1, False, (5, 300), b"\x12\x01t"))]
        )
        == b"\x22" + bytes([len(one)]) + one
    )


def test_a_copy_completed_while_an_ack_is_on_its_way_is_acknowledged_next() -> None:
    """The receiving stream clears its wake-up before it reads the inbox: a copy that
    completes while the previous acknowledgement is being sent is in the next one, not
    left until some other copy arrives (at the end of a burst: never, and its publisher
    waited out cluster.forward_timeout for a copy long since queued)."""
    import asyncio
    from collections.abc import AsyncGenerator, AsyncIterator, Callable
    from typing import cast

    from services.listener import convert
    from services.listener.forward.receiver import ForwardServicer
    from services.pb import forward_pb2

    async def run() -> None:
        dones: list[Callable[[str | None], None]] = []
        servicer = ForwardServicer(lambda item, done, settle, party: dones.append(done))
        batches: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def requests() -> AsyncIterator[bytes]:
            while (batch := await batches.get()) is not None:
                yield batch

        class Context:
            async def send_initial_metadata(self, metadata: object) -> None:
                pass

        message = common_pb2.MqttMessage(topic="t", qos=1).SerializeToString()
        body = convert.forwarded_body("", "c", 1, False, (), message)
        raw = convert.forward_batch("n1/l", 7, 0, [(1, body)])
        await batches.put(raw)  # served without a request deserializer: read by hand
        acks = cast(
            AsyncGenerator[forward_pb2.ForwardAck, None], servicer.Stream(requests(), Context())
        )
        first = await asyncio.wait_for(acks.__anext__(), 5)
        assert first.upto == 0  # what a new stream hears at once: nothing complete yet
        dones[0](None)  # completes while the stream waits at its yield
        second = await asyncio.wait_for(acks.__anext__(), 5)
        assert (second.upto, list(second.failed)) == (1, [])
        await batches.put(None)
        await acks.aclose()

    asyncio.run(run())


def test_a_node_seen_down_holds_its_copies_and_a_moved_session_takes_back_its_own() -> None:
    """Nothing is written towards a node the view shows down (a stream that looks open
    may be dead): the copies stay unsent, so those of sessions that fail over elsewhere
    can be withdrawn, by session key, mountpoint included, and sent once."""
    import asyncio

    from services.listener.forward.sender import Forwarder

    async def run() -> None:
        fw = Forwarder("a@h", "a@h", "a@h/l", "cookie", 100, 60.0, lambda *a: None)
        try:
            fw.set_down(frozenset({"b@h"}))
            for cid, mp in (("x", ""), ("y", ""), ("x", "mp"), ("x", "")):
                fw.forward("b@h/1", Copy(cid, 1, cid.encode(), None, "m", "t", mp))
            link = fw.links["b@h/1"]
            assert link.held(), "a listener process of a node seen down"
            await asyncio.sleep(0.05)  # the link task runs and, held, takes nothing
            assert link.outbox.unsent() == 4
            back = fw.withdraw("b@h/1", {("", "x")})
            assert [(c.mountpoint, c.client_id) for c in back] == [("", "x"), ("", "x")]
            assert [(c.mountpoint, c.client_id) for c in fw.withdraw("b@h/1", {("mp", "x")})] == [
                ("mp", "x")
            ]
            assert fw.withdraw("c@h", {("", "y")}) == []  # no link there
            fw.set_down(frozenset())
            assert not link.held()
        finally:
            await fw.stop()

    asyncio.run(run())


def test_a_node_going_down_gives_back_its_shared_copies_and_holds_the_others() -> None:
    """A shared group's copy for a member on a node seen down may have died there with
    the member: it goes back to the broker (``lost``) to be picked again, while copies
    for ordinary sessions stay held, for the node's return or their session's move."""
    import asyncio

    from services.listener.forward.sender import Forwarder

    lost: list[tuple[str, str, str]] = []
    dropped: list[str] = []

    async def run() -> None:
        fw = Forwarder(
            "a@h",
            "a@h",
            "a@h/l",
            "cookie",
            100,
            60.0,
            lambda n, c, r: dropped.append(c.client_id),
            lambda n, c, r: lost.append((n, c.client_id, r)),
        )
        try:
            for cid, share in (("s1", "$share/g/t"), ("p", ""), ("s2", "$share/g/t")):
                fw.forward("b@h", Copy(cid, 1, b"", None, "m", "t", "", share))
            fw.set_down(frozenset({"b@h"}))
            assert lost == [("b@h", "s1", "node_down"), ("b@h", "s2", "node_down")]
            link = fw.links["b@h"]
            assert [c.client_id for c in link.outbox.take_back(lambda c: True)] == ["p"]
            assert dropped == []
        finally:
            await fw.stop()

    asyncio.run(run())


def test_an_inbox_reports_a_shared_copys_outcome_once_its_copy_is_acknowledged() -> None:
    box = Inbox()
    for seq in (1, 2, 3):
        box.accept(seq)
    box.complete(2, ok=True)
    box.outcome(2, settled=True)  # the member was quick; 1 is still being appended
    assert box.take_ack() is None  # nothing to say: upto has not reached 2
    box.complete(1, ok=True)
    box.complete(3, ok=True)
    box.outcome(3, settled=False)
    assert box.take_ack() == (3, [], [2], [3])
    assert box.take_ack() is None
    assert box.take_ack(again=True) == (3, [], [2], [3])  # a new stream: not heard yet
    box.confirm_outcomes([2, 3])
    assert box.take_ack(again=True) == (3, [], [], [])


def test_parked_copies_wait_for_their_outcome_and_are_bounded() -> None:
    p: Parked[str] = Parked(capacity=3, max_age=10.0)
    assert p.peer_run(7) == []  # the peer's first answer: nothing held before it
    for seq, item in enumerate("abcd", 1):
        p.park(seq, item, now=float(seq))
    assert p.forgotten == 1 and len(p) == 3  # "a", the oldest, made room
    p.settle(2)
    assert p.returned(3) == "c"
    assert p.returned(3) is None  # a repeated outcome
    assert p.heard() == [2, 3, 3]
    assert p.heard() == []
    p.park(5, "e", now=20.0)
    p.expire(now=16.0)  # "d" parked at 4.0, more than 10 s ago
    assert p.forgotten == 2 and len(p) == 1
    assert p.peer_run(7) == []  # the same run
    assert p.peer_run(8) == ["e"]  # a new run: what the old one held died with it
    assert len(p) == 0


shared_ops = st.lists(
    st.sampled_from(
        ["push", "send", "deliver", "member", "member", "ack", "break", "restart", "down"]
    ),
    max_size=150,
)


@settings(max_examples=300, deadline=None)
@given(shared_ops, st.randoms(use_true_random=False))
def test_a_shared_copy_is_settled_only_if_its_member_has_it_and_otherwise_comes_back(
    script: list[str], rng: random.Random
) -> None:
    """The link of shared copies, over lost streams, receiver restarts and the node
    seen down: each copy ends exactly once at the sender, settled (only if its member
    acknowledged it) or back to be picked again (whenever its member did not: it lost
    it, or its node died or restarted with it). A copy its member acknowledged may still
    come back when the news died with the receiver: a duplicate, never a loss."""
    outbox: Outbox[int] = Outbox(capacity=1000)
    parked: Parked[int] = Parked(capacity=1000, max_age=1e9)
    inbox, run = Inbox(), 1
    fresh = True
    to_receiver: list[tuple[list[tuple[int, int]], int, list[int]]] = []
    to_sender: list[tuple[int, list[int], list[int], list[int]]] = []
    with_member: dict[int, int] = {}  # seq -> item, delivered, no outcome yet
    member_acked: set[int] = set()  # items
    ended: dict[int, str] = {}  # item -> "settled" | "back"
    next_item = 0

    def end(item: int, how: str) -> None:
        assert item not in ended, f"two ends for copy {item}"
        ended[item] = how

    def step(op: str, faults: bool = True) -> None:
        nonlocal inbox, run, fresh, next_item
        if op == "push":
            outbox.push(next_item, 0.0)
            next_item += 1
        elif op == "send":
            for item in parked.peer_run(run):  # the stream's metadata names the run
                end(item, "back")
            batch = _sent(outbox.take(rng.randint(1, 4)))
            if batch:
                to_receiver.append((batch, outbox.resent_upto, parked.heard()))
        elif op == "deliver" and to_receiver:
            batch, resent_upto, heard = to_receiver.pop(0)
            if fresh:
                inbox.doubtful_upto, fresh = resent_upto, False
            inbox.confirm_outcomes(heard)
            for seq, item in batch:
                if not inbox.accept(seq):
                    continue
                if inbox.doubtful(seq):
                    inbox.complete(seq, False)
                    continue
                inbox.complete(seq, True)  # delivered to the member
                with_member[seq] = item
            ack = inbox.take_ack()
            if ack:
                to_sender.append(ack)
        elif op == "member" and with_member:
            seq = rng.choice(sorted(with_member))
            item = with_member.pop(seq)
            acked = rng.random() < 0.7
            if acked:
                member_acked.add(item)
            inbox.outcome(seq, acked)
            ack = inbox.take_ack()
            if ack:
                to_sender.append(ack)
        elif op == "ack" and to_sender:
            upto, failed, settled, returned = to_sender.pop(0)
            for seq, item, _pushed in outbox.ack(upto):
                if seq not in failed:
                    parked.park(seq, item, 0.0)
                else:
                    end(item, "back")
            for seq in settled:
                parked.settle(seq)
            for seq in returned:
                item = parked.returned(seq)
                if item is not None:
                    end(item, "back")
        elif op == "break" and faults:
            to_receiver.clear()
            to_sender.clear()
            outbox.rewind()
            again = inbox.take_ack(again=True)
            if again:
                to_sender.append(again)
        elif op == "restart" and faults:
            with_member.clear()  # the members' sessions died with the node
            inbox, run, fresh = Inbox(), run + 1, True
            to_receiver.clear()
            to_sender.clear()
            outbox.rewind()
        elif op == "down" and faults:
            # the view saw the node down: everything it may hold comes back
            for item in parked.take_all() + outbox.take_back(lambda _i: True):
                end(item, "back")
            with_member.clear()
            inbox, run, fresh = Inbox(), run + 1, True
            to_receiver.clear()
            to_sender.clear()
            outbox.rewind()

    for op in script:
        step(op)
    for i in range(6000):  # heal: every member answers, every message arrives
        if not (len(outbox) or len(parked) or to_receiver or to_sender or with_member):
            break
        step(("send", "deliver", "member", "ack")[i % 4], faults=False)
    assert not len(parked) and not len(outbox)
    settled_items = set(range(next_item)) - {i for i, how in ended.items() if how == "back"}
    assert settled_items <= member_acked, "settled, but its member never acknowledged it"
    assert set(ended) | settled_items == set(range(next_item))
