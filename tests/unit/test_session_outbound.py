"""Delivery to the client (outbound.py): QoS 1/2 flows, window, queue, ids, aliases, retries."""

from __future__ import annotations

from typing import Any

import pytest
from test_session_support import (
    V3_V4,
    VERSIONS,
    check_encodable,
    connect_packet,
    connected,
    new_session,
    of,
    outbound,
    packets,
)

from services.listener.mqtt.types import (
    NO_PROPERTIES,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
)
from services.listener.mqtt.types import ReasonCode as R
from services.listener.session.actions import (
    Acked,
    Dropped,
    Send,
    SendPublish,
    SetTimer,
    StoreMark,
)
from services.listener.session.codes import MARK_OUTBOUND_PUBREL
from services.listener.session.limits import SessionLimits
from services.listener.session.outbound import packet_id_for_seq


def published(actions: list[Any]) -> list[Publish]:
    return [a.packet for a in of(actions, SendPublish)]


def pids(actions: list[Any]) -> list[int | None]:
    return [p.packet_id for p in published(actions)]


# -- QoS flows ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_qos0_delivery(version: int) -> None:
    session = connected(version)
    msg = outbound(qos=0, dup=True)
    actions = session.deliver(msg, 1.0)
    assert actions == [SendPublish(Publish("t/1", b"x", 0, False, False, None), msg)]


@pytest.mark.parametrize("version", VERSIONS)
def test_qos1_flow(version: int) -> None:
    session = connected(version)
    msg = outbound(qos=1)
    (publish,) = published(session.deliver(msg, 1.0))
    assert (publish.qos, publish.dup, publish.packet_id) == (1, False, 1)  # [MQTT-4.3.2-2]
    assert session.handle_packet(Puback(1), 2.0) == [Acked(msg)]
    assert session.handle_packet(Puback(1), 2.0) == []  # unknown now: ignored


@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("version", VERSIONS)
def test_qos2_flow(version: int, persistent: bool) -> None:
    session = connected(version, persistent=persistent)
    msg = outbound(qos=2, seq=10)
    assert pids(session.deliver(msg, 1.0)) == [10]
    mark = [StoreMark(MARK_OUTBOUND_PUBREL, 10, True)] if persistent else []
    # [MQTT-4.3.3-4]: PUBREL with the same id; persisted first so a crash resends it.
    assert session.handle_packet(Pubrec(10), 2.0) == [*mark, Send(Pubrel(10))]
    assert session.handle_packet(Puback(10), 2.0) == []  # wrong acknowledgement type
    clear = [StoreMark(MARK_OUTBOUND_PUBREL, 10, False)] if persistent else []
    assert session.handle_packet(Pubcomp(10), 3.0) == [Acked(msg), *clear]


def test_duplicate_pubrec_resends_pubrel_without_second_mark() -> None:
    session = connected(4, persistent=True)
    session.deliver(outbound(qos=2, seq=1), 1.0)
    session.handle_packet(Pubrec(1), 2.0)
    assert session.handle_packet(Pubrec(1), 3.0) == [Send(Pubrel(1))]


def test_refused_pubrec_acknowledges_and_frees_the_slot() -> None:
    """[MQTT-4.4.0-2]: PUBREC >= 0x80 ends the flow; no PUBREL, never retransmitted."""
    session = connected(5, SessionLimits(max_inflight_messages=1))
    first, second = outbound(qos=2, msg_id="a"), outbound(qos=2, msg_id="b")
    session.deliver(first, 1.0)
    assert session.deliver(second, 1.0) == []
    actions = session.handle_packet(Pubrec(1, R.UNSPECIFIED_ERROR), 2.0)
    assert actions[0] == Acked(first)
    assert pids(actions) == [2]


def test_refused_puback_acknowledges() -> None:
    session = connected(5)
    msg = outbound(qos=1)
    session.deliver(msg, 1.0)
    assert session.handle_packet(Puback(1, R.NOT_AUTHORIZED), 2.0) == [Acked(msg)]


