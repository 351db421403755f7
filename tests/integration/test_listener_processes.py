"""``listener.processes = 2``: two listener processes share the MQTT port (SO_REUSEPORT)
and route to each other over the forwarding path nodes use.

Which process a connection lands on is the kernel's choice (a hash of its addresses), so
the tests see where each client went by the processes' session counts in ``/status``
and connect again until they get the placement they need. Every wait polls with bounds.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support.clients import Client, until_routed
from tests.support.node import Node, make_node, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROCS = ("listener", "listener-1")
BOUND = 30.0
TRIES = 40  # connects until the kernel places a client where a test needs it


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    n = make_node(tmp_path_factory.mktemp("procs"), **{"listener.processes": "2"})
    n.start()
    yield n
    n.stop()


def _status(node: Node) -> dict[str, Any]:
    return cast(dict[str, Any], node.get_json("/status"))


def _counts(node: Node) -> dict[str, int]:
    services = _status(node)["services"]
    return {p: int(services[p].get("sessions", -1)) for p in PROCS}


def _connect(node: Node, make: Any) -> tuple[Client, str]:
    """Connect a client made by ``make`` alone and say which process took it."""
    before = _counts(node)
    client = make().connect()
    seen: list[str] = []

    def placed() -> bool:
        now = _counts(node)
        seen[:] = [p for p in PROCS if now[p] == before[p] + 1]
        return len(seen) == 1 and sum(now.values()) == sum(before.values()) + 1

    wait_for(placed, BOUND, 0.05, f"{client.client_id} counted by one process")
    return client, seen[0]


def _connect_on(node: Node, make: Any, want: str) -> Client:
    for _ in range(TRIES):
        before = sum(_counts(node).values())
        client, where = _connect(node, make)
        if where == want:
            return client
        client.disconnect()
        wait_for(lambda n=before: sum(_counts(node).values()) == n, BOUND, 0.05, "client gone")
    raise AssertionError(f"the kernel never placed a connection on {want}")


def test_both_processes_run_under_the_supervisor_and_serve_the_port(node: Node) -> None:
    status = _status(node)
    assert set(PROCS) <= set(status["children"]), status["children"]
    assert all(status["children"][p]["running"] for p in PROCS)
    assert all(status["services"][p]["ready"] for p in PROCS)
    places = set()
    for i in range(TRIES):
        client, where = _connect(node, lambda i=i: Client(f"spread-{i}", node.mqtt_port))
        places.add(where)
        client.disconnect()
        wait_for(lambda: sum(_counts(node).values()) == 0, BOUND, 0.05, "clients gone")
        if places == set(PROCS):
            break
    assert places == set(PROCS), f"every connection landed on {places}"


def test_a_persistent_subscriber_hears_live_what_another_process_publishes(node: Node) -> None:
    sub, sub_proc = _connect(
        node, lambda: Client("live-sub", node.mqtt_port, version=5, clean=False, session_expiry=600)
    )
    other = PROCS[1 - PROCS.index(sub_proc)]
    pub = _connect_on(node, lambda: Client("live-pub", node.mqtt_port), other)
    try:
        sub.subscribe("procs/live", 1)
        until_routed(pub, "procs/live", [sub])
        for i in range(50):
            pub.publish("procs/live", f"live-pub:{i}", qos=1).wait_for_publish(10)
        got = sub.take(50, timeout=BOUND)
        assert [m.payload.decode() for m in got] == [f"live-pub:{i}" for i in range(50)]
        assert {m.qos for m in got} == {1}
    finally:
        pub.disconnect()
        sub.disconnect()


def test_a_session_resumed_on_the_other_process_gets_its_queue_then_live_messages(
    node: Node,
) -> None:
    """Offline messages queue for the session wherever it was; a resume on the other
    process replays them in order, and from then on live copies go to that process."""

    def make_sub() -> Client:
        return Client("hop-sub", node.mqtt_port, version=5, clean=False, session_expiry=600)

    sub, where = _connect(node, make_sub)
    sub.subscribe("procs/hop", 1)
    pub = Client("hop-pub", node.mqtt_port).connect()
    until_routed(pub, "procs/hop", [sub])
    seq = 0
    moved = 0
    try:
        for _ in range(TRIES):
            sub.disconnect()
            wait_for(lambda: sum(_counts(node).values()) == 1, BOUND, 0.05, "sub offline")
            first = seq
            for _ in range(5):
                pub.publish("procs/hop", f"hop-pub:{seq}", qos=1).wait_for_publish(10)
                seq += 1
            sub, now = _connect(node, make_sub)
            assert sub.session_present
            queued = [m.payload.decode() for m in sub.take(5, timeout=BOUND)]
            assert queued == [f"hop-pub:{i}" for i in range(first, seq)], (where, now)
            for _ in range(3):
                pub.publish("procs/hop", f"hop-pub:{seq}", qos=1).wait_for_publish(10)
                seq += 1
            live = [m.payload.decode() for m in sub.take(3, timeout=BOUND)]
            assert live == [f"hop-pub:{i}" for i in range(seq - 3, seq)], (where, now)
            moved += now != where
            where = now
            if moved >= 2:
                break
        assert moved >= 2, "the session never changed process"
        assert not sub.drain(1.0), "a copy came twice"
    finally:
        sub.disconnect()
        pub.disconnect()


def test_a_killed_listener_process_is_restarted_and_the_other_keeps_serving(node: Node) -> None:
    status = _status(node)
    victim = status["children"]["listener-1"]
    stay = Client("stay", node.mqtt_port).connect()
    os.kill(int(victim["pid"]), signal.SIGKILL)

    def restarted() -> bool:
        child = _status(node)["children"]["listener-1"]
        return bool(child["running"]) and child["pid"] != victim["pid"]

    wait_for(restarted, BOUND, 0.2, "listener-1 restarted")
    wait_for(lambda: node.health() == 200, BOUND, 0.2, "node healthy again")
    for i in range(6):  # whichever process takes them
        Client(f"after-{i}", node.mqtt_port).connect().disconnect()
    stay.disconnect()
    assert _status(node)["children"]["listener-1"]["restarts"] >= 1


def test_each_process_logs_to_its_own_file(node: Node) -> None:
    node.settle_logs()
    logs = Path(node.log_dir)
    assert (logs / "listener.jsonl").exists() and (logs / "listener-1.jsonl").exists()
    started = [e for e in node.events("service.started") if e.get("service") == "listener"]
    assert len({e.get("pid") for e in started}) >= 2
