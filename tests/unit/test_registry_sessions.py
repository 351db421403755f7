"""The pure session table: epochs, session-present rules, takeover plans, stale reports, expiry."""

from __future__ import annotations

import ast
from dataclasses import fields, replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.registry.sessions import (
    NEVER,
    US,
    Connect,
    DeleteQueue,
    NotifyTakeover,
    OpenQueue,
    Policy,
    PublishSession,
    Session,
    SessionTable,
    end_steps,
)

K = ("", "c1")
T0 = 1_700_000_000 * US


def connect(
    key: tuple[str, str] = K,
    *,
    listener: str = "L1",
    clean: bool = False,
    expiry: int = NEVER,
    ver: int = 5,
) -> Connect:
    return Connect(key, "n1", listener, clean, expiry, ver, peer="127.0.0.1:5", username="u")


def registered(table: SessionTable, c: Connect, now: int = T0) -> Session:
    plan = table.plan_register(c, now)
    assert table.commit(plan)
    return plan.session


@pytest.mark.parametrize("module", ["sessions", "leadership"])
def test_core_modules_do_no_io(module: str) -> None:
    path = Path(__file__).parents[2] / "services" / "registry" / f"{module}.py"
    banned = {"asyncio", "grpc", "lmdb", "socket", "time", "os", "services.pb"}
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    assert not {m for m in found if m in banned or m.split(".")[0] in banned}


# -- epochs --------------------------------------------------------------------------


def test_epochs_grow_per_key_and_across_keys() -> None:
    t = SessionTable(Policy())
    e1 = registered(t, connect()).epoch
    e2 = registered(t, connect(("", "other"))).epoch
    e3 = registered(t, connect()).epoch
    assert 0 < e1 < e2 < e3


def test_a_forgotten_session_never_gets_an_old_epoch_back() -> None:
    t = SessionTable(Policy())
    s = registered(t, connect(expiry=0))
    ended = t.disconnected(K, s.epoch, 0, T0 + 1)
    assert ended is not None and not ended.persistent
    assert t.forget(K, s.epoch)
    assert t.get(K) is None
    assert registered(t, connect()).epoch > s.epoch


def test_epoch_floor_from_storage_is_respected() -> None:
    t = SessionTable(Policy(), epoch=0)
    t.raise_epoch(5000)
    assert registered(t, connect()).epoch == 5001
    t.raise_epoch(10)  # never lowers
    assert registered(t, connect()).epoch == 5002


def test_plan_advances_the_counter_even_if_never_committed() -> None:
    t = SessionTable(Policy())
    abandoned = t.plan_register(connect(), T0)
    assert registered(t, connect()).epoch > abandoned.session.epoch


def test_commit_refuses_an_older_plan() -> None:
    t = SessionTable(Policy())
    older = t.plan_register(connect(listener="L1"), T0)
    newer = t.plan_register(connect(listener="L2"), T0)
    assert t.commit(newer)
    assert not t.commit(older)
    current = t.get(K)
    assert current is not None and current.listener_id == "L2"


def test_restore_undoes_a_commit_whose_writes_failed() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect())
    offline = t.disconnected(K, old.epoch, None, T0 + 1)
    assert offline is not None and t.online == 0
    plan = t.plan_register(connect(listener="L2"), T0 + 2)
    assert t.commit(plan) and t.online == 1
    assert t.restore(K, plan.session.epoch, offline)
    assert t.get(K) == offline and t.online == 0
    assert not t.restore(K, plan.session.epoch, None)  # nothing of that epoch to undo
    assert t.get(K) == offline
    assert registered(t, connect()).epoch > plan.session.epoch  # never issued again


def test_restore_of_a_first_registration_forgets_the_id() -> None:
    t = SessionTable(Policy())
    plan = t.plan_register(connect(), T0)
    assert t.commit(plan)
    assert t.restore(K, plan.session.epoch, None)
    assert t.get(K) is None and t.online == 0 and len(t) == 0


