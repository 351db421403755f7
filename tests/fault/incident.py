"""A violation's story in a few dozen lines, for a failure message that must stand alone.

CI keeps a failed run's output, not its files: ``evidence.jsonl`` and the nodes' logs are
gone with the machine. So the failure names, around the first violation of its worst
kind: the faults, the subscriber's connections with what each delivered (runs of seqs
per publisher, in arrival order), and the nodes' queue and session events about it.
That is usually enough to tell which handover or failover broke the order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from tests.fault.checker import History, Violation, parse

WORST_FIRST = ("lost", "session_lost", "reordered", "unexpected", "duplicate_without_dup",
               "duplicate_qos2")  # fmt: skip
BEFORE_S = 20.0
AFTER_S = 5.0
MAX_LINES = 120

_LEFT_OUT = frozenset(
    ("ts", "event", "node", "client_id", "schema", "level", "service", "mountpoint")
)
_AT = re.compile(r" at (\d+\.\d+)")


def worst(violations: Iterable[Violation]) -> Violation | None:
    """The violation to tell: of the worst kind present, the first reported."""
    ranked = sorted(
        violations,
        key=lambda v: WORST_FIRST.index(v.kind) if v.kind in WORST_FIRST else len(WORST_FIRST),
    )
    return ranked[0] if ranked else None


def when(v: Violation, history: History) -> float | None:
    """The wall-clock time the violation's detail names, else that of its publish."""
    m = _AT.search(v.detail)
    if m:
        return float(m.group(1))
    for p in history.publishes:
        if p.publisher == v.publisher and p.seq == v.seq:
            return p.done_at or p.sent_at
    return None


def runs(seqs: list[int]) -> str:
    """``[3, 4, 5, 9, 8]`` -> ``"3-5 9 8"``: arrival order, ascending stretches joined."""
    out: list[str] = []
    i = 0
    while i < len(seqs):
        j = i
        while j + 1 < len(seqs) and seqs[j + 1] == seqs[j] + 1:
            j += 1
        out.append(str(seqs[i]) if i == j else f"{seqs[i]}-{seqs[j]}")
        i = j + 1
    return " ".join(out)


def deliveries(history: History, subscriber: str, lo: float, hi: float) -> list[str]:
    """The subscriber's connects and, per stretch on one node, what arrived from whom."""
    connects = sorted(
        (c for c in history.connects if c.subscriber == subscriber and lo <= c.at <= hi),
        key=lambda c: c.at,
    )
    got = sorted(
        (d for d in history.deliveries
         if d.subscriber == subscriber and lo <= d.at <= hi and parse(d.payload) is not None),
        key=lambda d: d.order,
    )  # fmt: skip
    lines: list[str] = []
    node, first = "", 0.0
    seqs: dict[str, list[int]] = {}

    def flush() -> None:
        if seqs:
            told = "; ".join(f"{p.split('-')[0]} {runs(s)}" for p, s in sorted(seqs.items()))
            lines.append(f"{first:.3f} delivered on {node}: {told}")
        seqs.clear()

    i = 0
    for d in got:
        while i < len(connects) and connects[i].at <= d.at:
            c = connects[i]
            flush()
            node, first = c.node, c.at
            lines.append(f"{c.at:.3f} connected to {c.node}, session_present={c.session_present}")
            i += 1
        if d.node != node:
            flush()
            node, first = d.node, d.at
        ident = parse(d.payload)
        assert ident is not None
        seqs.setdefault(ident[0], []).append(ident[1])
    flush()
    for c in connects[i:]:
        lines.append(f"{c.at:.3f} connected to {c.node}, session_present={c.session_present}")
    return lines


def evidence(path: Path, subscriber: str, lo: float, hi: float) -> list[str]:
    """The harness's evidence rows (``harness._evidence``) about ``subscriber`` or the
    faults, between ``lo`` and ``hi``."""
    lines: list[str] = []
    if not path.exists():
        return lines
    for raw in path.read_text().splitlines():
        r = json.loads(raw)
        ts = str(r.get("ts", ""))
        try:
            t = datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        event = str(r.get("event", ""))
        if not lo <= t <= hi:
            continue
        if r.get("client_id") not in (subscriber, None) and not event.startswith("nemesis."):
            continue
        rest = {k: v for k, v in r.items() if k not in _LEFT_OUT}
        lines.append(f"{t:.3f} {r.get('node', '')} {event} {json.dumps(rest)[:240]}")
    return lines


def tell(history: History, violations: Iterable[Violation], base_dir: Path) -> str:
    """The worst violation's neighbourhood, in time order, at most :data:`MAX_LINES`."""
    v = worst(violations)
    if v is None:
        return ""
    t = when(v, history)
    if t is None:
        return f"{v.kind} of {v.subscriber}: no time to look around"
    lo, hi = t - BEFORE_S, t + AFTER_S
    lines = deliveries(history, v.subscriber, lo, hi)
    lines += evidence(base_dir / "evidence.jsonl", v.subscriber, lo, hi)
    lines.sort(key=lambda s: float(s.split(" ", 1)[0]))
    head = f"around {v.kind} {v.subscriber} <- {v.publisher} seq {v.seq} ({v.detail}):"
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES], f"... {len(lines) - MAX_LINES} more lines"]
    return "\n".join([head, *lines])
