"""The fault run's history against the ETL's delivery audit of the same run.

The checker (``checker.py``) judges what the clients saw; the delivery audit
(``spark_pipeline/transforms/audit.py``) judges what the nodes logged. They count
different things, so they need not be equal: :func:`compare` checks only the relations
that follow from the two models, and returns, as sentences, those that fail. It is pure
(the history, the checker's report and the audit's summary in); :func:`audit_run`, at
the end, is not: it runs the ETL over a run's logs.

What the comparison assumes, all true of ``harness.py``'s runs:

- A1. The audit ran with the expect file :func:`expectations` builds: each subscriber of
  the history expects every QoS >= 1 message on each of its topics, with no lower bound
  in time (the harness subscribes before the first publish, and routes reach every node
  before it).
- A2. The only QoS >= 1 publishers are the history's, each on its own topic, and none
  sends a publish twice (a publisher that gives up abandons its connection and what was
  in flight, and goes on with the next seq): a publish is at most one
  ``message.published`` line, that is one message of the audit, and every audited
  message is a publish of the history.
- A3. The logs are complete (message events on, every spool converted): a node logs
  ``message.published`` before it answers the publisher, and ``message.delivered``
  before the PUBLISH packet leaves. So an acknowledged publish is a message of the
  audit, and a message a client received was delivered to it in the audit.
- A4. A refused message was not acknowledged: ``message.refused`` is logged as the
  publisher is answered with a failure code.

For a subscriber S and a publish p on a topic S subscribed to, the history says whether
p was acknowledged and whether S received it; the audit says, of p's message (if
logged), whether it was delivered to S (a PUBLISH written to S's connection: written is
not received, the connection may die under it), acknowledged by S, refused. With
``E_acked`` and ``E_all`` the number of such (S, p) pairs over acknowledged and over all
publishes:

- **expected**: ``E_acked <= audit.expected <= E_all``. By A1 the audit expects exactly
  the (S, message) pairs of logged messages; by A3 every acknowledged publish is one,
  and by A2 nothing else is.
- **lost, bounded above**: ``audit.lost <= checker.lost + indeterminate_undelivered``.
  An audit-lost pair was never written to S, so S never received it (A3); its publish
  was acknowledged (the checker's ``lost``) or not (``Report.indeterminate_undelivered``:
  unacknowledged and never received), and by A2 no two audit pairs are one (S, p).
- **lost, bounded below**: ``checker.lost <= audit.lost + audit.unacked +
  checker.unexpected``. A pair the checker counts lost is acknowledged, so logged (A3),
  not refused (A4) and expected (A1). If the audit saw no write of it, the audit counts
  it lost. If the audit saw one, the client never took the message, so never
  acknowledged it: the pair is ``unacked``. (A broker that writes a message on a
  connection that dies and never sends it again loses it that way, so ``checker.lost <=
  audit.lost`` alone does not follow.) The checker's ``unexpected`` deliveries are the
  slack for a copy received on another topic than its publisher's: the checker does
  not count it as received, the audit does.
- **refused**: ``audit.refused <= E_all - E_acked``: refused messages are publishes
  that were not acknowledged (A4).
- **out of order**: the audit cannot tell acknowledged messages from the others, and an
  acknowledged message can be out of the audit's order with no promise broken.
  Publisher P gives up on seq 4 (its node stalls) and publishes 5 elsewhere,
  acknowledged; the stalled node routes 4 later, so its ``message.published`` line, and
  ``pub_seq``, come after 5's; S receives 4, then 5. The checker sees 4 then 5, in order
  (4 is indeterminate anyway); the audit sees 5, acknowledged, first delivered after a
  higher ``pub_seq``. So "the audit's out-of-order pairs are all unacknowledged
  messages" does not follow from the models. This does: if the checker found no
  acknowledged seq reordered and the audit holds no unacknowledged publish
  (``audit.expected == E_acked``), then ``audit.out_of_order == 0``. An out-of-order
  pair (m, S) has a witness b of the same publisher, with a higher ``pub_seq``, first
  written to S before m. Both are acknowledged publishes; each one's
  ``message.published`` line falls between the sending of its publish and its answer,
  and a publisher sends one at a time, so ``pub_seq`` order is seq order: b came after
  m, which was acknowledged first. Had S taken that write of b, it would have received b
  before m (m's first write comes later), and the checker would call m reordered. So the
  write of b went to a connection that died before the client took it: a reordering by
  the broker that no client saw, which the audit reports rightly (the sentence says so).
  With unacknowledged publishes in the logs, the models bound ``out_of_order`` by
  nothing: one late publish can precede many acknowledged ones.

Not compared, as the models do not relate them: duplicates (the audit counts writes,
those on connections that died included; the checker counts receipts), the checker's
reorderings against the audit's (a first write on a dead connection makes the audit's
first delivery earlier than the client's), and sessions. Corrupt log lines are not
looked at: a line torn by a killed node is written again whole by the next converter.
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_pipeline.expect import Expectation
from tests.fault.checker import Connect, Delivery, History, Publish, Report, Subscriber, check

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

AUDIT_KEYS = ("expected", "lost", "unacked", "refused", "out_of_order")


@dataclass(frozen=True, slots=True)
class SubscribedPairs:
    """(subscriber, publish) pairs of a history, over the subscribers subscribed to the
    publish's topic: all of them, and those of acknowledged publishes."""

    all: int
    acked: int