# -- expiry policy ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ver", "requested", "policy", "expected"),
    [
        (5, 0, Policy(), 0),
        (5, 300, Policy(), 300),
        (5, NEVER, Policy(), NEVER),
        (5, 300, Policy(max_session_expiry_interval=60), 60),
        (5, NEVER, Policy(max_session_expiry_interval=60), 60),
        (4, 0, Policy(persistent_client_expiration=60), 0),
        (4, NEVER, Policy(persistent_client_expiration=60), 60),
        (4, NEVER, Policy(), NEVER),
        (3, NEVER, Policy(persistent_client_expiration=3600), 3600),
        (4, NEVER, Policy(max_session_expiry_interval=5), NEVER),  # v5 cap only
    ],
)
def test_effective_expiry(ver: int, requested: int, policy: Policy, expected: int) -> None:
    assert policy.expiry(ver, requested) == expected


# -- session present and the steps of a registration -------------------------------------


def test_a_first_registration_alone_opens_a_clean_queue_and_drops_nothing() -> None:
    """No subscriptions outlive the session that made them, so an id the table does not
    hold has none: the record is written without a drop, which nobody waits for."""
    t = SessionTable(Policy(max_offline_messages=50, max_online_len=120))
    plan = t.plan_register(connect(), T0)
    assert not plan.session_present and plan.keeps_queue
    e = plan.session.epoch
    assert plan.steps() == [
        # both limits: the store applies the offline one to appends made offline
        OpenQueue(K, e, clean=True, max_len=120, max_offline=50),
        PublishSession(K, plan.session, drop_subs=False),
    ]


def test_a_registrations_own_offline_limit_overrides_the_nodes() -> None:
    t = SessionTable(Policy(max_offline_messages=50, max_online_len=120))
    c = Connect(K, "n1", "L1", False, NEVER, 5, max_offline_messages=7)
    plan = t.plan_register(c, T0)
    assert plan.steps()[0] == OpenQueue(K, plan.session.epoch, True, 120, 7)


def test_a_first_registration_in_a_cluster_wipes_what_another_node_left_behind() -> None:
    """The directory gave the epoch: the id may have lived on another node, with
    subscriptions in gossip that this table never saw."""
    t = SessionTable(Policy(max_offline_messages=50, max_online_len=120))
    plan = t.plan_register(connect(), T0, epoch=40)
    assert plan.steps() == [
        OpenQueue(K, 40, clean=True, max_len=120, max_offline=50),
        PublishSession(K, plan.session, drop_subs=True),
    ]
    # a minority side registering during a netsplit: no claim, other members all the same
    tentative = t.plan_register(connect(key=("", "k2")), T0, only_node=False)
    assert tentative.steps()[-1] == PublishSession(("", "k2"), tentative.session, drop_subs=True)


def test_a_clean_session_replacing_nothing_needs_no_step() -> None:
    """The cheap CONNECT: no queue, no directory record, nothing of the id to wipe."""
    t = SessionTable(Policy())
    plan = t.plan_register(connect(expiry=0, ver=4), T0)
    assert not plan.keeps_queue and not plan.session.durable and not plan.session.queued
    assert plan.steps() == []


def test_a_clean_session_replacing_a_persistent_one_wipes_it() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect())
    t.disconnected(K, old.epoch, NEVER, T0 + US)
    plan = t.plan_register(connect(expiry=0, clean=True), T0 + 2 * US)
    e = plan.session.epoch
    assert plan.steps() == [
        DeleteQueue(K, e, "clean start"),
        PublishSession(K, None, drop_subs=True, directory=True),
    ]


def test_a_clean_session_replacing_a_clean_one_drops_only_its_subscriptions() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect(expiry=0))
    t.disconnected(K, old.epoch, 0, T0 + US)  # its end is still pending (e.g. gossip was down)
    plan = t.plan_register(connect(expiry=0), T0 + 2 * US)
    assert plan.steps() == [PublishSession(K, None, drop_subs=True, directory=False)]


def test_resuming_an_offline_persistent_session() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect(expiry=60))
    t.disconnected(K, old.epoch, 60, T0 + 10 * US)
    plan = t.plan_register(connect(expiry=60, listener="L2"), T0 + 20 * US)
    assert plan.session_present and plan.takeover is None
    assert plan.steps() == [
        OpenQueue(K, plan.session.epoch, clean=False, max_len=0),
        PublishSession(K, plan.session, drop_subs=False),
    ]


