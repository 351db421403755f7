"""S17 of cluster-scenarios.md on a 3-node dev cluster, under each shared subscription
policy: members of one ``$share`` group on every node, a publisher on n1 sending 1,000
QoS 1 messages, and a member's node SIGKILLed mid-stream.

The node that picks a member for a message keeps it until that member acknowledges it
(``routing.router``, ``forward.sender``): what was in flight to a member that is gone
goes to another member, and every message the publisher saw acknowledged reaches a
member. A message reaches two members only when the first one is gone (it may have
taken it, unacknowledged, before it went).

- ``random``: n3 dies at message 300. n1 picked n3's member for messages that were on
  their way there or with it, and for those sent before the cluster saw n3 down: n1
  picks again for them (``shared.redelivered``). A fourth member on n2 never
  acknowledges anything, and its connection drops at message 600: n2 returns every
  copy it held to n1, which gives them to the others.
- ``prefer_local``: n1's own member goes first (its connection drops at message 300:
  n1 gives what it held to the others), then n3 dies at message 600, as under random.
- ``local_only``: n3 dies at message 300: every message stays with n1's member. Then a
  message published on n2, whose member left, goes to nobody: dropped and logged.

Payloads are ``s17:seq``; every wait polls with generous bounds; no timing is asserted.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.common.pids import alive
from tests.conformance.client import connected
from tests.integration.test_cluster_broker import subscriber_node
from tests.integration.test_cluster_membership import N1, N2, N3, pid_of
from tests.support.clients import Client, Received
from tests.support.cluster import dev_cluster
from tests.support.node import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MQTT = {N1: 10053, N2: 10103, N3: 10153}
NODES = (N1, N2, N3)
BOUND = 60.0
TOTAL = 1_000
WINDOW = 40  # QoS 1 publishes the publisher keeps unanswered
KILL_AFTER = 300  # acknowledged publishes before the member's node dies
SHARE = "$share/s17/s17/#"


@pytest.fixture(scope="module", params=["random", "prefer_local", "local_only"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    policy = str(request.param)
    base = tmp_path_factory.mktemp(f"s17-{policy}")
    with dev_cluster(base, f"shared_subscription_policy={policy}"):
        yield policy, base


class Publisher:
    """One QoS 1 publisher of ``s17:0`` … ``s17:TOTAL-1`` with a window of unanswered
    publishes."""

    def __init__(self, node: str) -> None:
        self.client = Client("s17-pub", MQTT[node], reconnect=False).connect()
        self.acked: set[int] = set()
        self.sent = 0

    def pump(self) -> None:
        """Send what the window allows; switch nodes if the connection was lost."""
        c = self.client
        self.acked.update(c.acked)
        if c.refused:
            raise AssertionError(f"refused publishes: {c.refused[:5]}")
        assert not c.disconnected.is_set(), "the publisher lost its connection"
        while self.sent < TOTAL and c.unanswered() < WINDOW:
            c.publish("s17/t", f"s17:{self.sent}", 1, tag=self.sent)
            self.sent += 1

    def close(self) -> None:
        self.client.disconnect()


def _kill(base: Path, node: str) -> None:
    pid = pid_of(base, node)
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid), BOUND, 0.1, f"{node} gone")


def _seqs(got: list[Received]) -> list[int]:
    return [int(g.payload.decode().split(":")[1]) for g in got if g.topic == "s17/t"]


def _events(base: Path, node: str, event: str) -> list[dict[str, object]]:
    found = []
    for path in (base / node.split("@")[0] / "log").glob("listener*.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            if f'"{event}"' in line:
                found.append(json.loads(line))
    return found


def test_s17_a_shared_groups_messages_survive_a_members_node(cluster: tuple[str, Path]) -> None:
    policy, base = cluster
    members = {
        n: Client(f"s17-m{k}", MQTT[n], reconnect=False).connect() for k, n in enumerate(NODES, 1)
    }
    for m in members.values():
        m.subscribe(SHARE, 1)
    for node in NODES:  # every node routes to every member
        for m in members.values():
            wait_for(
                lambda n=node, c=m.client_id: subscriber_node(base, n, c) is not None,
                BOUND,
                0.2,
                f"{m.client_id} known on {node}",
            )
    # (acknowledged publishes, what happens then). Where n3's member gets messages, n3
    # dies only once it has received one: on a loaded machine the first copies to n3 may
    # still wait for the link to dial when the count is reached (CI met it once)
    kill_n3 = lambda: _kill(base, N3)  # noqa: E731 - compared by identity below
    steps: list[tuple[int, Callable[[], None]]] = [(KILL_AFTER, kill_n3)]
    gone = {N3}
    m3 = members[N3]
    if policy == "random":
        stuck = connected(MQTT[N2], "s17-m4")[0]  # reads nothing, acknowledges nothing
        assert stuck.subscribe(SHARE, 1).reason_codes == (1,)
        wait_for(lambda: subscriber_node(base, N1, "s17-m4") == N2, BOUND, 0.2, "m4 on n1")
        steps.append((2 * KILL_AFTER, stuck.close))
    if policy == "prefer_local":
        steps = [(KILL_AFTER, members[N1].drop), (2 * KILL_AFTER, steps[0][1])]
        gone = {N1, N3}
    pub = Publisher(N1)
    killers: list[threading.Thread] = []
    try:
        deadline = time.monotonic() + 4 * BOUND
        while len(pub.acked) < TOTAL:
            assert time.monotonic() < deadline, f"{len(pub.acked)} of {TOTAL} acknowledged"
            due = bool(steps) and len(pub.acked) >= steps[0][0]
            waiting = (
                due and steps[0][1] is kill_n3 and policy != "local_only" and m3.messages.empty()
            )
            if not waiting:  # (the publisher pauses while n3's member has nothing yet)
                pub.pump()
            if due and not waiting:
                # from a thread: the publisher keeps sending while the node dies
                killers.append(threading.Thread(target=steps.pop(0)[1]))
                killers[-1].start()
            time.sleep(0.002)
        for k in killers:
            k.join(BOUND)
        got = {n: _seqs(m.drain(2.0)) for n, m in members.items()}
    finally:
        pub.close()
        for n, m in members.items():
            if n in gone:
                m.paho.loop_stop()
            else:
                m.disconnect()

    # every acknowledged message reached a member ...
    receivers: dict[int, list[str]] = {}
    for node, seqs in got.items():
        for seq in seqs:
            receivers.setdefault(seq, []).append(node)
    missing = sorted(set(range(TOTAL)) - set(receivers))
    assert not missing, f"{len(missing)} acknowledged messages reached no member: {missing[:20]}"
    # ... once, but for what a member that went may have taken before it went
    twice = {s: who for s, who in receivers.items() if len(who) > 1 and not gone & set(who)}
    assert not twice, f"delivered to two members that stayed: {list(twice.items())[:10]}"

    again = _events(base, N1, "shared.redelivered")
    if policy == "local_only":
        assert set(got[N1]) == set(range(TOTAL)), "local_only: not all with n1's member"
        assert not got[N2] and not got[N3], "local_only: a message left the node"
        assert again == []
        _no_local_member_drops(base, members[N2].client_id)
        return
    assert got[N3], "n3's member got nothing before it died: the kill tested nothing"
    lost_by = {str(e["client_id"]) for e in again}
    assert "s17-m3" in lost_by, f"no copy n3's member held went to another member: {again[:5]}"
    if policy == "prefer_local":
        assert got[N1], "n1's member got nothing before it left"
    if policy == "random":
        returned = [e for e in again if e["client_id"] == "s17-m4"]
        assert returned, "n2 gave back none of the copies its stuck member held"
        assert {e["reason"] for e in returned} == {"member_gone"}
        # to another member, never back to the one that left. n3's member counts: n1
        # may pick it before it has seen n3 down (the two happen at about the same
        # time; CI met it once), and what then went to n3 came back to be picked again
        # or reached its member before it died: every message is accounted for above.
        assert {e["to"] for e in returned} <= {"s17-m1", "s17-m2", "s17-m3"}
    after_n3 = [e for e in again if e["client_id"] == "s17-m3"]
    assert all(e["to"] not in ("", "s17-m3") for e in after_n3), f"not to a live one: {after_n3}"


def _no_local_member_drops(base: Path, left: str) -> None:
    """``local_only``: a message published on n2, whose member left, goes to no member
    (not to n1's), and is logged as dropped there."""
    wait_for(lambda: subscriber_node(base, N1, left) is None, BOUND, 0.2, f"{left} gone on n1")
    listener = Client("s17-m1-again", MQTT[N1]).connect()
    listener.subscribe(SHARE, 1)
    alone = Client("s17-pub2", MQTT[N2]).connect()
    try:
        wait_for(lambda: subscriber_node(base, N2, "s17-m1-again") == N1, BOUND, 0.2, "known on n2")
        info = alone.publish("s17/t", "s17:-1", 1)
        info.wait_for_publish(BOUND)
        assert _seqs(listener.drain(2.0)) == []
        wait_for(
            lambda: any(
                e.get("reason") == "no_shared_member" and e.get("client_id") == SHARE
                for e in _events(base, N2, "message.dropped")
            ),
            BOUND,
            0.2,
            "the drop logged on n2",
        )
    finally:
        alone.disconnect()
        listener.disconnect()