@pytest.mark.parametrize(("version", "code"), [(4, 0), (5, R.PACKET_IDENTIFIER_NOT_FOUND)])
def test_unknown_pubrec_gets_pubrel(version: int, code: int) -> None:
    session = connected(version)
    assert session.handle_packet(Pubrec(42), 1.0) == [Send(Pubrel(42, code))]


def test_unknown_or_early_pubcomp_ignored() -> None:
    session = connected(5)
    session.deliver(outbound(qos=2), 1.0)
    assert session.handle_packet(Pubcomp(1), 1.5) == []  # before PUBREC
    assert session.handle_packet(Pubcomp(9), 1.5) == []


# -- window and queue ---------------------------------------------------------------------------


def test_window_is_max_inflight() -> None:
    session = connected(4, SessionLimits(max_inflight_messages=2))
    msgs = [outbound(msg_id=f"m{i}", seq=i) for i in range(1, 6)]
    sent = [pid for m in msgs for pid in pids(session.deliver(m, 1.0))]
    assert sent == [1, 2]
    assert len(session.outbound.pending) == 3
    actions = session.handle_packet(Puback(2), 2.0)
    assert actions[0] == Acked(msgs[1]) and pids(actions) == [3]
    assert pids(session.handle_packet(Puback(1), 2.0)) == [4]


def test_window_is_bounded_by_client_receive_maximum() -> None:
    """[MQTT-3.3.4-9]: never more than the client's Receive Maximum unacknowledged."""
    props = Properties(receive_maximum=1)
    session = connected(5, SessionLimits(max_inflight_messages=0), properties=props)
    assert pids(session.deliver(outbound(msg_id="a"), 1.0)) == [1]
    assert session.deliver(outbound(msg_id="b"), 1.0) == []
    assert pids(session.handle_packet(Puback(1), 2.0)) == [2]


def test_qos0_bypasses_a_full_window() -> None:
    session = connected(5, SessionLimits(max_inflight_messages=1))
    session.deliver(outbound(qos=1), 1.0)
    session.deliver(outbound(qos=1), 1.0)
    assert pids(session.deliver(outbound(qos=0), 1.0)) == [None]


@pytest.mark.parametrize("limit", [0, 3])
def test_pending_queue_is_bounded(limit: int) -> None:
    session = connected(4, SessionLimits(max_inflight_messages=1, max_online_messages=limit))
    session.deliver(outbound(msg_id="in"), 1.0)
    results = [session.deliver(outbound(msg_id=f"q{i}"), 1.0) for i in range(limit + 2)]
    assert all(r == [] for r in results[:limit])
    for extra, msg_id in zip(
        results[limit:], ["q" + str(limit), "q" + str(limit + 1)], strict=True
    ):
        assert len(extra) == 1 and isinstance(extra[0], Dropped)
        assert extra[0].reason == "queue_full" and extra[0].delivery.message.msg_id == msg_id


def test_durable_deliveries_are_not_dropped_for_a_full_queue() -> None:
    """A delivery with a seq is in the store (bounded by max_offline_messages); dropping
    it online would redeliver it after later ones on reconnect (I2)."""
    session = connected(4, SessionLimits(max_inflight_messages=1, max_online_messages=1))
    for seq in range(1, 6):
        assert not of(session.deliver(outbound(seq=seq, msg_id=f"m{seq}"), 1.0), Dropped)
    sent = []
    for pid in range(1, 6):
        sent += [a.delivery.seq for a in of(session.handle_packet(Puback(pid), 2.0), SendPublish)]
    assert sent == [2, 3, 4, 5]


def test_pending_queue_unlimited() -> None:
    session = connected(4, SessionLimits(max_inflight_messages=1, max_online_messages=-1))
    for i in range(50):
        assert not of(session.deliver(outbound(msg_id=f"m{i}"), 1.0), Dropped)
    assert len(session.outbound.pending) == 49


# -- congestion -----------------------------------------------------------------------------------