def test_clean_start_discards_a_persistent_session() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect())
    t.disconnected(K, old.epoch, NEVER, T0 + US)
    plan = t.plan_register(connect(clean=True), T0 + 2 * US)
    assert not plan.session_present
    assert OpenQueue(K, plan.session.epoch, clean=True, max_len=0) in plan.steps()


def test_an_expired_session_is_not_present_even_before_the_timer_ran() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect(expiry=5))
    t.disconnected(K, old.epoch, 5, T0)
    assert t.plan_register(connect(expiry=5), T0 + 4 * US).session_present
    assert not t.plan_register(connect(expiry=5), T0 + 5 * US).session_present


def test_v5_resume_with_zero_expiry_keeps_the_queue_for_this_connection() -> None:
    """MQTT 5: clean_start=0 resumes the session even if it ends with this connection."""
    t = SessionTable(Policy())
    old = registered(t, connect(expiry=60))
    t.disconnected(K, old.epoch, 60, T0)
    plan = t.plan_register(connect(expiry=0), T0 + US)
    assert plan.session_present and plan.keeps_queue and not plan.session.persistent
    assert isinstance(plan.steps()[0], OpenQueue)


def test_taking_over_an_online_session_notifies_first() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect(listener="L1"))
    plan = t.plan_register(connect(listener="L2"), T0 + US)
    steps = plan.steps()
    assert steps[0] == NotifyTakeover("L1", K, old.epoch, plan.session.epoch, "n1")
    assert isinstance(steps[1], OpenQueue) and isinstance(steps[2], PublishSession)
    assert plan.session_present  # an online persistent session is taken over, not dropped
    assert plan.previous == old


def test_taking_over_an_online_non_persistent_session_wipes_it() -> None:
    t = SessionTable(Policy())
    registered(t, connect(expiry=0))
    plan = t.plan_register(connect(expiry=0, listener="L2"), T0 + US)
    steps = plan.steps()
    assert [type(s) for s in steps] == [NotifyTakeover, PublishSession]
    assert steps[1] == PublishSession(K, None, drop_subs=True, directory=False)
    assert not plan.session_present


def test_a_recovered_session_is_still_notified() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect(listener="L1"))
    t2 = SessionTable(Policy())
    recovered = t2.load([old], T0 + 5 * US)
    assert [s.recovered for s in recovered] == [True]
    stored = t2.get(K)
    assert stored is not None and not stored.online and stored.disconnected_us == T0 + 5 * US
    plan = t2.plan_register(connect(listener="L2"), T0 + 6 * US)
    assert isinstance(plan.steps()[0], NotifyTakeover)
    assert plan.session.epoch > old.epoch


def test_only_a_session_nobody_holds_may_open_its_queue_behind_the_answer() -> None:
    """Its queue Open deletes nothing and fences out no live writer; a takeover's does
    (the old connection may still write), and a clean queue must be empty first."""
    t = SessionTable(Policy())
    old = registered(t, connect(expiry=60))
    assert not t.plan_register(connect(expiry=60, listener="L2"), T0 + US).resumes_offline
    t.disconnected(K, old.epoch, 60, T0 + 2 * US)
    assert t.plan_register(connect(expiry=60), T0 + 3 * US).resumes_offline
    assert not t.plan_register(connect(expiry=60, clean=True), T0 + 3 * US).resumes_offline
    recovered = SessionTable(Policy())
    recovered.load([old], T0 + 4 * US)  # online when the registry stopped: maybe still live
    assert not recovered.plan_register(connect(expiry=60), T0 + 5 * US).resumes_offline
    fresh = SessionTable(Policy())
    assert not fresh.plan_register(connect(expiry=60), T0).resumes_offline


# -- Disconnected --------------------------------------------------------------------


def test_a_stale_disconnect_changes_nothing() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect(listener="L1"))
    new = registered(t, connect(listener="L2"), T0 + US)
    assert t.disconnected(K, old.epoch, 0, T0 + 2 * US) is None
    assert t.get(K) == new and t.online == 1


