"""``tests/fault/audit_check.audit_run`` over hand-written node logs in the fault
harness's layout (``BASE/nK/log/*.jsonl``, ``BASE/history.jsonl.gz``), no broker: the
ETL reads the nodes' logs and nothing else of the run, builds the expect file from the
history, and its summary agrees with the checker's view of the same run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from tests.fault.audit_check import audit_run, compare
from tests.fault.checker import Delivery, History, Publish, Subscriber, check
from tests.fault.harness import Options, Result, _write

pytestmark = pytest.mark.spark

T1, T2 = "ft/r/p1", "ft/r/p2"


def line(sec: float, node: str, event: str, **fields: Any) -> tuple[float, str]:
    rec = {
        "ts": f"2026-11-26T10:00:{sec:09.6f}Z",
        "level": "info",
        "node": node,
        "service": "listener",
        "event": event,
        "schema": "1.0",
        **fields,
    }
    return sec, json.dumps(rec, separators=(",", ":")) + "\n"


def published(sec: float, node: str, msg: str, publisher: str, topic: str) -> tuple[float, str]:
    return line(
        sec,
        node,
        "message.published",
        msg_id=msg,
        client_id=publisher,
        topic=topic,
        qos=1,
        retain=False,
        size=10,
        mountpoint="",
    )


def delivered(sec: float, node: str, msg: str, sub: str, publisher: str) -> tuple[float, str]:
    return line(
        sec,
        node,
        "message.delivered",
        msg_id=msg,
        client_id=sub,
        topic=T1 if publisher == "p1" else T2,
        qos=1,
        dup=False,
        latency_us=100,
        publisher=publisher,
        seq=0,
    )


def acked(sec: float, node: str, msg: str, sub: str) -> tuple[float, str]:
    return line(sec, node, "message.acked", msg_id=msg, client_id=sub, qos=1, latency_us=200)


def write_logs(base: Path) -> None:
    """What the nodes logged (see ``the_run``)."""
    n1 = [
        published(1.0, "n1", "n1-1", "p1", T1),
        published(2.0, "n1", "n1-2", "p1", T1),
        published(3.0, "n1", "n1-3", "p1", T1),
        line(
            3.1,
            "n1",
            "message.refused",
            msg_id="n1-3",
            client_id="p1",
            topic=T1,
            qos=1,
            reason_code=0x80,
            reason="store_error",
        ),
        published(5.0, "n1", "n1-5", "p1", T1),
    ]
    n2 = [published(6.0, "n2", "n2-4", "p1", T1)]  # the stalled node routes p1:4 late
    for sec, msg, pub in ((1.1, "n1-1", "p1"), (2.1, "n1-2", "p1"), (6.1, "n2-4", "p1")):
        n2 += [delivered(sec, "n2", msg, "s1", pub), acked(sec + 0.01, "n2", msg, "s1")]
    n2 += [delivered(6.2, "n2", "n1-5", "s1", "p1"), acked(6.21, "n2", "n1-5", "s1")]
    n2 += [delivered(1.6, "n2", "n3-1", "s1", "p2")]  # written; the connection died unread
    n3 = [published(1.5, "n3", "n3-1", "p2", T2)]
    n3 += [delivered(1.2, "n3", "n1-1", "s2", "p1"), acked(1.21, "n3", "n1-1", "s2")]
    n3 += [delivered(5.1, "n3", "n1-5", "s2", "p1"), acked(5.11, "n3", "n1-5", "s2")]
    for node, lines in (("n1", n1), ("n2", n2), ("n3", n3)):
        (base / node / "log").mkdir(parents=True)
        text = "".join(text for _sec, text in sorted(lines))
        (base / node / "log" / "listener.jsonl").write_text(text)
    (base / "n1" / "console.log").write_text("not a log the ETL reads\n")
    # the harness's evidence file copies node lines; the audit must not read it twice
    (base / "evidence.jsonl").write_text(delivered(1.1, "n2", "n1-1", "s1", "p1")[1])


class _NoCluster:
    """Stands in for the harness's cluster: the evidence file of a run with violations
    reads the nodes' non-message events, and these logs have none."""

    def events(self, keep: Any) -> Iterator[dict[str, Any]]:
        return iter(())


def the_run() -> History:
    """s1 (p1, p2) and s2 (p1). p1:2 is acknowledged and never reaches s2 (lost to
    both views); p1:3 is refused; p1:4 gets no answer, its node routes it after p1:5,
    s1 receives it, s2 never does; p2:1 is acknowledged and written to s1's connection,
    which died before the client read it, never resent; p2:2 never left its client."""

    def pub(p: str, seq: int, acked: bool, outcome: str) -> Publish:
        return Publish(p, seq, T1 if p == "p1" else T2, 1, acked, "n1", outcome)

    def got(sub: str, *payloads: str) -> list[Delivery]:
        return [Delivery(sub, T1 if p.startswith("p1") else T2, p, 1, False) for p in payloads]

    return History(
        subscribers=[
            Subscriber("s1", frozenset({T1, T2}), 1),
            Subscriber("s2", frozenset({T1}), 2),
        ],
        publishes=[
            pub("p1", 1, True, "ok"),
            pub("p2", 1, True, "ok"),
            pub("p1", 2, True, "ok"),
            pub("p1", 3, False, "refused 0x80"),
            pub("p1", 4, False, "timeout"),
            pub("p2", 2, False, "disconnected"),
            pub("p1", 5, True, "ok"),
        ],
        deliveries=[*got("s1", "p1:1", "p1:2", "p1:4", "p1:5"), *got("s2", "p1:1", "p1:5")],
    )


def test_audit_run_over_a_fault_run_directory(spark: SparkSession, tmp_path: Path) -> None:
    base = tmp_path / "fault"
    history = the_run()
    report = check(history)
    result = Result(Options(base_dir=base), history, report, [], [], "", 0.0, 0.0, 0.0)
    _write(result, _NoCluster())  # type: ignore[arg-type]  # as the harness writes a run
    write_logs(base)
    assert report.counts()["lost"] == 2 and report.counts()["reordered"] == 0
    assert report.indeterminate_undelivered == 4  # s1: p1:3, p2:2; s2: p1:3, p1:4

    summary = audit_run(base, spark)  # the history from base/history.jsonl.gz

    assert summary["expect_mode"] == "filters" and summary["files"] == 3
    assert (summary["messages"], summary["expected"], summary["corrupt_lines"]) == (6, 11, 0)
    assert (summary["lost"], summary["refused"], summary["unacked"]) == (2, 2, 1)
    assert (summary["out_of_order"], summary["duplicated"], summary["unexpected"]) == (1, 0, 0)
    assert compare(history, summary, report) == []
    assert (base / "audit" / "tables" / "delivery_audit").is_dir()
    expect = json.loads((base / "audit" / "expect.json").read_text())
    assert {(e["subscriber"], e["topic_filter"]) for e in expect} == {
        ("s1", T1),
        ("s1", T2),
        ("s2", T1),
    }
    # the same summary, were the audit to miss the write-to-a-dead-connection loss
    (msg,) = compare(history, {**summary, "unacked": 0, "lost": 1}, report)
    assert "the audit misses losses" in msg