def subscribed_pairs(history: History) -> SubscribedPairs:
    """``E_all`` and ``E_acked`` of the module docstring."""
    total = acked = 0
    for sub in history.subscribers:
        for p in history.publishes:
            if p.topic in sub.topics:
                total += 1
                acked += p.acked
    return SubscribedPairs(total, acked)


def expectations(history: History) -> list[Expectation]:
    """The audit's expect entries (A1): each subscriber, each of its topics, no ``from``.

    The harness's topics hold no wildcard, so each filter matches its topic only."""
    return [Expectation(s.name, t, None) for s in history.subscribers for t in sorted(s.topics)]


def compare(history: History, audit: Mapping[str, Any], report: Report | None = None) -> list[str]:
    """What breaks the relations of the module docstring; empty when the views agree.

    ``audit`` is the audit summary (``spark_pipeline.jobs.run_etl``'s result, or a row
    of ``audit_summary``); ``report`` is ``check(history)``, computed when not given."""
    report = check(history) if report is None else report
    mode = audit.get("expect_mode", "filters")
    if mode != "filters":
        return [
            f"the audit ran without the expect file (expect mode {mode!r}): "
            "run it with expectations(history), the bounds below need it"
        ]
    missing = [k for k in AUDIT_KEYS if k not in audit]
    if missing:
        return [f"the audit summary lacks {', '.join(missing)}"]
    a = {k: int(audit[k]) for k in AUDIT_KEYS}
    kinds = report.counts()
    lost, unexpected, reordered = kinds["lost"], kinds["unexpected"], kinds["reordered"]
    e = subscribed_pairs(history)
    out: list[str] = []
    if a["expected"] < e.acked:
        out.append(
            f"the audit expects {a['expected']} (message, subscriber) pairs, fewer than the "
            f"{e.acked} pairs of acknowledged publishes: published messages are missing "
            "from the logs"
        )
    if a["expected"] > e.all:
        out.append(
            f"the audit expects {a['expected']} (message, subscriber) pairs, more than the "
            f"{e.all} pairs of every publish attempted: messages no publisher of the "
            "history sent, or a publish logged twice"
        )
    if a["lost"] > lost + report.indeterminate_undelivered:
        out.append(
            f"the audit counts {a['lost']} lost, more than the checker's {lost} lost plus "
            f"{report.indeterminate_undelivered} unacknowledged publishes never received"
        )
    if lost > a["lost"] + a["unacked"] + unexpected:
        out.append(
            f"the checker counts {lost} lost, more than the audit's {a['lost']} lost plus "
            f"{a['unacked']} delivered but never acknowledged (plus {unexpected} "
            "deliveries the checker found unexpected): the audit misses losses"
        )
    if a["refused"] > e.all - e.acked:
        out.append(
            f"the audit counts {a['refused']} refused pairs, more than the "
            f"{e.all - e.acked} pairs of publishes not acknowledged: a refused message "
            "was acknowledged"
        )
    if reordered == 0 and a["expected"] == e.acked and a["out_of_order"] > 0:
        out.append(
            f"the audit counts {a['out_of_order']} pairs out of order, where every logged "
            "publish was acknowledged and no client saw one reordered: either the audit "
            "misorders deliveries, or the broker wrote messages out of order on "
            "connections that died before their clients took them"
        )
    return out


