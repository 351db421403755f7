"""One session per client id across a 3-node dev cluster: the session directory's quorum
register decides, the old owner hands the session over (S3, S4, S5, S10 and the R = 1
part of S6 in cluster-scenarios.md).

- A CONNECT on another node takes the session over: the old connection gets 0x8E; a
  resumed persistent session brings its subscriptions and queued messages, in order,
  with session_present = 1.
- CONNECTs of one id racing on all three nodes end with exactly one live connection.
- Epochs only grow, whichever node registers.
- With the owner of a persistent session killed, resuming it elsewhere is refused with
  0x88 (5.0) and code 3 (3.1.1), the same answer every time; a clean start is accepted;
  once the node is back the session resumes with its messages.

One cluster serves the module and the steps run in order. Waits poll with bounds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from services.pb import (
    common_pb2,
    gossip_pb2,
    gossip_pb2_grpc,
    registry_pb2,
    registry_pb2_grpc,
)
from tests.integration.test_cluster_membership import (
    HTTP,
    N1,
    N2,
    N3,
    _restart_n3,
    get,
    health,
    pid_of,
    states,
)
from tests.support.clients import Client, connect_until_accepted, until_routed
from tests.support.cluster import dev_cluster
from tests.support.node import complete_lines, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MQTT = {N1: 10053, N2: 10103, N3: 10153}
BOUND = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with dev_cluster(tmp_path_factory.mktemp("devcluster-sessions")) as base:
        yield base


def sessions(node: str, client_id: str, local: bool = True) -> list[dict[str, object]]:
    """``node``'s own sessions of ``client_id`` (``local``), or the cluster's."""
    query = f"client_id={client_id}&local={int(local)}"
    status, rows = get(HTTP[node], f"/api/v1/session/show?{query}")
    assert status == 200, rows
    return [r for r in rows if r.get("client_id") == client_id]


def test_a_connect_on_another_node_takes_the_live_session_over(cluster: Path) -> None:
    old = Client("x-live", MQTT[N1], version=5, reconnect=False).connect()
    try:
        new = Client("x-live", MQTT[N2], version=5, clean=True).connect()
        assert old.disconnected.wait(BOUND), "the old connection was not closed"
        assert old.disconnect_reason is not None and old.disconnect_reason.value == 0x8E
        assert not new.session_present
        new.disconnect()
    finally:
        old.paho.loop_stop()


def test_a_persistent_session_moves_with_its_subscriptions_and_queue(cluster: Path) -> None:
    """S3/S4: subscribe on n1, go offline, 20 QoS 1 messages queue on n1; resume on n2:
    session_present, the 20 in order, then live messages published on n3 arrive at n2."""
    sub = Client("x-move", MQTT[N1], version=5, clean=False, session_expiry=600).connect()
    pub = Client("x-move-pub", MQTT[N3]).connect()
    try:
        sub.subscribe("move/#", 1)
        until_routed(pub, "move/probe", [sub])
        sub.disconnect()
        for i in range(20):
            pub.publish("move/t", f"m{i}", qos=1).wait_for_publish(10)
        moved = Client("x-move", MQTT[N2], version=5, clean=False, session_expiry=600).connect()
        try:
            assert moved.session_present
            got = [m.payload.decode() for m in moved.take(20, timeout=BOUND)]
            assert got == [f"m{i}" for i in range(20)]
            # Its subscriptions live on n2 now: n3's publishes reach it there.
            wait_for(
                lambda: [r.get("node") for r in sessions(N2, "x-move")] == [N2],
                BOUND,
                0.2,
                "session show names n2",
            )
            for i in range(5):
                pub.publish("move/t", f"live{i}", qos=1).wait_for_publish(10)
            live = [m.payload.decode() for m in moved.take(5, timeout=BOUND)]
            assert live == [f"live{i}" for i in range(5)]
            assert not moved.drain(1.0), "a copy came twice"
        finally:
            moved.disconnect()
        assert sessions(N1, "x-move") == [], "n1 still holds the moved session"
    finally:
        pub.disconnect()


def _subs_record(base: Path, node: str, client_id: str) -> bytes:
    """``client_id``'s subscription record in ``node``'s gossip (b"" when it has none)."""
    sock = base / node.split("@")[0] / "data" / "run" / "gossip.sock"
    with grpc.insecure_channel(f"unix:{sock}") as chan:
        reply = gossip_pb2_grpc.GossipStub(chan).Get(
            gossip_pb2.GetRequest(prefix="subs", key=f"\0{client_id}".encode()), timeout=10
        )
    return bytes(reply.value) if reply.found else b""


def test_a_late_end_report_from_the_old_owner_leaves_the_moved_subscriptions(
    cluster: Path,
) -> None:
    """The old owner's listener can report its connection's end (a DISCONNECT it read
    late, not a takeover) after its registry handed the session over. That registry no
    longer holds the session, and once took the report for a connection it never knew:
    it deleted the id's subscriptions in gossip, so the session, resumed on n2, got
    nothing more, wherever it went (the fault test's long run lost 33,643 messages so).
    The report is sent here as the listener sends it."""
    sub = Client("x-late", MQTT[N1], version=4, clean=False).connect()
    pub = Client("x-late-pub", MQTT[N3]).connect()
    try:
        sub.subscribe("late/#", 1)
        until_routed(pub, "late/probe", [sub])
        (row,) = sessions(N1, "x-late")
        old_epoch = int(str(row["epoch"]))
        sub.disconnect()
        moved = Client("x-late", MQTT[N2], version=4, clean=False).connect()
        try:
            assert moved.session_present
            wait_for(lambda: sessions(N1, "x-late") == [], BOUND, 0.2, "n1 handed it over")
            sock = cluster / "dev1" / "data" / "run" / "registry.sock"
            with grpc.insecure_channel(f"unix:{sock}") as chan:
                reply = registry_pb2_grpc.RegistryStub(chan).Disconnected(
                    registry_pb2.DisconnectedRequest(
                        key=common_pb2.SessionKey(mountpoint="", client_id="x-late"),
                        epoch=old_epoch,
                        listener_id="late-report",
                        session_expiry=0xFFFFFFFF,
                        reason="disconnect",
                    ),
                    timeout=BOUND,
                )
            assert not reply.ok, "a report for a handed-over epoch is stale"
            # A delete would be in n1's gossip when the call returns (it is awaited).
            assert _subs_record(cluster, N1, "x-late"), "n1 deleted the moved subscriptions"
            for i in range(5):
                pub.publish("late/t", f"m{i}", qos=1).wait_for_publish(10)
            got = [m.payload.decode() for m in moved.take(5, timeout=BOUND)]
            assert got == [f"m{i}" for i in range(5)]
        finally:
            moved.disconnect()
    finally:
        pub.disconnect()


def _live(c: Client) -> bool:
    """CONNACK success and not disconnected since (paho's own flag lags a server close)."""
    return c.connack.is_set() and not c.reason_code.is_failure and not c.disconnected.is_set()


def _race(clients: list[Client]) -> None:
    start = threading.Barrier(len(clients))

    def go(c: Client) -> None:
        start.wait()
        with contextlib.suppress(AssertionError, OSError):
            c.connect(expect_ok=False)

    threads = [threading.Thread(target=go, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def test_connects_of_one_id_racing_on_three_nodes_leave_one_live_session(cluster: Path) -> None:
    """S5/S10: five rounds of three simultaneous CONNECTs of one id, one per node."""
    for round_ in range(5):
        clients = [Client("x-race", MQTT[n], version=5, reconnect=False) for n in (N1, N2, N3)]
        _race(clients)
        one_left = lambda cs=clients: sum(_live(c) for c in cs) == 1  # noqa: E731
        states = lambda cs=clients: [  # noqa: E731
            (str(c.reason_code), c.disconnected.is_set(), str(c.disconnect_reason)) for c in cs
        ]
        try:
            wait_for(one_left, BOUND, 0.2, f"round {round_}: one connection left")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {states()}") from None
        time.sleep(1.0)
        assert one_left(), f"round {round_}: {[_live(c) for c in clients]}"
        for c in clients:
            c.paho.disconnect()
            c.paho.loop_stop()


def test_epochs_only_grow_whichever_node_registers(cluster: Path) -> None:
    seen: list[int] = []
    for node in (N1, N2, N3, N1, N3, N2):
        c = Client("x-epoch", MQTT[node], version=5, clean=False, session_expiry=60).connect()
        rows = sessions(node, "x-epoch")
        assert len(rows) == 1, rows
        seen.append(int(str(rows[0]["epoch"])))
        c.disconnect()
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen


def test_a_persistent_session_on_a_dead_node_is_refused_until_it_returns(cluster: Path) -> None:
    """S6 with R = 1: the answer is 0x88 / code 3, every time, never an empty session."""
    sub = Client("x-dead", MQTT[N3], version=5, clean=False, session_expiry=600).connect()
    old = Client("x-dead-v4", MQTT[N3], version=4, clean=False).connect()
    pub = Client("x-dead-pub", MQTT[N1]).connect()
    try:
        sub.subscribe("dead/#", 1)
        until_routed(pub, "dead/probe", [sub])
        sub.disconnect()
        old.disconnect()
        for i in range(3):
            pub.publish("dead/t", f"d{i}", qos=1).wait_for_publish(10)
        os.killpg(pid_of(cluster, N3), signal.SIGKILL)
        wait_for(lambda: states(N1).get(N3) == "down", BOUND, 0.2, "n3 down on n1")
        for _ in range(2):
            again = Client("x-dead", MQTT[N1], version=5, clean=False, session_expiry=600)
            again.connect(expect_ok=False)
            assert again.reason_code.value == 0x88, again.reason_code
            again.paho.loop_stop()
            v4 = Client("x-dead-v4", MQTT[N2], version=4, clean=False).connect(expect_ok=False)
            # paho reports a 3.1.1 CONNACK's return code 3 as reason code 0x88
            assert v4.reason_code.value == 0x88, v4.reason_code
            v4.paho.loop_stop()
        fresh = Client("x-dead-v4", MQTT[N2], version=4, clean=True).connect()
        assert not fresh.session_present
        fresh.disconnect()

        def refused_why() -> list[object]:
            return [
                e.get("reason")
                for e in _events(cluster, N1, "registry", "session.claim_refused")
                if e.get("client_id") == "x-dead"
            ]

        # the registry says why it refused; the listener's client.rejected only "registry"
        wait_for(lambda: len(refused_why()) >= 2, BOUND, 0.2, "session.claim_refused on n1")
        assert all(N3 in str(why) and "down" in str(why) for why in refused_why())
        _restart_n3(cluster)
        wait_for(lambda: health(N3) == 200, 60, 0.5, "n3 healthy again")
        wait_for(lambda: states(N1).get(N3) == "up", BOUND, 0.2, "n3 up on n1")
        # Until n1's registry has n3's new address (gossip brings it) the answer is
        # still 0x88; a client retries, as this one does.
        back = connect_until_accepted(
            lambda: Client("x-dead", MQTT[N1], version=5, clean=False, session_expiry=600),
            BOUND,
            0.5,
            refusal=0x88,
        )
        try:
            assert back.session_present
            got = [m.payload.decode() for m in back.take(3, timeout=BOUND)]
            assert got == ["d0", "d1", "d2"]
        finally:
            back.disconnect()
    finally:
        pub.disconnect()


def test_a_paused_owner_learns_on_its_return_that_its_session_moved(cluster: Path) -> None:
    """S9-like: the owner is paused (SIGSTOP), the client connects again on n1 (a clean
    start, accepted); once the paused node is back its stale connection is ended with
    0x8E, and only the n1 session is left."""
    wait_for(lambda: all(health(n) == 200 for n in (N1, N2, N3)), 60, 0.5, "all healthy")
    stale = Client("x-paused", MQTT[N3], version=5, reconnect=False).connect()
    pid = pid_of(cluster, N3)
    os.killpg(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: states(N1).get(N3) == "down", BOUND, 0.2, "n3 down on n1")
        fresh = Client("x-paused", MQTT[N1], version=5, reconnect=False).connect()
    finally:
        os.killpg(pid, signal.SIGCONT)
    try:
        assert stale.disconnected.wait(BOUND), "the paused node kept its stale connection"
        assert stale.disconnect_reason.value == 0x8E, stale.disconnect_reason
        assert _live(fresh)
        wait_for(lambda: sessions(N3, "x-paused") == [], BOUND, 0.2, "n3 forgot it")
    finally:
        fresh.disconnect()
        stale.paho.loop_stop()


def test_session_show_on_any_node_lists_every_session_once_with_its_owner(
    cluster: Path,
) -> None:
    wait_for(lambda: all(health(n) == 200 for n in (N1, N2, N3)), 60, 0.5, "all healthy")
    clients = [
        Client(f"x-show-{i}", MQTT[n], version=5, clean=False, session_expiry=300).connect()
        for i, n in enumerate((N1, N2, N3))
    ]
    moved = Client("x-show-0", MQTT[N2], version=5, clean=False, session_expiry=300)
    try:
        moved.connect()  # x-show-0 moves from n1 to n2
        expected = {"x-show-0": N2, "x-show-1": N2, "x-show-2": N3}

        def listed(node: str) -> list[dict[str, object]]:
            status, rows = get(HTTP[node], "/api/v1/session/show?client_id=")
            assert status == 200, rows
            return [r for r in rows if str(r["client_id"]).startswith("x-show-")]

        for node in (N1, N2, N3):
            wait_for(lambda n=node: len(listed(n)) == 3, BOUND, 0.2, f"3 sessions on {node}")
            mine = listed(node)
            assert {str(r["client_id"]): r["node"] for r in mine} == expected, (node, mine)
            assert len(mine) == 3, mine
    finally:
        moved.disconnect()
        for c in clients[1:]:
            c.disconnect()
        clients[0].paho.loop_stop()


def test_a_member_that_lost_its_disk_catches_up_before_it_votes(cluster: Path) -> None:
    """The DESIGN's wiped data directory: n3 is stopped, its data directory deleted, and
    started again. It rejoins, learns every client id the others hold votes for before
    it votes (registry.catch_up), is healthy only then, and epochs keep growing: a
    session registered before the wipe is taken over from n3 at a higher epoch."""
    wait_for(lambda: all(health(n) == 200 for n in (N1, N2, N3)), 60, 0.5, "all healthy")
    before = Client("x-wiped", MQTT[N1], version=5, clean=False, session_expiry=300).connect()
    epoch = int(str(sessions(N1, "x-wiped")[0]["epoch"]))
    os.killpg(pid_of(cluster, N3), signal.SIGKILL)
    wait_for(lambda: states(N1).get(N3) == "down", BOUND, 0.2, "n3 down on n1")
    wiped_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    shutil.rmtree(cluster / "dev3" / "data")
    _restart_n3(cluster)
    try:
        wait_for(lambda: health(N3) == 200, 90, 0.5, "n3 healthy after its catch-up")

        def caught_up() -> list[dict[str, object]]:
            return [
                e
                for e in _events(cluster, N3, "registry", "registry.catch_up")
                if e["state"] == "done" and str(e["ts"]) > wiped_at
            ]

        # The event reaches the log up to a flush later than /health turns 200.
        wait_for(lambda: caught_up() != [], BOUND, 0.2, "n3's catch-up logged")
        done = caught_up()
        assert int(str(done[-1]["keys"])) >= 1, done
        # Healthy needs a majority, not every member: n3 may not have heard from n1 yet,
        # and a resume whose queue is on a node it sees down is refused by design (0x88).
        wait_for(
            lambda: all(states(N3).get(n) == "up" for n in (N1, N2, N3)), BOUND, 0.2,
            "n3 sees every member up",
        )  # fmt: skip
        after = Client("x-wiped", MQTT[N3], version=5, clean=False, session_expiry=300).connect()
        try:
            assert after.session_present, "the session moved from n1 with its state"
            assert before.disconnected.wait(BOUND)
            rows = sessions(N3, "x-wiped")
            assert len(rows) == 1 and int(str(rows[0]["epoch"])) > epoch, (rows, epoch)
        finally:
            after.disconnect()
    finally:
        before.paho.loop_stop()


def _events(base: Path, node: str, service: str, name: str) -> list[dict[str, object]]:
    path = base / node.split("@")[0] / "log" / f"{service}.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in complete_lines(path) if line.strip()]
    return [r for r in rows if r["event"] == name]