def test_congestion_holds_everything_then_drains_in_order() -> None:
    session = connected(5, SessionLimits(max_inflight_messages=2))
    assert session.set_congested(True, 1.0) == []
    for i, qos in enumerate([1, 0, 1, 1]):
        assert session.deliver(outbound(qos=qos, msg_id=f"m{i}"), 1.0) == []
    actions = session.set_congested(False, 2.0)
    ids = [a.delivery.message.msg_id for a in of(actions, SendPublish)]
    assert ids == ["m1", "m0", "m2"]  # QoS 0 first, then the window's worth of QoS 1
    assert [
        a.delivery.message.msg_id for a in of(session.handle_packet(Puback(1), 3.0), SendPublish)
    ] == ["m3"]


def test_congested_queue_is_bounded() -> None:
    session = connected(5, SessionLimits(max_online_messages=2))
    session.set_congested(True, 1.0)
    session.deliver(outbound(qos=0), 1.0)
    session.deliver(outbound(qos=1), 1.0)
    (dropped,) = session.deliver(outbound(qos=0), 1.0)
    assert isinstance(dropped, Dropped) and dropped.reason == "queue_full"


def test_no_retry_while_congested() -> None:
    session = connected(4, SessionLimits(retry_interval=10))
    session.deliver(outbound(), 0.0)
    session.set_congested(True, 5.0)
    actions = session.handle_timeout("retry", 10.0)
    assert not of(actions, SendPublish) and of(actions, SetTimer)


# -- packet identifiers ---------------------------------------------------------------------------


@pytest.mark.parametrize(("seq", "pid"), [(1, 1), (65535, 65535), (65536, 1), (131071, 1)])
def test_packet_id_from_seq(seq: int, pid: int) -> None:
    assert packet_id_for_seq(seq) == pid


def test_seq_id_in_use_holds_the_queue() -> None:
    """The same id on every redelivery [MQTT-4.4.0-1]: wait rather than renumber."""
    session = connected(4, SessionLimits(max_inflight_messages=10))
    assert pids(session.deliver(outbound(seq=1, msg_id="old"), 1.0)) == [1]
    assert session.deliver(outbound(seq=65536, msg_id="wrapped"), 1.0) == []
    assert session.deliver(outbound(seq=65537, msg_id="next"), 1.0) == []  # order kept
    actions = session.handle_packet(Puback(1), 2.0)
    assert pids(actions) == [1, 2]


def test_counter_ids_skip_ids_in_use() -> None:
    session = connected(4)
    session.deliver(outbound(seq=2), 1.0)
    assert pids(session.deliver(outbound(), 1.0)) == [1]
    assert pids(session.deliver(outbound(), 1.0)) == [3]  # 2 is in use [MQTT-4.3.2-1]


def test_counter_wraps_after_65535() -> None:
    session = connected(4, SessionLimits(max_inflight_messages=0))
    session.outbound._next_id = 65535
    assert pids(session.deliver(outbound(), 1.0)) == [65535]
    assert pids(session.deliver(outbound(), 1.0)) == [1]


# -- expiry, size, properties ----------------------------------------------------------------------


def test_expired_message_is_dropped() -> None:
    """[MQTT-3.3.2-5]."""
    session = connected(5)
    (dropped,) = session.deliver(outbound(expires_at=10.0), 10.0)
    assert isinstance(dropped, Dropped) and dropped.reason == "expired"


def test_message_expiring_while_queued_is_dropped_when_its_turn_comes() -> None:
    session = connected(5, SessionLimits(max_inflight_messages=1))
    session.deliver(outbound(msg_id="a"), 1.0)
    session.deliver(outbound(msg_id="b", expires_at=5.0), 1.0)
    session.deliver(outbound(msg_id="c"), 1.0)
    actions = session.handle_packet(Puback(1), 6.0)
    assert [type(a) for a in actions] == [Acked, Dropped, SendPublish]


def test_redelivery_is_not_expired() -> None:
    """[MQTT-4.3.3-7]: expiry no longer applies once a PUBLISH was sent."""
    session = connected(5)
    (publish,) = published(session.deliver(outbound(qos=2, dup=True, expires_at=5.0), 9.0))
    assert publish.dup and publish.properties.message_expiry_interval == 0


