"""Acceptance scenarios of cluster-scenarios.md (tag B) on a 3-node dev cluster: what a
node's SIGKILL does to its sessions (S16), to the routes and shared groups through it
(S15) and to its wills (S23 (c)); a takeover across nodes with a window in flight (S5)
and with a will (S23 (a)).

They are the cluster's promises that no single-node test can check: a session, a route
or a will lives on one node, and each scenario takes that node away or moves the
session to another one. Where one node has a behaviour (a takeover's will, DUP on a
resent window), the same takeover on one node runs beside the cross-node one.

One cluster serves the module (starting one costs seconds); the steps run in order and
each leaves every node up. Payloads are ``publisher:seq``; every wait polls with generous
bounds, and no timing is asserted."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from services.common.pids import alive
from tests.integration.test_cluster_broker import subscriber_node
from tests.integration.test_cluster_membership import (
    N1,
    N2,
    N3,
    Acks,
    health,
    pid_of,
    states,
)
from tests.integration.test_cluster_sessions import sessions
from tests.support.clients import Client, Received, mosquitto_pub
from tests.support.cluster import dev_cluster
from tests.support.node import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BIN = Path(sys.executable).parent
MQTT = {N1: 10053, N2: 10103, N3: 10153}
NODES = (N1, N2, N3)
BOUND = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with dev_cluster(tmp_path_factory.mktemp("devcluster-scenarios")) as base:
        yield base


# -- helpers -------------------------------------------------------------------------


def _kill(cluster: Path, node: str) -> None:
    """SIGKILL the node's process group; return once the others see it down."""
    pid = pid_of(cluster, node)
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), BOUND, 0.1, f"{node} gone")
    for other in NODES:
        if other != node:
            wait_for(lambda o=other: states(o).get(node) == "down", BOUND, 0.2, f"{node} down")


