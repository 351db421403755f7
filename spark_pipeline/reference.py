"""A plain single-process Python twin of the delivery audit.

Two uses: the benchmark's baseline (how fast is one Python process over the same
files?) and an independent cross-check of the Spark audit (tests compare both on
generated logs with injected faults). It follows the rules in
``transforms/audit.py``; it parses lines with the standard ``json`` module and types
them against the catalogue the way Spark's JSON reader does for the values ternmq
writes. Memory grows with the number of messages and (message, subscriber) pairs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from services.common.events import ENVELOPE, EVENTS
from spark_pipeline.expect import Expectation
from spark_pipeline.extract import find_log_files, rotation_of
from spark_pipeline.schemas import used_columns
from spark_pipeline.topics import matches

LineKey = tuple[int, str, int, int]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _field_types() -> dict[str, str]:
    # As the job: only the fields the ETL reads are type-checked.
    types = dict(ENVELOPE)
    for spec in EVENTS.values():
        types.update(spec.fields)
    return {k: types[k] for k in used_columns()}


_TYPES = _field_types()


def _well_typed(value: object, json_type: str) -> bool:
    if value is None or json_type == "str":
        return True
    if json_type == "int":
        return type(value) is int
    if json_type == "float":
        return type(value) in (int, float)
    if json_type == "bool":
        return type(value) is bool
    return isinstance(value, list)


def ts_micros(text: str) -> int | None:
    """µs since the epoch for an ISO-8601 timestamp (naive means UTC), or None."""
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        return None
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    delta = ts - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def parse_line(line: str) -> tuple[int, dict[str, object]] | None:
    """(ts in µs, record) for a good line, None for a corrupt one."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict):
        return None
    ts, event = rec.get("ts"), rec.get("event")
    if not isinstance(ts, str) or not isinstance(event, str):
        return None
    us = ts_micros(ts)
    if us is None:
        return None
    for key, value in rec.items():
        t = _TYPES.get(key)
        if t is not None and not _well_typed(value, t):
            return None
    return us, rec


def _iter_file(path: Path) -> Iterator[tuple[LineKey, dict[str, object] | None]]:
    rot = rotation_of(path)
    chain = str(path.parent / rot[0]) if rot else str(path)
    neg_rot = -rot[1] if rot else 0
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            parsed = parse_line(line)
            if parsed is None:
                yield (0, chain, neg_rot, n), None
            else:
                yield (parsed[0], chain, neg_rot, n), parsed[1]


@dataclass(slots=True)
class _Pair:
    deliveries: int = 0
    dups: int = 0
    first: LineKey | None = None
    qos: int = 0
    publisher: str | None = None


@dataclass(slots=True)
class Scan:
    """What one pass over the files collects for the audit."""

    lines: int = 0
    corrupt: int = 0
    published: dict[str, tuple[LineKey, str, str, int]] = field(default_factory=dict)
    pairs: dict[tuple[str, str], _Pair] = field(default_factory=dict)
    acked: set[tuple[str, str]] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)


def scan(files: Sequence[Path]) -> Scan:
    """One pass: published messages, delivery pairs, acks, refusals, line counts."""
    s = Scan()
    for path in files:
        for key, rec in _iter_file(path):
            s.lines += 1
            if rec is None:
                s.corrupt += 1
                continue
            _collect(s, key, rec)
    return s


def _collect(s: Scan, key: LineKey, rec: dict[str, object]) -> None:
    event, msg_id, client = rec.get("event"), rec.get("msg_id"), rec.get("client_id")
    if not isinstance(msg_id, str):
        return
    if event == "message.published":
        old = s.published.get(msg_id)
        if old is None or key < old[0]:
            qos = rec.get("qos")
            level = qos if isinstance(qos, int) else 0
            s.published[msg_id] = (key, str(client), str(rec.get("topic")), level)
    elif event == "message.delivered" and isinstance(client, str):
        pair = s.pairs.setdefault((msg_id, client), _Pair())
        pair.deliveries += 1
        pair.dups += rec.get("dup") is True
        qos = rec.get("qos")
        pair.qos = max(pair.qos, qos if isinstance(qos, int) else 0)
        if pair.first is None or key < pair.first:
            pair.first = key
        pub = rec.get("publisher")
        if isinstance(pub, str) and (pair.publisher is None or pub < pair.publisher):
            pair.publisher = pub
    elif event == "message.acked" and isinstance(client, str):
        s.acked.add((msg_id, client))
    elif event == "message.refused":
        s.refused.add(msg_id)