def test_remaining_expiry_is_sent() -> None:
    """[MQTT-3.3.2-6]: the interval minus the time spent waiting, rounded up."""
    session = connected(5)
    (publish,) = published(session.deliver(outbound(expires_at=100.0), 70.5))
    assert publish.properties.message_expiry_interval == 30


def test_subscription_identifiers_are_sent_v5_only() -> None:
    """[MQTT-3.3.4-3]."""
    v5 = connected(5)
    (publish,) = published(v5.deliver(outbound(sub_ids=(4, 9)), 1.0))
    assert publish.properties.subscription_identifiers == (4, 9)
    v4 = connected(4)
    (publish,) = published(v4.deliver(outbound(sub_ids=(4, 9)), 1.0))
    assert publish.properties is NO_PROPERTIES


def test_too_large_for_the_client_is_dropped() -> None:
    """[MQTT-3.1.2-24], [MQTT-3.1.2-25]: discarded as if sent; no window slot taken."""
    session = connected(5, properties=Properties(maximum_packet_size=64))
    (dropped,) = session.deliver(outbound(payload=b"x" * 100), 1.0)
    assert isinstance(dropped, Dropped) and dropped.reason == "too_large"
    assert not session.outbound.inflight
    actions = session.deliver(outbound(payload=b"x" * 10), 1.0)
    assert pids(actions) == [1]
    check_encodable(session, actions)


# -- topic aliases towards the client -----------------------------------------------------------


def test_outbound_aliases() -> None:
    props = Properties(topic_alias_maximum=5)
    session = connected(5, SessionLimits(topic_alias_max_broker=2), properties=props)
    sent = [published(session.deliver(outbound(topic=t, qos=0), 1.0))[0] for t in "abcab"]
    assert [(p.topic, p.properties.topic_alias) for p in sent] == [
        ("a", 1),
        ("b", 2),
        ("c", None),  # min(broker 2, client 5) aliases in use [MQTT-3.1.2-26]
        ("", 1),
        ("", 2),
    ]


def test_no_outbound_aliases_when_client_allows_none() -> None:
    """[MQTT-3.1.2-27]."""
    session = connected(5)
    for _ in range(2):
        (publish,) = published(session.deliver(outbound(qos=0), 1.0))
        assert publish.topic == "t/1" and publish.properties.topic_alias is None


# -- retries (3.1/3.1.1 only) -------------------------------------------------------------------


@pytest.mark.parametrize("version", V3_V4)
def test_retry_resends_with_dup(version: int) -> None:
    session = connected(version, SessionLimits(retry_interval=20))
    actions = session.deliver(outbound(qos=2, seq=3), 0.0)
    assert SetTimer("retry", 20.0) in actions
    session.deliver(outbound(qos=1, seq=4), 15.0)
    actions = session.handle_timeout("retry", 20.0)
    (publish,) = published(actions)
    assert (publish.packet_id, publish.dup) == (3, True)  # [MQTT-3.3.1-1]
    assert of(actions, SendPublish)[0].delivery.dup
    assert SetTimer("retry", 35.0) in actions
    session.handle_packet(Pubrec(3), 21.0)
    actions = session.handle_timeout("retry", 41.0)
    assert packets(actions) == [Pubrel(3), Publish("t/1", b"x", 1, False, True, 4)]


def test_retry_idle_when_nothing_inflight() -> None:
    session = connected(4)
    assert session.handle_timeout("retry", 100.0) == []


def test_v5_never_retries_on_a_live_connection() -> None:
    """[MQTT-4.4.0-1]: resending happens only on reconnect."""
    session = connected(5, SessionLimits(retry_interval=1))
    actions = session.deliver(outbound(), 0.0)
    assert not of(actions, SetTimer)
    assert session.handle_timeout("retry", 100.0) == []


