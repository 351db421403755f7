"""``trace client``'s lines: each packet as VerneMQ's trace shows it, passwords never,
payloads cut at the limit, and a rate limit that drops and counts rather than grows."""

from __future__ import annotations

import asyncio
import time

from services.listener import trace
from services.listener.mqtt.types import (
    Connack,
    Connect,
    Disconnect,
    Pingreq,
    Puback,
    Publish,
    Suback,
    Subscribe,
    Subscription,
    Unsubscribe,
    Will,
)


def test_packets_read_as_vernemqs_trace_prints_them() -> None:
    connect = Connect("MQTT", 4, True, 30, "c1", username="alice", password=b"s3cret")
    assert trace.describe(connect) == ("CONNECT(c: c1, v: 4, u: alice, p: ******, cs: 1, ka: 30)")
    assert trace.describe(Connack(False, 0)) == "CONNACK(sp: 0, rc: 0)"
    sub = Subscribe(1, (Subscription("a/b", 1), Subscription("c/#", 0)))
    assert trace.describe(sub) == 'SUBSCRIBE(m1) with topics:\n    q:1, t: "a/b"\n    q:0, t: "c/#"'
    assert trace.describe(Suback(1, (1, 0x80))) == "SUBACK(m1, qt[1, 128])"
    publish = Publish("a/b", b"hello", qos=1, retain=True, packet_id=7)
    assert trace.describe(publish) == 'PUBLISH(d0, q1, r1, m7, "a/b") with payload:\n    hello'
    assert trace.describe(Puback(7)) == "PUBACK(m7)"
    assert trace.describe(Puback(7, 0x87)) == "PUBACK(m7, rc: 135)"
    assert trace.describe(Unsubscribe(2, ("a/b",))) == 'UNSUBSCRIBE(m2) with topics:\n    t: "a/b"'
    assert trace.describe(Pingreq()) == "PINGREQ()"
    assert trace.describe(Disconnect()) == "DISCONNECT(rc: 0)"


def test_passwords_never_and_payloads_only_up_to_the_limit() -> None:
    will = Will("w/t", b"bye", 1, False)
    connect = Connect("MQTT", 5, False, 10, "c2", will=will, username=None, password=b"pw")
    text = trace.describe(connect, payload_limit=2)
    assert "pw" not in text.replace("p: ******", "")
    assert 'with will q:1, r:0, t: "w/t":\n    by... (3 bytes)' in text
    binary = Publish("t", b"\xff\x00ok")
    assert trace.describe(binary).endswith("\\xff\\x00ok")


def test_the_rate_limit_drops_and_counts_the_lines_over_it() -> None:
    async def main() -> list[str]:
        t = trace.Trace("", "c1", rate_max=3, rate_interval=0.2)
        for i in range(8):
            t.put(f"line {i}")
        assert t.dropped == 5
        time.sleep(0.25)  # the next interval: the count is reported first
        t.put("line 8")
        out = []
        while not t.lines.empty():
            out.append(t.lines.get_nowait())
        return out

    out = asyncio.run(main())
    assert out[:3] == ["line 0", "line 1", "line 2"]
    assert out[3].startswith("... 5 lines dropped (rate limit: 3 lines per 200 ms)")
    assert out[4] == "line 8"


def test_a_stopped_trace_leaves_nothing_behind() -> None:
    async def main() -> None:
        a = trace.Trace("", "c3")
        b = trace.Trace("", "c3")
        held = trace.start(a)
        assert trace.start(b) is held  # one list per client id, shared by its connections
        trace.received(held, "peer", "c3", Pingreq())
        assert (
            a.lines.get_nowait() == b.lines.get_nowait() == '<peer> MQTT RECV: CID: "c3" PINGREQ()'
        )
        trace.stop(a)
        trace.stop(b)
        assert ("", "c3") not in trace.ACTIVE and held == []

    asyncio.run(main())