def test_disconnect_marks_offline_with_its_time() -> None:
    t = SessionTable(Policy())
    s = registered(t, connect(expiry=60))
    off = t.disconnected(K, s.epoch, 60, T0 + 7 * US)
    assert off is not None and not off.online and off.disconnected_us == T0 + 7 * US
    assert off.expires_at_us == T0 + 67 * US
    assert t.online == 0
    # A repeated report keeps the first disconnection time.
    again = t.disconnected(K, s.epoch, 60, T0 + 9 * US)
    assert again is not None and again.disconnected_us == T0 + 7 * US


def test_v5_disconnect_may_change_expiry_but_not_revive_a_zero_one() -> None:
    t = SessionTable(Policy())
    s = registered(t, connect(expiry=60))
    off = t.disconnected(K, s.epoch, 0, T0)
    assert off is not None and not off.persistent
    s2 = registered(t, connect(expiry=0), T0 + US)
    off2 = t.disconnected(K, s2.epoch, 3600, T0 + 2 * US)
    assert off2 is not None and off2.session_expiry == 0


def test_v3_disconnect_keeps_the_configured_expiry() -> None:
    t = SessionTable(Policy(persistent_client_expiration=600))
    s = registered(t, connect(expiry=NEVER, ver=4))
    off = t.disconnected(K, s.epoch, 0, T0)
    assert off is not None and off.session_expiry == 600


# -- expiry --------------------------------------------------------------------------


def test_due_only_after_the_deadline_and_only_the_current_epoch() -> None:
    t = SessionTable(Policy())
    s = registered(t, connect(expiry=10))
    assert t.due(T0 + 100 * US, 10) == []  # online
    t.disconnected(K, s.epoch, 10, T0 + US)
    assert t.due(T0 + 10 * US, 10) == []
    due = t.due(T0 + 11 * US, 10)
    assert [d.epoch for d in due] == [s.epoch]
    assert t.due(T0 + 12 * US, 10) == []  # popped; the caller retries if cleanup fails
    t.retry_at(due[0], T0 + 20 * US)
    assert t.due(T0 + 19 * US, 10) == []
    assert t.due(T0 + 20 * US, 10) == due


def test_a_reconnected_session_is_not_expired() -> None:
    t = SessionTable(Policy())
    s = registered(t, connect(expiry=10))
    t.disconnected(K, s.epoch, 10, T0)
    registered(t, connect(expiry=10), T0 + 5 * US)
    assert t.due(T0 + 60 * US, 10) == []


def test_never_is_never_due_and_ended_sessions_are_due_at_once() -> None:
    t = SessionTable(Policy())
    keep = registered(t, connect(("", "keep"), expiry=NEVER))
    gone = registered(t, connect(("", "gone"), expiry=0))
    t.disconnected(keep.key, keep.epoch, NEVER, T0)
    t.disconnected(gone.key, gone.epoch, 0, T0)
    assert [s.key for s in t.due(T0, 10)] == [gone.key]
    assert t.due(T0 + 10**9 * US, 10) == []


def test_due_respects_its_limit() -> None:
    t = SessionTable(Policy())
    for i in range(5):
        s = registered(t, connect(("", f"c{i}"), expiry=1))
        t.disconnected(s.key, s.epoch, 1, T0)
    assert len(t.due(T0 + 2 * US, 3)) == 3
    assert len(t.due(T0 + 2 * US, 3)) == 2


def test_end_steps_remove_queue_subscriptions_and_record() -> None:
    s = replace(registered(SessionTable(Policy()), connect()), online=False)
    expected = [DeleteQueue(K, s.epoch, "expired"), PublishSession(K, None, drop_subs=True)]
    assert end_steps(s, "expired") == expected
    assert end_steps(s, "expired", drop_subs=False) == expected  # durable: always all of it


def test_end_steps_of_a_clean_session() -> None:
    s = replace(registered(SessionTable(Policy()), connect(expiry=0)), online=False)
    assert end_steps(s, "session ended") == [
        PublishSession(K, None, drop_subs=True, directory=False)
    ]
    assert end_steps(s, "session ended", drop_subs=False) == []