# -- resume and delivery before/after the connection -------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_resume_resends_pubrel_then_queue_with_original_ids(version: int) -> None:
    session = connected(version, persistent=True)
    queued = [
        outbound(qos=2, seq=5, msg_id="released"),  # PUBREC was received before
        outbound(qos=1, seq=6, msg_id="sent", dup=True),
        outbound(qos=1, seq=7, msg_id="new"),
    ]
    actions = session.resume(queued, [], [5], 1.0)
    assert packets(actions)[:1] == [Pubrel(5)]
    assert [(p.packet_id, p.dup) for p in published(actions)] == [(6, True), (7, False)]
    assert session.handle_packet(Pubcomp(5), 2.0)[0] == Acked(queued[0])


def test_resume_restores_inbound_qos2() -> None:
    """A PUBLISH resent after reconnect is not routed twice [MQTT-4.3.3-10]."""
    session = connected(5, persistent=True)
    session.resume([], [12], [], 1.0)
    assert session.handle_packet(Publish("a", b"x", 2, dup=True, packet_id=12), 1.1) == [
        Send(Pubrec(12))
    ]
    assert packets(session.handle_packet(Pubrel(12), 1.2)) == [Pubcomp(12)]


def test_resume_pubrel_without_queue_entry_acks_its_seq() -> None:
    session = connected(4, persistent=True)
    session.resume([], [], [9], 1.0)
    (acked, mark) = session.handle_packet(Pubcomp(9), 2.0)
    assert isinstance(acked, Acked) and acked.delivery.seq == 9
    assert mark == StoreMark(MARK_OUTBOUND_PUBREL, 9, False)


def test_resume_is_not_bounded_by_max_online_messages() -> None:
    session = connected(4, SessionLimits(max_inflight_messages=1, max_online_messages=1))
    queued = [outbound(seq=i, msg_id=f"m{i}") for i in range(1, 6)]
    actions = session.resume(queued, [], [], 1.0)
    assert not of(actions, Dropped) and pids(actions) == [1]
    assert len(session.outbound.pending) == 4


def test_delivery_while_registering_waits_for_connack() -> None:
    session = new_session()
    session.handle_packet(connect_packet(5), 0.0)
    assert session.deliver(outbound(qos=1), 0.5) == []
    actions = session.handle_registered(True, 1, False, False, 0, 1.0)
    kinds = [type(a).__name__ for a in actions]
    assert kinds.index("Send") < kinds.index("SendPublish")


def test_delivery_after_close_is_dropped() -> None:
    session = connected(5)
    session.handle_connection_lost(1.0)
    (dropped,) = session.deliver(outbound(), 2.0)
    assert isinstance(dropped, Dropped) and dropped.reason == "not_connected"


# -- shared groups' copies ---------------------------------------------------------------------


def test_a_session_ends_with_its_unacknowledged_shared_copies_listed_oldest_first() -> None:
    """A shared group's copies the client never acknowledged are owed to another member:
    ``Ended`` lists them, in flight then waiting; acknowledged ones and plain ones are
    not; a QoS 2 copy whose PUBREC came is the member's (``released``)."""
    from dataclasses import replace

    from services.listener.mqtt.types import Disconnect
    from services.listener.session.actions import Ended
    from services.listener.session.messages import Shared

    session = connected(4, SessionLimits(max_inflight_messages=3))

    def shared(msg_id: str, qos: int = 1) -> Any:
        return replace(outbound(qos=qos, msg_id=msg_id), shared=Shared("$share/g/t", frozenset()))

    acked, plain, held, rec, waiting = (
        shared("acked"),
        outbound(msg_id="plain"),
        shared("held"),
        shared("rec", qos=2),
        shared("waiting"),
    )
    for msg in (acked, plain, held, rec, waiting):
        session.deliver(msg, 1.0)
    assert session.handle_packet(Puback(1), 2.0)[0] == Acked(acked)  # frees a slot for rec
    session.handle_packet(Pubrec(4), 2.0)
    assert rec.shared is not None and rec.shared.released
    (ended,) = of(session.handle_packet(Disconnect(), 3.0), Ended)
    assert [m.message.msg_id for m in ended.unacked_shared] == ["held", "rec", "waiting"]