# -- running the audit over a run (I/O, Spark) --------------------------------------------


def load_history(path: Path) -> History:
    """The history a run wrote (``harness._write``: ``history.jsonl.gz``)."""
    h = History()
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if "subscriber" in rec:
                h.subscribers.append(
                    Subscriber(rec["subscriber"], frozenset(rec["topics"]), rec["qos"])
                )
            elif "publish" in rec:
                h.publishes.append(Publish(**rec["publish"]))
            elif "connect" in rec:
                h.connects.append(Connect(**rec["connect"]))
            elif "delivery" in rec:
                h.deliveries.append(Delivery(**rec["delivery"]))
    return h


def _stage_logs(base_dir: Path, logs: Path) -> None:
    """``logs/nK/…`` links to every node's log files (``base_dir/nK/log``), so that the
    ETL reads those and nothing else of the run's directory (``evidence.jsonl`` copies
    some of the nodes' lines)."""
    from spark_pipeline.extract import find_log_files

    node_dirs = sorted(d for d in base_dir.glob("n*/log") if d.is_dir())
    if not node_dirs:
        raise FileNotFoundError(f"no node log directory (n*/log) under {base_dir}")
    pending = [
        seg for d in node_dirs for seg in (d / "spool").glob("*/*.seg") if seg.stat().st_size
    ]
    if pending:
        raise RuntimeError(
            f"events still spooled, not in the logs ({pending[0]} …): "
            "run `ternmq log convert --logs DIR` for that node first"
        )
    shutil.rmtree(logs, ignore_errors=True)
    for d in node_dirs:
        for f in find_log_files(d):
            link = logs / d.parent.name / f.relative_to(d)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(f.resolve())


def audit_run(
    base_dir: Path,
    spark: SparkSession | None = None,
    history: History | None = None,
    work_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the ETL (``spark_pipeline.jobs.run_etl``) over the logs of the fault run in
    ``base_dir`` with the expect file of its history; the audit summary, as ``run_etl``
    returns it (with ``expect_mode`` and the ingest counts).

    ``spark`` is used as given; without it ``run_etl`` starts a local session and stops
    it. ``history`` defaults to the one the run wrote (``base_dir/history.jsonl.gz``).
    The nodes must be stopped. The links to the logs, ``expect.json`` and the tables go
    to ``work_dir`` (default ``base_dir/audit``), replaced on each call."""
    from spark_pipeline.jobs import run_etl

    if history is None:
        history = load_history(base_dir / "history.jsonl.gz")
    work = base_dir / "audit" if work_dir is None else work_dir
    work.mkdir(parents=True, exist_ok=True)
    _stage_logs(base_dir, work / "logs")
    expect = expectations(history)
    (work / "expect.json").write_text(
        json.dumps(
            [
                {"subscriber": e.subscriber, "topic_filter": e.topic_filter, "from": None}
                for e in expect
            ],
            indent=1,
        )
        + "\n"
    )
    return run_etl(work / "logs", work / "tables", spark=spark, expect=expect)