def audit(s: Scan, expectations: Sequence[Expectation] | None = None) -> dict[str, int]:
    """The audit summary, same keys and rules as ``transforms.audit.audit_summary``."""
    by_pub: dict[str, list[tuple[LineKey, str]]] = defaultdict(list)
    for msg_id, (key, publisher, _topic, _qos) in s.published.items():
        by_pub[publisher].append((key, msg_id))
    seq: dict[str, int] = {}
    for items in by_pub.values():
        items.sort()
        for i, (_key, msg_id) in enumerate(items, 1):
            seq[msg_id] = i
    audited = {m: v for m, v in s.published.items() if v[3] >= 1}
    pairs = {k: p for k, p in s.pairs.items() if k[0] not in s.published or k[0] in audited}
    expected = _expected(s, audited, pairs, seq, expectations)
    return _summarise(s, audited, pairs, expected, seq)


def _expected(
    s: Scan,
    audited: dict[str, tuple[LineKey, str, str, int]],
    pairs: dict[tuple[str, str], _Pair],
    seq: dict[str, int],
    expectations: Sequence[Expectation] | None,
) -> set[tuple[str, str]]:
    listed = {e.subscriber for e in expectations or ()}
    ranges: dict[tuple[str, str, str], list[int]] = {}
    expected: set[tuple[str, str]] = set()
    for msg_id, sub in pairs:
        if sub in listed:
            continue
        expected.add((msg_id, sub))
        if msg_id in audited:
            _key, publisher, topic, _q = audited[msg_id]
            r = ranges.setdefault((sub, publisher, topic), [seq[msg_id], seq[msg_id]])
            r[0], r[1] = min(r[0], seq[msg_id]), max(r[1], seq[msg_id])
    by_pt: dict[tuple[str, str], list[str]] = defaultdict(list)
    for msg_id, (_key, publisher, topic, _q) in audited.items():
        by_pt[(publisher, topic)].append(msg_id)
    for (sub, publisher, topic), (lo, hi) in ranges.items():
        for msg_id in by_pt[(publisher, topic)]:
            if lo <= seq[msg_id] <= hi:
                expected.add((msg_id, sub))
    for e in expectations or ():
        since = None if e.since is None else ts_micros(e.since.isoformat())
        for msg_id, (key, _publisher, topic, _q) in audited.items():
            if matches(e.topic_filter, topic) and (since is None or key[0] >= since):
                expected.add((msg_id, e.subscriber))
    return expected


def _summarise(
    s: Scan,
    audited: dict[str, tuple[LineKey, str, str, int]],
    pairs: dict[tuple[str, str], _Pair],
    expected: set[tuple[str, str]],
    seq: dict[str, int],
) -> dict[str, int]:
    keys = set(pairs) | expected
    out = dict.fromkeys(
        ("lost", "refused", "duplicated", "out_of_order", "unacked", "unexpected", "orphans"), 0
    )
    streams: dict[tuple[str, str], list[tuple[LineKey, int]]] = defaultdict(list)
    publishers: set[str] = set()
    for msg_id, sub in keys:
        pair = pairs.get((msg_id, sub))
        pub = audited.get(msg_id)
        publisher = pub[1] if pub else (pair.publisher if pair else None)
        if publisher is not None:
            publishers.add(publisher)
        delivered = pair is not None
        is_expected = (msg_id, sub) in expected
        refused = msg_id in s.refused
        out["refused"] += refused
        out["lost"] += is_expected and not delivered and not refused
        if pair is None:
            continue
        out["duplicated"] += pair.deliveries > 1
        out["unacked"] += pair.qos >= 1 and (msg_id, sub) not in s.acked
        out["unexpected"] += not is_expected
        if pub is None:
            out["orphans"] += 1
        elif pair.first is not None:
            streams[(pub[1], sub)].append((pair.first, seq[msg_id]))
    for stream in streams.values():
        stream.sort()
        high = 0
        for _first, n in stream:
            out["out_of_order"] += n < high
            high = max(high, n)
    return {
        "messages": len({m for m, _ in keys if m in audited}),
        "publishers": len(publishers),
        "subscribers": len({sub for _, sub in keys}),
        "pairs": len(keys),
        "expected": len(expected),
        "delivered": len(pairs),
        "deliveries": sum(p.deliveries for p in pairs.values()),
        "redeliveries": sum(p.dups for p in pairs.values()),
        **out,
    }


def audit_logs(logs_dir: Path, expectations: Sequence[Expectation] | None = None) -> dict[str, int]:
    """Scan every log file below ``logs_dir`` and audit it; adds line counts."""
    s = scan(find_log_files(logs_dir))
    return {**audit(s, expectations), "lines": s.lines, "corrupt_lines": s.corrupt}
