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

import math
import os
import queue
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from services.common.pids import alive
from tests.integration.test_cluster_broker import subscriber_node
from tests.integration.test_cluster_membership import (
    HTTP,
    N1,
    N2,
    N3,
    Acks,
    get,
    health,
    pid_of,
    states,
)
from tests.integration.test_cluster_sessions import sessions
from tests.support.clients import Client, Received, mosquitto_pub, until_routed
from tests.support.cluster import dev_cluster, start_node
from tests.support.node import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

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
    """Start the node again; return once every node is up and healthy."""
    start_node(cluster, node)
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
        until_routed(pub, "s15/plain/probe", [sub])
        until_routed(pub, "s15/shared/probe", [sub])
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
        until_routed(pub, f"{cid}/probe", [old])  # QoS 0: outside the receive maximum
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


# -- S4 ------------------------------------------------------------------------------

S4_ID = "s4-one-id"
S4_SECONDS = 60.0  # the loop's length: a fault's duration, not a wait for a result
S4_MAX_CONNECTS = 1000
S4_WORKERS = 5
NEVER = math.inf


@dataclass
class _Attempt:
    """One CONNECT of the S4 loop: when it was sent and when it was answered (CONNACK or
    the connection's end, whichever came first), both on the test's monotonic clock.
    The registry handles the CONNECT somewhere between the two."""

    client: Client
    node: str
    sent: float
    answered: float = NEVER
    reasons: list[int] = field(default_factory=list)  # every disconnect's reason code
    error: str = ""
    port: int = 0  # the client's: the peer in the nodes' event logs
    released: bool = False

    @property
    def ok(self) -> bool:
        c = self.client
        return c.connack.is_set() and not c.reason_code.is_failure

    @property
    def refused(self) -> bool:
        c = self.client
        return c.connack.is_set() and c.reason_code.is_failure

    @property
    def live(self) -> bool:
        return self.ok and not self.client.disconnected.is_set()

    @property
    def clean(self) -> bool:
        return self.client.clean

    def overlaps(self, other: _Attempt) -> bool:
        """Whether the registry may have handled the two CONNECTs at once."""
        return other.sent < self.answered and self.sent < other.answered

    def __str__(self) -> str:
        c = self.client
        return f"v{c.version} clean={int(c.clean)} on {self.node[:4]} from port {self.port}"


def _s4_connect(node: str, version: int, clean: bool) -> _Attempt:
    """Send one CONNECT for S4's id (v5 persistent: expiry 60) and wait, with a generous
    bound, for its CONNACK or its end."""
    expiry = 0 if clean else 60
    c = Client(S4_ID, MQTT[node], version, clean, expiry, reconnect=False)
    a = _Attempt(c, node, time.monotonic())
    on_connect, on_disconnect = c.paho.on_connect, c.paho.on_disconnect

    def connected(*args: Any) -> None:
        a.answered = min(a.answered, time.monotonic())
        on_connect(*args)

    def disconnected(*args: Any) -> None:
        a.answered = min(a.answered, time.monotonic())
        rc = args[3]
        a.reasons.append(int(getattr(rc, "value", rc)))
        on_disconnect(*args)

    c.paho.on_connect, c.paho.on_disconnect = connected, disconnected
    try:
        if version == 5:
            props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            if expiry:
                props.SessionExpiryInterval = expiry
            c.paho.connect(c.host, c.port, keepalive=60, clean_start=clean, properties=props)
        else:
            c.paho.connect(c.host, c.port, keepalive=60)
    except OSError as exc:
        a.error = f"{a}: {exc!r}"
        return a
    sock = c.paho.socket()
    a.port = sock.getsockname()[1] if sock is not None else 0
    c.paho.loop_start()
    try:
        wait_for(lambda: c.connack.is_set() or c.disconnected.is_set(), BOUND, 0.01)
    except AssertionError:
        a.error = f"{a}: neither a CONNACK nor a close"
    return a