def test_a_resumed_session_that_ends_with_its_connection_still_owns_its_queue() -> None:
    t = SessionTable(Policy())
    old = registered(t, connect(expiry=60))
    t.disconnected(K, old.epoch, 60, T0)
    resumed = registered(t, connect(expiry=0), T0 + US)
    assert resumed.queued and resumed.durable and not resumed.persistent
    steps = end_steps(replace(resumed, online=False), "session ended", drop_subs=False)
    assert DeleteQueue(K, resumed.epoch, "session ended") in steps


def test_forget_checks_the_epoch() -> None:
    t = SessionTable(Policy())
    s = registered(t, connect())
    assert not t.forget(K, s.epoch - 1)
    assert t.forget(K, s.epoch)
    assert len(t) == 0 and t.online == 0


def test_find_filters_and_limits() -> None:
    t = SessionTable(Policy())
    for mp, cid in [("b", "x"), ("a", "x"), ("", "y")]:
        registered(t, connect((mp, cid)))
    assert [s.key for s in t.find("x")] == [("a", "x"), ("b", "x")]
    assert len(t.find()) == 3 and len(t.find(limit=2)) == 2


# -- properties over random histories --------------------------------------------------

op = st.tuples(
    st.sampled_from(["register", "disconnect", "stale", "expire"]),
    st.sampled_from(["a", "b"]),
    st.sampled_from([0, 1, 30, NEVER]),
    st.integers(0, 40),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(op, max_size=40))
def test_random_histories_keep_the_invariants(history: list[tuple[str, str, int, int]]) -> None:
    t = SessionTable(Policy())
    now = T0
    last_epoch: dict[tuple[str, str], int] = {}
    issued: list[int] = []
    for kind, cid, expiry, dt in history:
        now += dt * US
        key = ("", cid)
        current = t.get(key)
        if kind == "register":
            s = registered(t, connect(key, expiry=expiry), now)
            assert s.epoch > last_epoch.get(key, 0)
            assert all(s.epoch > e for e in issued)
            last_epoch[key] = s.epoch
            issued.append(s.epoch)
        elif kind == "disconnect" and current is not None:
            t.disconnected(key, current.epoch, expiry, now)
        elif kind == "stale" and current is not None:
            assert t.disconnected(key, current.epoch - 1, expiry, now) is None
            assert t.get(key) == current
        elif kind == "expire":
            for s in t.due(now, 10):
                assert not s.online and s.expired(now)
                assert t.forget(s.key, s.epoch)
        assert t.online == sum(s.online for s in t)
        # Nothing overdue is left out of the heap: a full sweep finds every expired session.
    overdue = {s.key for s in t if s.expired(now)}
    assert {s.key for s in t.due(now, 100)} == overdue


_SESSION_FIELDS: dict[str, st.SearchStrategy[object]] = {
    "key": st.tuples(st.text(max_size=3), st.text(min_size=1, max_size=5)),
    "epoch": st.integers(1, 2**40),
    "online": st.booleans(),
    "node": st.text(max_size=5),
    "listener_id": st.text(max_size=5),
    "session_expiry": st.integers(0, NEVER),
    "proto_ver": st.sampled_from([3, 4, 5]),
    "connected_us": st.integers(0, 2**60),
    "disconnected_us": st.integers(0, 2**60),
    "peer": st.text(max_size=8),
    "username": st.text(max_size=8),
    "recovered": st.booleans(),
    "queued": st.booleans(),
}
_SESSIONS = st.builds(Session, **_SESSION_FIELDS)


@settings(max_examples=300)
@given(_SESSIONS, st.integers(0, NEVER), st.integers(0, 2**60))
def test_ended_is_the_session_with_only_its_connection_changed(
    s: Session, expiry: int, now: int
) -> None:
    """``Session.ended`` spells out every field (``replace`` was too dear per disconnect):
    it must agree with ``replace`` for any session, so a field added to ``Session`` and not
    to ``ended`` fails here."""
    expected = replace(
        s,
        online=False,
        recovered=False,
        session_expiry=expiry,
        disconnected_us=now if s.online else s.disconnected_us,
    )
    assert s.ended(expiry, now) == expected


def test_the_ended_property_draws_every_field_of_a_session() -> None:
    """A field the strategy left to its default would pass the property test even if
    ``ended`` dropped it."""
    assert set(_SESSION_FIELDS) == {f.name for f in fields(Session)}
