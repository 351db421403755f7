"""The history of a randomized fault run over replicated queues, and the checks over it.

Pure: no I/O, no clock. The harness (``harness.py``) records a :class:`History` while the
nemesis kills, stops and partitions nodes; :func:`check` decides afterwards whether the
broker kept its promise (README: "a QoS 1/2 message acknowledged to its publisher is never
lost or reordered"). Keeping the model apart from the processes lets the checks be tested
with hand-made histories (``tests/unit/test_fault_checker.py``), including ones that must
fail.

The model:

- A **publisher** sends payloads ``"<publisher>:<seq>"`` on one topic of its own, with
  increasing ``seq``, **one at a time**: it waits for the outcome of ``seq`` before it sends
  ``seq + 1`` (so an acknowledged ``seq`` was in the broker before any later one was
  sent). A publish is **acknowledged** when its PUBACK (QoS 1) or its PUBREC and PUBCOMP
  (QoS 2) came back with a reason code below 0x80. A publish refused (0x80 …), or without
  an answer because its node died or stalled, is **indeterminate**: it may or may not be
  delivered, and it constrains nothing (the report counts the (subscriber, publish)
  pairs of those that arrived and of those that did not).
- A **subscriber** has one persistent session, subscribed to a fixed set of publisher
  topics before the first publish and never unsubscribed; it goes offline and comes back
  on any node. Every message it receives is recorded with its QoS and DUP flag, in the
  order the broker sent it: the order of the PUBLISH packets (a QoS 2 message is handed
  to the application later, at its PUBREL, but was sent at its PUBLISH).

The checks, per subscriber S and publisher P whose topic S is subscribed to:

- **lost**: an acknowledged publish of P that S never received.
- **reordered**: take S's deliveries from P in arrival order and keep only the first
  delivery of each seq. An *acknowledged* seq ``a`` is reordered when its first delivery
  comes after the first delivery of some seq ``b > a``. (An indeterminate seq arriving
  late is not a violation, only counted as ``late_indeterminate``: a publish that a
  stopped node finishes after its publisher gave up and sent ``b`` elsewhere may land
  behind ``b``.) Redeliveries of a seq already received are not ordering events; they
  are judged by the duplicate rules alone.
- **duplicate_qos2**: a seq received a second time where either copy arrived at QoS 2
  (exactly once means once).
- **duplicate_without_dup**: a seq received a second time at QoS 1 without the DUP flag
  (at least once allows a redelivery, and MQTT marks a redelivery with DUP).
- **session_lost**: a subscriber reconnected without a session present (its
  subscriptions and queue were lost; the messages it then misses are also ``lost``).
- **unexpected**: a delivery of something never published, or on a topic S is not
  subscribed to, or on another topic than its publisher's.

Payloads starting with ``probe:`` (the harness's routing probes, QoS 0) are ignored.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

PROBE_PREFIX = "probe:"
KINDS = (
    "lost",
    "reordered",
    "duplicate_qos2",
    "duplicate_without_dup",
    "session_lost",
    "unexpected",
)


@dataclass(frozen=True, slots=True)
class Publish:
    """One publish attempt and its outcome."""

    publisher: str
    seq: int
    topic: str
    qos: int
    acked: bool
    node: str = ""  # where it was sent
    outcome: str = ""  # "ok", "refused 0x80", "timeout", "disconnected" …
    sent_at: float = 0.0  # wall clock (UTC seconds), to match the nodes' logs
    done_at: float = 0.0

    @property
    def payload(self) -> str:
        return f"{self.publisher}:{self.seq}"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message received by a subscriber. A history lists them in the order their
    PUBLISH packets arrived (``order``), which for QoS 2 is not when the client hands
    them over (at PUBREL, ``at``)."""

    subscriber: str
    topic: str
    payload: str
    qos: int
    dup: bool
    node: str = ""
    at: float = 0.0
    order: int = 0


@dataclass(frozen=True, slots=True)
class Subscriber:
    name: str
    topics: frozenset[str]
    qos: int  # the subscription's maximum QoS


@dataclass(frozen=True, slots=True)
class Connect:
    """A subscriber's CONNACK: ``first`` is its very first connection (no session yet)."""

    subscriber: str
    node: str
    session_present: bool
    first: bool
    at: float = 0.0


@dataclass
class History:
    subscribers: list[Subscriber] = field(default_factory=list)
    publishes: list[Publish] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    connects: list[Connect] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    subscriber: str
    publisher: str = ""
    seq: int = -1
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subscriber": self.subscriber,
            "publisher": self.publisher,
            "seq": self.seq,
            "detail": self.detail,
        }