def _restart(cluster: Path, node: str) -> None:
    """``ternmq start`` with the node's conf and data; return once every node is up and
    healthy (``dev-cluster stop`` finds it by its new node.pid)."""
    home = cluster / node.split("@")[0]
    with open(home / "console.log", "ab") as out:
        proc = subprocess.Popen(
            [str(BIN / "ternmq"), "start", "--config", str(home / "ternmq.conf")],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (home / "node.pid").write_text(f"{proc.pid}\n")
    for n in NODES:
        wait_for(lambda n=n: set(states(n).values()) == {"up"}, 2 * BOUND, 0.5, f"all up on {n}")
        wait_for(lambda n=n: health(n) == 200, 2 * BOUND, 0.5, f"{n} healthy")


def _listed(node: str, client_id: str) -> list[tuple[str, bool]]:
    """``session show`` on ``node`` (the whole cluster): (owner, persistent) per row."""
    return [(str(r["node"]), bool(r["persistent"])) for r in sessions(node, client_id, False)]


def _take(c: Client, n: int) -> list[Received]:
    """The next ``n`` messages ``c`` receives; fails naming the client and what came."""
    got: list[Received] = []
    try:
        while len(got) < n:
            got.append(c.messages.get(timeout=BOUND))
    except queue.Empty:
        raise AssertionError(f"{c.client_id}: {len(got)} of {n}: {_payloads(got)}") from None
    return got


def _payloads(got: list[Received]) -> list[str]:
    return [g.payload.decode() for g in got]


def _until_routed(pub: Client, topic: str, subs: list[Client]) -> None:
    """Subscriptions reach other nodes through gossip: publish QoS 0 probes until every
    subscriber got one, then drain the probes."""

    def all_got_one() -> bool:
        pub.publish(topic, b"probe", qos=0)
        return all(not s.messages.empty() for s in subs)

    wait_for(all_got_one, BOUND, 0.2, f"probes on {topic} reach every subscriber")
    for s in subs:
        s.drain(0.5)


# -- S16 -----------------------------------------------------------------------------


def test_s16_a_killed_nodes_clean_sessions_go_and_its_persistent_ones_resume(
    cluster: Path,
) -> None:
    """S16: on n1 two clean sessions, a 3.1.1 persistent one and two v5 ones (expiry 600
    and 4 s); on n2 a persistent one. n1 is SIGKILLed, one clean id connects again on
    n2, n1 restarts. n1's clean sessions and their subscriptions are gone on every node;
    each persistent session is listed once, with its owner, keeps what was published to
    it meanwhile and resumes with session_present = 1; the 4 s session expires."""
    on_n1 = {
        "s16-clean": Client("s16-clean", MQTT[N1], reconnect=False),
        "s16-gone": Client("s16-gone", MQTT[N1], reconnect=False),
        "s16-p-n1": Client("s16-p-n1", MQTT[N1], clean=False, reconnect=False),
        "s16-v5-long": Client(
            "s16-v5-long", MQTT[N1], version=5, clean=False, session_expiry=600, reconnect=False
        ),
        "s16-v5-short": Client(
            "s16-v5-short", MQTT[N1], version=5, clean=False, session_expiry=4, reconnect=False
        ),
    }
    on_n2 = Client("s16-p-n2", MQTT[N2], clean=False, reconnect=False)
    for c in [*on_n1.values(), on_n2]:
        c.connect()
        c.subscribe(f"s16/{c.client_id}", 1)
    for cid in on_n1:
        wait_for(lambda c=cid: subscriber_node(cluster, N3, c) == N1, BOUND, 0.2, cid)
    wait_for(lambda: subscriber_node(cluster, N3, "s16-p-n2") == N2, BOUND, 0.2, "s16-p-n2")

    _kill(cluster, N1)
    for c in on_n1.values():
        c.drop()
    again = Client("s16-clean", MQTT[N2], reconnect=False).connect()
    assert not again.session_present
    _restart(cluster, N1)

    persistent = {"s16-p-n1": N1, "s16-v5-long": N1, "s16-p-n2": N2}
    for node in NODES:
        for cid in ("s16-gone", "s16-clean"):  # the clean id's new session has none
            wait_for(lambda n=node, c=cid: subscriber_node(cluster, n, c) is None, BOUND, 0.2)
        wait_for(lambda n=node: _listed(n, "s16-gone") == [], BOUND, 0.2, f"s16-gone on {node}")
        assert _listed(node, "s16-clean") == [(N2, False)], node
        for cid, owner in persistent.items():
            assert _listed(node, cid) == [(owner, True)], (node, cid)
        wait_for(lambda n=node: _listed(n, "s16-v5-short") == [], BOUND, 0.2, "v5 expiry")

    on_n2.disconnect()  # all three offline: what is published now waits in their queues
    pubs = [Client(f"s16-pub-{n[:4]}", MQTT[n], version=5).connect() for n in NODES]
    acks = [Acks(p) for p in pubs]

    def code(k: int, topic: str, payload: str) -> list[int]:
        return acks[k].wait(pubs[k].paho.publish(topic, payload, 1).mid)

    try:
        for k in range(3):  # no node routes to the clean sessions any more: v5 0x10
            for cid in ("s16-gone", "s16-clean"):
                wait_for(
                    lambda k=k, c=cid: code(k, f"s16/{c}", "s16-probe:0") == [0x10],
                    BOUND,
                    0.5,
                    f"no route to {cid} from {NODES[k]}",
                )
        for cid in persistent:
            assert code(2, f"s16/{cid}", f"s16-pub:{cid}") == [0], cid
        for cid, node in (("s16-p-n1", N3), ("s16-v5-long", N2), ("s16-p-n2", N2)):
            old = on_n1.get(cid, on_n2)
            back = Client(
                cid, MQTT[node], old.version, clean=False, session_expiry=old.session_expiry
            ).connect()
            try:
                assert back.session_present, cid
                assert _payloads(_take(back, 1)) == [f"s16-pub:{cid}"]
                assert not back.drain(1.0), f"{cid}: more than was published"
            finally:
                back.disconnect()
        expired = Client(
            "s16-v5-short", MQTT[N1], version=5, clean=False, session_expiry=4
        ).connect()
        assert not expired.session_present
        expired.disconnect()
    finally:
        for p in pubs:
            p.disconnect()
        again.disconnect()


# -- S15 -----------------------------------------------------------------------------


def test_s15_a_restarted_node_routes_plain_and_shared_filters_once(cluster: Path) -> None:
    """S15: a persistent subscriber on n2 with a plain filter and a ``$share/g/...`` one;
    n1 is SIGKILLed and restarted (new forwarding stream, its routing table rebuilt from
    gossip). A publisher on n1 then sends 5 QoS 1 messages to each filter: each is
    PUBACKed with success and all 10 arrive once, in order, nothing else."""
    sub = Client("s15-sub", MQTT[N2], version=5, clean=False, session_expiry=600).connect()
    pub: Client | None = None
    try:
        sub.subscribe("s15/plain/#", 1)
        sub.subscribe("$share/g/s15/shared/#", 1)
        wait_for(lambda: subscriber_node(cluster, N1, "s15-sub") == N2, BOUND, 0.2, "known on n1")
        _kill(cluster, N1)
        _restart(cluster, N1)
        pub = Client("s15-pub", MQTT[N1], version=5).connect()
        acks = Acks(pub)
        _until_routed(pub, "s15/plain/probe", [sub])
        _until_routed(pub, "s15/shared/probe", [sub])
        sent = []
        for seq in range(10):
            topic = "s15/plain/t" if seq < 5 else "s15/shared/t"
            sent.append(f"s15-pub:{seq}")
            assert acks.wait(pub.paho.publish(topic, sent[-1], 1).mid) == [0], seq
        got = _take(sub, 10) + sub.drain(1.0)
        real = [g for g in got if g.payload != b"probe"]  # a late probe is not extra
        assert _payloads(real) == sent
        assert not any(g.dup for g in real)
    finally:
        sub.disconnect()
        if pub is not None:
            pub.disconnect()


# -- S23 -----------------------------------------------------------------------------


def _will_copies(sub: Client, topic: str, quiet: float) -> list[Received]:
    """The copies of the will on ``topic`` that arrive until ``quiet`` s pass without one."""
    return [g for g in sub.drain(quiet) if g.topic == topic]


def test_s23a_a_takeover_on_another_node_publishes_a_311_will_once(cluster: Path) -> None:
    """S23 (a), 3.1.1: a takeover ends the old connection without a DISCONNECT from its
    client, so its will goes out (MQTT 5.0 3.1.4 says the same of every version but
    5.0's delayed-will case below); one node does so (session.core.handle_takeover). The
    will's owner on n1 is taken over from n2: the subscriber on n3 gets the will once, as
    it does for a takeover on n1 itself."""
    sub = Client("s23-sub", MQTT[N3]).connect()
    try:
        sub.subscribe("s23/a/#", 1)
        wait_for(lambda: subscriber_node(cluster, N1, "s23-sub") == N3, BOUND, 0.2, "on n1")
        wait_for(lambda: subscriber_node(cluster, N2, "s23-sub") == N3, BOUND, 0.2, "on n2")
        for case, second in (("same", N1), ("across", N2)):
            topic = f"s23/a/{case}"
            will = (topic, f"s23-a-{case}:1".encode(), 1, False)
            old = Client(f"s23-a-{case}", MQTT[N1], will=will, reconnect=False).connect()
            new = Client(f"s23-a-{case}", MQTT[second], reconnect=False).connect()
            try:
                assert old.disconnected.wait(BOUND), f"{case}: the old connection stayed"
                (got,) = [g for g in _take(sub, 1) if g.topic == topic]
                assert (got.payload, got.qos) == (will[1], 1)
                assert _will_copies(sub, topic, 2.0) == [], f"{case}: the will came twice"
            finally:
                new.disconnect()
                old.paho.loop_stop()
            assert _will_copies(sub, topic, 1.0) == [], f"{case}: a will after a DISCONNECT"
    finally:
        sub.disconnect()


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(N1, id="same-node"),
        pytest.param(N2, id="across-nodes"),
    ],
)
def test_s23a_a_resume_within_the_delay_cancels_a_delayed_v5_will(
    cluster: Path, second: str
) -> None:
    """S23 (a), 5.0: a will with a delay (2 s) is not sent when a new connection resumes
    the session (clean start 0) within the delay [MQTT-3.1.3-9]; 5.0 3.1.4 makes this
    the one takeover that sends no will. One node cancels it (same-node); the same must
    hold when the session resumes on another node (across-nodes)."""
    case = "same" if second == N1 else "across"
    sub = Client(f"s23-sub5-{case}", MQTT[N3]).connect()
    topic = f"s23/a5/{case}"
    cid = f"s23-a5-{case}"
    try:
        sub.subscribe(topic, 1)
        wait_for(lambda: subscriber_node(cluster, N1, sub.client_id) == N3, BOUND, 0.2, "on n1")
        old = Client(cid, MQTT[N1], version=5, clean=False, session_expiry=60, reconnect=False)
        props = Properties(PacketTypes.WILLMESSAGE)  # type: ignore[no-untyped-call]
        props.WillDelayInterval = 2
        old.paho.will_set(topic, f"{cid}:1", 1, False, props)
        old.connect()
        new = Client(cid, MQTT[second], version=5, clean=False, session_expiry=60).connect()
        try:
            assert old.disconnected.wait(BOUND), "the old connection stayed"
            assert new.session_present
            # past the delay, with a margin for a loaded machine
            assert _will_copies(sub, topic, 6.0) == [], "the will was sent"
        finally:
            new.disconnect()
            old.paho.loop_stop()
        # the will's route works: the silence above is no accident of routing
        mosquitto_pub(MQTT[N1], topic, "s23-control:1", 1)
        assert _payloads(_take(sub, 1)) == ["s23-control:1"]
    finally:
        sub.disconnect()