def _release(a: _Attempt) -> None:
    """Stop an ended connection's network thread and close its sockets. paho closes its
    wake-up socket pair only when the client object is collected: hundreds of ended
    clients would push new sockets past select()'s limit of 1024 descriptors, and a paho
    thread whose select() fails ends silently, its client waiting for nothing."""
    a.client.paho.loop_stop()
    a.client.paho._reset_sockets()
    a.released = True


def _online_rows(node: str) -> set[tuple[str, int]] | None:
    """``session show`` of S4's id on ``node`` (the cluster's): (owner, epoch) of each
    online row; None if the node did not answer."""
    status, rows = get(HTTP[node], f"/api/v1/session/show?client_id={S4_ID}")
    if status != 200:
        return None
    return {(r["node"], r["epoch"]) for r in rows if r["client_id"] == S4_ID and r["online"]}


def _still_online(node: str, rows: set[tuple[str, int]]) -> set[tuple[str, int]]:
    """``node``'s online rows now (``rows`` if it does not answer)."""
    now = _online_rows(node)
    return rows if now is None else now


def _previous(attempts: list[_Attempt], x: _Attempt) -> _Attempt | None:
    """The CONNECT the registry handled just before ``x``, when the clocks prove it: the
    last one answered before ``x`` was sent, with no other CONNECT that could have been
    handled between the two (sent before ``x`` was answered, answered after it was sent).
    A refused CONNECT counts too: it may have ended the session before it lost."""
    before = [a for a in attempts if a.answered < x.sent]
    if not before:
        return None
    p = max(before, key=lambda a: a.answered)
    for y in attempts:
        if y is not p and y is not x and y.sent < x.answered and y.answered > p.sent:
            return None
    return p