@dataclass
class Report:
    violations: list[Violation] = field(default_factory=list)
    publishes: int = 0
    acked: int = 0
    deliveries: int = 0
    probes: int = 0
    duplicates_allowed: int = 0  # QoS 1 redeliveries with DUP set
    indeterminate_delivered: int = 0  # unacknowledged publishes that arrived anyway
    late_indeterminate: int = 0  # of which arrived behind a later seq
    # (subscriber, unacknowledged publish of a topic it subscribed to) pairs that never
    # arrived: the most a log-based audit may count lost beyond the checker's ``lost``
    indeterminate_undelivered: int = 0
    session_resumes: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def counts(self) -> dict[str, int]:
        c = Counter(v.kind for v in self.violations)
        return {k: c.get(k, 0) for k in KINDS}

    def lost_runs(self) -> dict[str, list[tuple[int, int]]]:
        """``"subscriber<-publisher"`` -> the lost seqs as inclusive ranges."""
        seqs: dict[str, list[int]] = defaultdict(list)
        for v in self.violations:
            if v.kind == "lost":
                seqs[f"{v.subscriber}<-{v.publisher}"].append(v.seq)
        return {key: _runs(sorted(values)) for key, values in sorted(seqs.items())}

    def summary(self, limit: int = 20) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "violations": self.counts(),
            "publishes": self.publishes,
            "acked": self.acked,
            "deliveries": self.deliveries,
            "duplicates_allowed": self.duplicates_allowed,
            "indeterminate_delivered": self.indeterminate_delivered,
            "late_indeterminate": self.late_indeterminate,
            "indeterminate_undelivered": self.indeterminate_undelivered,
            "session_resumes": self.session_resumes,
            "lost_runs": {k: v[:limit] for k, v in self.lost_runs().items()},
            "examples": {
                kind: [v.as_dict() for v in self.violations if v.kind == kind][:limit]
                for kind in KINDS
                if kind != "lost" and any(v.kind == kind for v in self.violations)
            },
        }


def _runs(values: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for v in values:
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def parse(payload: str) -> tuple[str, int] | None:
    """``"<publisher>:<seq>"`` -> (publisher, seq); None for anything else."""
    publisher, sep, seq = payload.rpartition(":")
    if not sep or not publisher or not seq.isdigit():
        return None
    return publisher, int(seq)


def check(history: History) -> Report:
    """Every check of the module docstring over ``history``."""
    report = Report(publishes=len(history.publishes))
    published: dict[tuple[str, int], Publish] = {}
    topic_of: dict[str, str] = {}
    for p in history.publishes:
        published[(p.publisher, p.seq)] = p
        topic_of.setdefault(p.publisher, p.topic)
        report.acked += p.acked
    subs = {s.name: s for s in history.subscribers}

    for c in history.connects:
        if c.first:
            continue
        report.session_resumes += 1
        if not c.session_present:
            report.violations.append(
                Violation("session_lost", c.subscriber, detail=f"on {c.node} at {c.at:.3f}")
            )

    # per (subscriber, publisher): seq -> first delivery, and the running highest seq
    first: dict[tuple[str, str], dict[int, Delivery]] = defaultdict(dict)
    high: dict[tuple[str, str], int] = {}
    for d in history.deliveries:
        if d.payload.startswith(PROBE_PREFIX):
            report.probes += 1
            continue
        report.deliveries += 1
        sub = subs.get(d.subscriber)
        ident = parse(d.payload)
        pub = published.get(ident) if ident is not None else None
        if sub is None or ident is None or pub is None:
            report.violations.append(
                Violation("unexpected", d.subscriber, detail=f"{d.payload!r} on {d.topic}")
            )
            continue
        publisher, seq = ident
        if d.topic != pub.topic or d.topic not in sub.topics:
            report.violations.append(
                Violation(
                    "unexpected", d.subscriber, publisher, seq, f"on {d.topic}, sent on {pub.topic}"
                )
            )
            continue
        key = (d.subscriber, publisher)
        seen = first[key]
        before = seen.get(seq)
        if before is not None:
            if d.qos == 2 or before.qos == 2:
                report.violations.append(
                    Violation(
                        "duplicate_qos2",
                        d.subscriber,
                        publisher,
                        seq,
                        f"first at QoS {before.qos} on {before.node} at {before.at:.3f}, "
                        f"again at QoS {d.qos} dup={d.dup} on {d.node} at {d.at:.3f}",
                    )
                )
            elif not d.dup:
                report.violations.append(
                    Violation(
                        "duplicate_without_dup",
                        d.subscriber,
                        publisher,
                        seq,
                        f"first on {before.node} at {before.at:.3f}, "
                        f"again without DUP on {d.node} at {d.at:.3f}",
                    )
                )
            else:
                report.duplicates_allowed += 1
            continue
        seen[seq] = d
        if not pub.acked:
            report.indeterminate_delivered += 1
        top = high.get(key, -1)
        if seq < top:
            if pub.acked:
                report.violations.append(
                    Violation(
                        "reordered",
                        d.subscriber,
                        publisher,
                        seq,
                        f"first delivered on {d.node} at {d.at:.3f}, after seq {top}",
                    )
                )
            else:
                report.late_indeterminate += 1
        else:
            high[key] = seq

    for sub in history.subscribers:
        for p in history.publishes:
            if p.topic not in sub.topics or p.seq in first[(sub.name, p.publisher)]:
                continue
            if not p.acked:
                report.indeterminate_undelivered += 1
            else:
                report.violations.append(
                    Violation(
                        "lost",
                        sub.name,
                        p.publisher,
                        p.seq,
                        f"acknowledged on {p.node} at {p.done_at:.3f}",
                    )
                )
    return report