def test_s23c_a_sigkilled_nodes_wills_are_lost_never_sent_twice(cluster: Path) -> None:
    """S23 (c): the documented behaviour is that a will lives in the memory of the
    listener that holds its connection (services/listener/wills.py), as in VerneMQ, and
    a SIGKILL of that node loses it: the subscriber on n3 gets no copy, neither while n1
    is down nor once it is back (so never two)."""
    sub = Client("s23-subc", MQTT[N3]).connect()
    try:
        sub.subscribe("s23/c/#", 1)
        wait_for(lambda: subscriber_node(cluster, N1, "s23-subc") == N3, BOUND, 0.2, "on n1")
        owner = Client(
            "s23-c", MQTT[N1], will=("s23/c/t", b"s23-c:1", 1, False), reconnect=False
        ).connect()
        _kill(cluster, N1)
        owner.drop()
        assert _will_copies(sub, "s23/c/t", 3.0) == []
        _restart(cluster, N1)
        assert _will_copies(sub, "s23/c/t", 3.0) == []
    finally:
        sub.disconnect()


# -- S5 ------------------------------------------------------------------------------


def _connect_v5(c: Client, **connect_props: int) -> Client:
    """``Client.connect`` with more CONNECT properties (``Client`` sets only the expiry)."""
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = c.session_expiry
    for name, value in connect_props.items():
        setattr(props, name, value)
    c.paho.connect(c.host, c.port, keepalive=60, clean_start=c.clean, properties=props)
    c.paho.loop_start()
    assert c.connack.wait(BOUND), f"{c.client_id}: no CONNACK"
    assert not c.reason_code.is_failure, f"{c.client_id}: {c.reason_code}"
    return c