def test_s4_racing_connects_of_one_id_keep_one_live_session(
    cluster: Path, record_property: Callable[[str, object], None]
) -> None:
    """S4: 5 clients with one id connect to random nodes in a loop for 60 s (at most 1000
    CONNECTs), each pausing 0 to 0.5 s between its CONNECTs: 3.1.1 and 5.0 alike, half
    with clean session / clean start (a persistent 5.0 one has expiry 60). None
    disconnects: the next CONNECT takes over.

    - Every sample (about 10 a second) holds at most one live session: among the test's
      connections (CONNACKed, not ended) and in ``session show`` (online rows). The
      registry answers a CONNECT only after the old connection was told to close and
      said it did (registry/servicer.py, Register), but a sample can still catch the old
      client before it read its DISCONNECT, or one node's row listed before and another's
      after the takeover: a sample of two is confirmed by polling, and fails only if both
      connections (or both rows, by owner and epoch) stay live.
    - Every CONNECT is answered. One may be refused (0x88 / 3.1.1 code 3) while another
      CONNECT of the id raced it: a claim that a newer one overtook is refused
      (registry/registrar.py, ``_register``: "taken over on another node while
      registering"). A refusal with no CONNECT racing it fails the test, after every
      other check: some runs met one when a newer claim's TAKE reached a node whose own
      claim was still moving the session there (``Giver.moving`` now makes it wait).
      Each accepted connection but the last is closed, a 5.0 one with DISCONNECT 0x8E.
    - Once the loop stops exactly one connection is live, and every node lists one
      session of the id, online, on that connection's node.
    - session_present: never 1 for a clean CONNECT; for a non-clean one whose previous
      CONNECT (the one the registry handled just before, where the test's clocks prove
      which it was) was an accepted persistent one, 1; an accepted clean one, 0 (a clean
      session ends with its connection, even one taken over)."""
    attempts: list[_Attempt] = []
    lock = threading.Lock()
    deadline = time.monotonic() + S4_SECONDS
    stop = threading.Event()

    def loop(w: int) -> None:
        rnd = random.Random(f"s4-{w}")
        while time.monotonic() < deadline:
            with lock:
                if len(attempts) >= S4_MAX_CONNECTS:
                    return
            a = _s4_connect(rnd.choice(NODES), rnd.choice((4, 5)), rnd.random() < 0.5)
            with lock:
                attempts.append(a)
            time.sleep(rnd.uniform(0, 0.5))

    def reap() -> None:
        while not stop.wait(0.2):
            with lock:
                ended = [a for a in attempts if not a.released and a.client.disconnected.is_set()]
            for a in ended:
                _release(a)

    workers = [threading.Thread(target=loop, args=(w,), daemon=True) for w in range(S4_WORKERS)]
    reaper = threading.Thread(target=reap, daemon=True)
    for t in [*workers, reaper]:
        t.start()
    samples = overlaps = listed = listed_overlaps = 0
    try:
        k = 0
        while any(t.is_alive() for t in workers):
            with lock:
                live = [a for a in attempts if a.live]
            samples += 1
            if len(live) > 1:
                overlaps += 1
                wait_for(
                    lambda live=live: sum(a.live for a in live) <= 1,
                    BOUND,
                    0.05,
                    f"one of {len(live)} live connections ended: {[str(a) for a in live]}",
                )
            node = NODES[k % 3]
            k += 1
            rows = _online_rows(node)
            if rows is not None:
                listed += 1
                if len(rows) > 1:
                    listed_overlaps += 1
                    wait_for(
                        lambda r=rows, n=node: len(r & _still_online(n, r)) <= 1,
                        BOUND,
                        0.2,
                        f"one of the online sessions {sorted(rows)} listed by {node} ended",
                    )
            time.sleep(0.1)
        for t in workers:
            t.join(2 * BOUND)
        refused = [a for a in attempts if a.refused]
        record_property("s4_connects", f"{len(attempts)}, {len(refused)} refused")
        record_property("s4_samples", f"{samples} own, {listed} session show")
        record_property("s4_samples_of_two", f"{overlaps} own, {listed_overlaps} listed")
        assert [a.error for a in attempts if a.error] == []
        assert listed > samples // 2, "session show did not answer"
        for a in refused:
            assert a.client.reason_code.value == 0x88, f"{a}: {a.client.reason_code}"
        alone = [str(a) for a in refused if not any(a.overlaps(y) for y in attempts if y is not a)]

        wait_for(lambda: sum(a.live for a in attempts) == 1, BOUND, 0.1, "one live connection")
        (survivor,) = [a for a in attempts if a.live]
        for node in NODES:
            wait_for(
                lambda n=node: len(_still_online(n, {("", 0), ("", 1)})) == 1,
                BOUND,
                0.2,
                f"one online session listed by {node}",
            )
            assert [o for o, _ in _still_online(node, set())] == [survivor.node], node
            rows = sessions(node, S4_ID, False)
            assert len(rows) == 1, (node, rows)  # and no offline ghost beside it

        for a in attempts:
            if a is survivor or not a.ok:
                continue
            assert a.client.disconnected.is_set(), f"{a}: displaced but not closed"
            if a.client.version == 5:
                assert 0x8E in a.reasons, f"{a}: {a.reasons}"

        assert [str(a) for a in attempts if a.clean and a.client.session_present] == []
        resumed = fresh = 0
        for x in attempts:
            p = _previous(attempts, x)
            if x.clean or not x.ok or p is None or not p.ok:
                continue
            if p.clean:
                fresh += 1
                assert not x.client.session_present, f"{x} after clean {p}"
            else:
                resumed += 1
                assert x.client.session_present, f"{x} after persistent {p}"
        record_property("s4_session_present_checked", f"{resumed} resumed, {fresh} fresh")
        assert resumed and fresh, "no non-clean CONNECT whose predecessor is known"
        assert not alone, f"refused with no CONNECT racing it: {alone}"
    finally:
        stop.set()
        reaper.join(BOUND)
        for a in attempts:
            if not a.released:
                a.client.paho.disconnect()
                _release(a)
        # the id's persistent session, if the survivor left one, goes too
        Client(S4_ID, MQTT[N1], version=5).connect().disconnect()