def _s5_takeover(cid: str) -> tuple[list[str], list[Received]]:
    """S5's run for ``cid``: what was published, and what the new connection on n3
    received (the in-flight message, the two queued, two published after it)."""
    old = Client(cid, MQTT[N1], version=5, clean=False, session_expiry=60, reconnect=False)
    old.paho.manual_ack_set(True)
    _connect_v5(old, ReceiveMaximum=1)
    pub = Client(f"{cid}-pub", MQTT[N2], version=5).connect()
    acks = Acks(pub)
    new: Client | None = None
    try:
        old.subscribe(f"{cid}/#", 1)
        _until_routed(pub, f"{cid}/probe", [old])  # QoS 0: outside the receive maximum
        sent = [f"{cid}-pub:{seq}" for seq in range(5)]
        for payload in sent[:3]:
            assert acks.wait(pub.paho.publish(f"{cid}/t", payload, 1).mid) == [0], payload
        (first,) = _take(old, 1)
        assert (first.payload.decode(), first.dup) == (sent[0], False)
        assert old.drain(1.0) == [], "more than Receive Maximum in flight"

        new = Client(cid, MQTT[N3], version=5, clean=False, session_expiry=60, reconnect=False)
        new.connect()
        assert old.disconnected.wait(BOUND), "the old connection stayed"
        assert old.disconnect_reason.value == 0x8E, old.disconnect_reason
        assert new.session_present
        got = _take(new, 3)
        for payload in sent[3:]:
            assert acks.wait(pub.paho.publish(f"{cid}/t", payload, 1).mid) == [0], payload
        got += _take(new, 2)
        got += [g for g in new.drain(1.0) if g.payload != b"probe"]
        return sent, got
    finally:
        pub.disconnect()
        old.paho.loop_stop()
        if new is not None:
            new.disconnect()


def test_s5_a_takeover_on_another_node_resends_the_window_then_the_queue(cluster: Path) -> None:
    """S5: a v5 session on n1 (clean start 0, expiry 60, Receive Maximum 1, acks held
    back) has 3 QoS 1 messages from n2: 1 in flight, 2 queued. The same id connects on
    n3: the old connection gets DISCONNECT 0x8E; the new one gets the in-flight message
    again with DUP = 1 (the checker's rule 3), then queued-1 and queued-2, never sent
    before (DUP = 0), then new messages, and nothing more."""
    sent, got = _s5_takeover("s5")
    assert _payloads(got) == sent
    assert [g.dup for g in got] == [True, False, False, False, False]
