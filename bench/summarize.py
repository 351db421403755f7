"""Turn bench/run.sh output into markdown tables, and py-spy samples into a flat profile.

Three commands:

* ``summarize.py [FILE.jsonl ...]`` -- the tables: per scenario and broker, the median of each
  figure over the repetitions (min-max beside it), the ternmq/Mosquitto ratio and whether the
  issue's target is met. With no file, the newest ``bench/results/run-*.jsonl``.
* ``summarize.py wrap --broker B --scenario S ...`` -- used by run.sh: reads mqload's JSON line
  on stdin, adds what run.sh measured around it (whole-node RSS and CPU, crashes, restarts),
  judges the run (failed / warnings) and prints one JSON record.
* ``summarize.py flame FILE.folded [--top N]`` -- py-spy ``--format raw`` (folded stacks) to
  the top N functions by own time and by total time.

A run *fails* when the broker did not start, crashed, restarted a child, dropped a ready
connection, refused a connection, or lost/reordered/duplicated messages where it must not
(QoS 1, or any fixed-rate run). Loss in a max-rate QoS 0 run is only a warning: there it
measures queue limits under overload (Mosquitto drops too), not a bug. Failed runs stay in the
medians (the figures are what they are) and make the target "not met".
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
Record = dict[str, Any]

TITLES = {
    "a": "(a) QoS 0 fan-in, 10 pubs -> 1 sub, 64 B, max rate",
    "a2": "(a2) QoS 0 fan-in, 10 pubs x 200 msg/s -> 1 sub (fixed 2,000 msg/s, latency)",
    "b": "(b) QoS 0 fan-out, 1 pub -> 50 subs, 64 B, max rate",
    "c": "(c) QoS 1 pairwise, 10 -> 10, persistent sessions (clean 0), inflight 100, max rate",
    "c2": "(c2) QoS 1 pairwise, 10 x 200 msg/s, persistent sessions (fixed rate, latency)",
    "d": "(d) 10,000 idle connections, 200 handshakes in parallel, held 5 s",
    "smoke": "(smoke) QoS 0 fan-in, 3 s",
}
BROKER_ORDER = ("mosquitto", "ternmq", "ternmq-noev", "ternmq-p2")
VARIANTS = {"ternmq": "", "ternmq-noev": " (events off)", "ternmq-p2": " (2 listener processes)"}


# ------------------------------------------------------------------ wrap (one run)


def judge(r: Record, alive: bool, restarts: int) -> tuple[list[str], list[str]]:
    """Return (problems, warnings) of one mqload result; any problem fails the run."""
    problems: list[str] = []
    warnings: list[str] = []
    if "error" in r:
        problems.append(str(r["error"]))
    if not alive:
        problems.append("a broker process died during the run")
    if restarts:
        problems.append(f"{restarts} child restart(s) (see /status)")
    for key, what in (("connect_errors", "connect errors"), ("disconnects", "ready conns lost")):
        if r.get(key):
            problems.append(f"{r[key]} {what}")
    if "conns" in r or "connects_per_s" in r:
        if r.get("connected", 0) < r.get("conns", 0):
            problems.append(f"only {r.get('connected')} of {r.get('conns')} connected")
        return problems, warnings
    if "sent" in r and not r.get("sent"):
        problems.append("nothing was sent")
    strict = r.get("qos", 0) >= 1 or r.get("rate", 0) > 0
    for key in ("lost", "dup", "reordered"):
        n = r.get(key, 0)
        if n:
            (problems if strict else warnings).append(f"{key} {n} of {r.get('expected')}")
    if r.get("qos", 0) >= 1 and r.get("acked", 0) < r.get("sent", 0):
        problems.append(f"acked {r.get('acked')} of {r.get('sent')}")
    if r.get("self_cpu_pct", 0) >= 95:
        warnings.append("mqload near 100% CPU: generator-bound")
    return problems, warnings


def procs(detail: str, clk_tck: int) -> dict[str, dict[str, float]]:
    """``"listener:512:70000 msgstore:30:40000"`` -> {name: {cpu_s, rss_kb}}."""
    out: dict[str, dict[str, float]] = {}
    for item in detail.split():
        name, _, rest = item.partition(":")
        ticks, _, rss = rest.partition(":")
        if ticks.lstrip("-").isdigit() and rss.isdigit():
            out[name] = {"cpu_s": round(int(ticks) / max(clk_tck, 1), 2), "rss_kb": int(rss)}
    return out


KEY_METRICS = (
    "ternmq_messages_published_total",
    "ternmq_messages_delivered_total",
    "ternmq_messages_dropped_total",
    "ternmq_messages_queued_total",
    "ternmq_msgstore_appends_total",
    "ternmq_msgstore_commits_total",
    "ternmq_msgstore_fsync_seconds_count",
    "ternmq_msgstore_fsync_seconds_sum",
    "ternmq_msgstore_fsync_seconds_max",
    "ternmq_registry_registrations_total",
    "ternmq_gossip_commits_total",
    "ternmq_service_restarts_total",
)


def key_metrics(path: Path | None) -> dict[str, float]:
    """The few Prometheus series that explain a run (labels kept, ``service`` dropped)."""
    if path is None or not path.is_file():
        return {}
    out: dict[str, float] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        name, _, value = line.rpartition(" ")
        if not name.startswith(KEY_METRICS):
            continue
        name = re.sub(r'(,?)service="[^"]*"', "", name).replace("{,", "{").replace("{}", "")
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def _int(text: str) -> int:
    """An int argument where run.sh may pass an empty string (a figure it could not read)."""
    return int(text) if text.strip() else 0


def wrap(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="summarize.py wrap")
    p.add_argument("--broker", required=True)
    p.add_argument("--scenario", required=True)
    p.add_argument("--rep", type=int, required=True)
    p.add_argument("--loadavg", type=float, default=0.0)
    p.add_argument("--config", default="{}")
    p.add_argument("--node-rss-before", type=_int, default=0)
    p.add_argument("--node-rss-peak", type=_int, default=0)
    p.add_argument("--node-cpu-s", type=_int, default=0, help="CPU in clock ticks")
    p.add_argument("--clk-tck", type=_int, default=100)
    p.add_argument("--node-detail", default="", help="name:cpu_ticks:rss_kb ... per process")
    p.add_argument("--alive", type=_int, default=1)
    p.add_argument("--restarts", type=_int, default=0)
    p.add_argument("--profiled", type=_int, default=0)
    p.add_argument("--metrics", type=Path, help="the node's /metrics text at the end of the run")
    p.add_argument("--speed", type=Path, help="speed_probe.py's output for the run")
    p.add_argument("--note", default="")
    p.add_argument("--evidence", default="")
    a = p.parse_args(argv)
    raw = sys.stdin.read().strip()
    try:
        r: Record = json.loads(raw) if raw else {"error": "no output"}
    except json.JSONDecodeError:
        r = {"error": "unparsable mqload output", "output": raw[:500]}
    problems, warnings = judge(r, bool(a.alive), a.restarts)
    if a.note:
        problems.append(a.note)
    failed = bool(problems)
    rec: Record = {
        "broker": a.broker,
        "scenario": a.scenario,
        "rep": a.rep,
        "loadavg_before": a.loadavg,
        "config": json.loads(a.config),
        "profiled": bool(a.profiled),
        "node": {
            "rss_before_kb": a.node_rss_before,
            "rss_peak_kb": a.node_rss_peak,
            "cpu_s": round(a.node_cpu_s / max(a.clk_tck, 1), 2),
            "alive": bool(a.alive),
            "restarts": a.restarts,
            "procs": procs(a.node_detail, a.clk_tck),
        },
        "failed": failed,
        "problems": problems,
        "warnings": warnings,
        "evidence": a.evidence if failed else None,
        "metrics": key_metrics(a.metrics),
        "speed": read_speed(a.speed),
        "r": r,
    }
    print(json.dumps(rec))
    return 0


def read_speed(path: Path | None) -> Record | None:
    """speed_probe.py's figures for the run, or None (older runs, or the probe died)."""
    if path is None or not path.is_file():
        return None
    try:
        data: Record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if data.get("n") else None


# ------------------------------------------------------------------ tables


def load(paths: Iterable[Path]) -> tuple[list[Record], list[Record]]:
    """Return (run records, meta records) from JSONL files."""
    runs: list[Record] = []
    metas: list[Record] = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            (metas if "meta" in rec else runs).append(rec)
    return runs, metas


def fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


@dataclass(frozen=True)
class Stat:
    median: float
    lo: float
    hi: float
    n: int

    def show(self, digits: int = 0) -> str:
        m = fmt(self.median, digits)
        if self.n == 1 or self.lo == self.hi:
            return m
        return f"{m} ({fmt(self.lo, digits)}-{fmt(self.hi, digits)})"


def stat(values: Iterable[float | None]) -> Stat | None:
    vs = [float(v) for v in values if v is not None]
    if not vs:
        return None
    return Stat(statistics.median(vs), min(vs), max(vs), len(vs))


Getter = Callable[[Record], float | None]


def field(key: str, scale: float = 1.0) -> Getter:
    def get(rec: Record) -> float | None:
        v = rec["r"].get(key)
        return None if v is None else float(v) * scale

    return get


def sustained(rec: Record) -> float | None:
    """Unique deliveries / max(delivery window, publish time).

    mqload's ``msgs_per_s`` divides by the time to the *last* delivery, which flatters a
    broker that delivers a burst and then nothing; dividing by at least the publish time
    does not (and equals ``msgs_per_s`` whenever deliveries go on to the end of the run).
    """
    r = rec["r"]
    if "unique" not in r:
        return None
    span = max(float(r.get("rx_window_s") or 0), float(r.get("duration_s") or 0))
    return float(r["unique"]) / span if span else None


def node_per_conn(rec: Record) -> float | None:
    """Whole-node KiB per idle connection: (peak of summed RSS - before) / connected."""
    n = rec["r"].get("connected") or 0
    if not n or not rec["node"]["rss_peak_kb"]:
        return None
    return float(rec["node"]["rss_peak_kb"] - rec["node"]["rss_before_kb"]) / n


def node_mib(rec: Record) -> float | None:
    peak = rec["node"]["rss_peak_kb"]
    return float(peak) / 1024 if peak else None  # 0: the sampler's figure was not read


def node_cpu(rec: Record) -> float | None:
    return float(rec["node"]["cpu_s"])


def probe_ms(rec: Record) -> float | None:
    """Median time of speed_probe.py's fixed loop during the run (lower: faster CPU)."""
    speed = rec.get("speed")
    return float(speed["p50_ms"]) if speed else None


@dataclass(frozen=True)
class Target:
    label: str
    getter: Getter
    digits: int
    higher_is_better: bool
    ratio_min: float | None = None  # ternmq/mosquitto >= this
    abs_min: float | None = None
    abs_max: float | None = None


TARGETS: dict[str, list[Target]] = {
    "a": [Target("sustained msg/s", sustained, 0, True, ratio_min=0.5)],
    "b": [Target("sustained msg/s", sustained, 0, True, ratio_min=0.5)],
    "c": [Target("sustained msg/s", sustained, 0, True, ratio_min=0.5, abs_min=20000)],
    "a2": [Target("p99 latency µs", field("lat_p99_us"), 0, False, abs_max=1000)],
    "c2": [Target("p99 latency µs", field("lat_p99_us"), 0, False)],
    "d": [
        Target("listener KiB/conn", field("rss_per_conn_kb"), 1, False, abs_max=8.0),
        Target("whole node KiB/conn", node_per_conn, 1, False),
        Target("connects/s", field("connects_per_s"), 0, True, abs_min=10000),
    ],
    "smoke": [Target("sustained msg/s", sustained, 0, True)],
}


def verdict(t: Target, mine: Stat | None, ratio: float | None, failed: int) -> str:
    checks: list[bool] = []
    if t.ratio_min is not None and ratio is not None:
        checks.append(ratio >= t.ratio_min)
    if mine is not None and t.abs_min is not None:
        checks.append(mine.median >= t.abs_min)
    if mine is not None and t.abs_max is not None:
        checks.append(mine.median <= t.abs_max)
    wanted = [x for x in (t.ratio_min, t.abs_min, t.abs_max) if x is not None]
    if not wanted:
        return "(info)"
    if mine is None:
        return "- (no ternmq result)"
    if failed:
        return f"**no** ({failed} failed run{'s' if failed > 1 else ''})"
    if len(checks) < len(wanted):
        return "? (no Mosquitto figure)"
    return "yes" if all(checks) else "**no**"


def target_text(t: Target) -> str:
    parts = []
    if t.ratio_min is not None:
        parts.append(f">= {t.ratio_min:g}x Mosquitto")
    if t.abs_min is not None:
        parts.append(f">= {t.abs_min:,g}")
    if t.abs_max is not None:
        parts.append(f"<= {t.abs_max:,g}")
    return ", ".join(parts) or "-"


def scenario_order(runs: list[Record]) -> list[str]:
    seen = {r["scenario"] for r in runs}
    known = [s for s in TITLES if s in seen]
    return known + sorted(seen - set(known))


def summary_table(groups: dict[tuple[str, str], list[Record]], scenarios: list[str]) -> list[str]:
    out = [
        "| scenario | figure | Mosquitto | ternmq | ternmq / Mosquitto | target | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in scenarios:
        for broker, suffix in VARIANTS.items():
            mine_runs = groups.get((s, broker), [])
            if not mine_runs and (broker != "ternmq" or (s, "mosquitto") not in groups):
                continue
            name = s + suffix
            failed = sum(1 for r in mine_runs if r["failed"])
            for t in TARGETS.get(s, []):
                theirs = stat(t.getter(r) for r in groups.get((s, "mosquitto"), []))
                mine = stat(t.getter(r) for r in mine_runs)
                ratio = mine.median / theirs.median if mine and theirs and theirs.median else None
                out.append(
                    f"| {name} | {t.label} | {theirs.show(t.digits) if theirs else '-'} | "
                    f"{mine.show(t.digits) if mine else '-'} | {fmt(ratio, 2)} | "
                    f"{target_text(t)} | {verdict(t, mine, ratio, failed)} |"
                )
    out += event_cost(groups)
    return out


def event_cost(groups: dict[tuple[str, str], list[Record]]) -> list[str]:
    """Throughput lost to the event log: 1 - (events on) / (events off), target <= 25 %."""
    rows = []
    for s in ("c", "c2", "a", "b"):
        on = stat(sustained(r) for r in groups.get((s, "ternmq"), []))
        off = stat(sustained(r) for r in groups.get((s, "ternmq-noev"), []))
        if not on or not off or not off.median:
            continue
        cost = 1 - on.median / off.median
        failed = sum(1 for b in ("ternmq", "ternmq-noev") for r in groups[(s, b)] if r["failed"])
        met = "yes" if cost <= 0.25 else "**no**"
        if failed:
            met = f"**no** ({failed} failed runs)"
        rows.append(
            f"| {s}: event-log cost | 1 - on/off sustained msg/s | - | on {fmt(on.median)} / "
            f"off {fmt(off.median)} = {cost:.0%} | - | <= 25% | {met} |"
        )
    return rows


DETAIL_PUBSUB: list[tuple[str, Getter, int]] = [
    ("sustained msg/s", sustained, 0),
    ("mqload msgs_per_s", field("msgs_per_s"), 0),
    ("delivery window s", field("rx_window_s"), 1),
    ("sent msg/s", field("send_rate"), 0),
    ("p50 µs", field("lat_p50_us"), 0),
    ("p99 µs", field("lat_p99_us"), 0),
    ("max µs", field("lat_max_us"), 0),
    ("lost", field("lost"), 0),
    ("dup", field("dup"), 0),
    ("reord", field("reordered"), 0),
    ("measured proc CPU %", field("broker_cpu_pct"), 0),
    ("node CPU s", node_cpu, 1),
    ("mqload CPU %", field("self_cpu_pct"), 0),
    ("measured proc RSS end MiB", field("broker_rss_after_kb", 1 / 1024), 1),
    ("node RSS peak MiB", node_mib, 1),
    ("CPU probe ms", probe_ms, 2),
]
DETAIL_CONNS: list[tuple[str, Getter, int]] = [
    ("connected", field("connected"), 0),
    ("connect errors", field("connect_errors"), 0),
    ("connects/s", field("connects_per_s"), 0),
    ("measured proc RSS before MiB", field("rss_before_kb", 1 / 1024), 1),
    ("measured proc RSS after hold MiB", field("rss_after_hold_kb", 1 / 1024), 1),
    ("measured proc KiB/conn", field("rss_per_conn_kb"), 1),
    ("node RSS before MiB", lambda r: float(r["node"]["rss_before_kb"]) / 1024, 1),
    ("node RSS peak MiB", node_mib, 1),
    ("node KiB/conn", node_per_conn, 1),
    ("measured proc CPU s for connects", field("broker_cpu_connect_s"), 2),
    ("CPU probe ms", probe_ms, 2),
]


def detail_table(s: str, groups: dict[tuple[str, str], list[Record]]) -> list[str]:
    cols = DETAIL_CONNS if s == "d" else DETAIL_PUBSUB
    out = [
        f"### {TITLES.get(s, s)}",
        "",
        "| broker | runs | failed | " + " | ".join(c[0] for c in cols) + " |",
        "|---|---|---|" + "---|" * len(cols),
    ]
    brokers = [b for b in BROKER_ORDER if (s, b) in groups]
    brokers += sorted(b for (sc, b) in groups if sc == s and b not in BROKER_ORDER)
    notes: list[str] = []
    for b in brokers:
        rs = groups[(s, b)]
        cells = []
        for _, get, digits in cols:
            st = stat(get(r) for r in rs)
            cells.append(st.show(digits) if st else "-")
        failed = sum(1 for r in rs if r["failed"])
        out.append(f"| {b} | {len(rs)} | {failed} | " + " | ".join(cells) + " |")
        split = proc_split(rs)
        if split:
            notes.append(f"- {b} CPU s by process (median): {split}")
        for r in rs:
            for kind in ("problems", "warnings"):
                if r.get(kind):
                    notes.append(f"- {b} rep {r['rep']} {kind[:-1]}: " + "; ".join(r[kind]))
    out.append("")
    if notes:
        out += [*notes, ""]
    return out


def speed_lines(runs: list[Record]) -> list[str]:
    """How fast the CPU ran during each broker's runs (speed_probe.py), if recorded."""
    by_broker: dict[str, list[float]] = defaultdict(list)
    for r in runs:
        ms = probe_ms(r)
        if ms is not None:
            by_broker[r["broker"]].append(ms)
    if not by_broker:
        return []
    fastest = min(min(v) for v in by_broker.values())
    parts = [
        f"{b} {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
        for b, v in sorted(by_broker.items())
    ]
    return [
        "CPU probe during the runs (median ms of a fixed interpreted loop, lower is faster; "
        f"fastest run {fastest:.2f}): " + ", ".join(parts),
        "",
    ]


def proc_split(rs: list[Record]) -> str:
    """Median CPU seconds and end RSS per process of a multi-process broker."""
    names: dict[str, None] = {}
    for r in rs:
        names.update(dict.fromkeys(r["node"].get("procs", {})))
    if len(names) < 2:
        return ""
    parts = []
    for name in names:
        cpu = stat(r["node"]["procs"].get(name, {}).get("cpu_s") for r in rs)
        rss = stat(r["node"]["procs"].get(name, {}).get("rss_kb") for r in rs)
        if cpu and rss:
            parts.append(f"{name} {cpu.median:.1f} s ({rss.median / 1024:.0f} MiB)")
    return ", ".join(parts)


def tables(runs: list[Record], metas: list[Record], include_profiled: bool) -> str:
    runs = [r for r in runs if include_profiled or not r.get("profiled")]
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in runs:
        groups[(r["scenario"], r["broker"])].append(r)
    scenarios = scenario_order(runs)
    out: list[str] = []
    if metas:
        m = metas[-1]["meta"]
        out += [
            f"Machine: {m.get('cpu')}, {m.get('nproc')} cores, "
            f"{m.get('mem_kb', 0) / 2**20:.0f} GiB, Linux {m.get('kernel')}; "
            f"{m.get('mosquitto')}; ternmq {m.get('ternmq_rev')}"
            f"{' + uncommitted changes' if m.get('ternmq_dirty') else ''}; {m.get('python')}",
            "",
        ]
    loads = [float(r.get("loadavg_before", 0)) for r in runs]
    if loads:
        out += [
            f"Runs: {len(runs)}; 1-min load average before a run: "
            f"median {statistics.median(loads):.2f}, max {max(loads):.2f}",
            "",
        ]
    out += speed_lines(runs)
    out += ["## Summary (medians; min-max in brackets)", ""]
    out += [*summary_table(groups, scenarios), ""]
    out += ["## Details", ""]
    for s in scenarios:
        out += detail_table(s, groups)
    return "\n".join(out)


def table_main(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(
        prog="summarize.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="*", type=Path)
    p.add_argument(
        "--include-profiled",
        action="store_true",
        help="count runs made under py-spy (slower) in the medians",
    )
    a = p.parse_args(argv)
    files: list[Path] = a.files
    if not files:
        found = sorted(RESULTS.glob("run-*.jsonl"))
        if not found:
            print(f"no results in {RESULTS}", file=sys.stderr)
            return 1
        files = [found[-1]]
    runs, metas = load(files)
    print(tables(runs, metas, a.include_profiled))
    return 0


# ------------------------------------------------------------------ flame


_LINE_NO = re.compile(r"\(([^()]*):\d+\)$")


def flame(argv: Sequence[str]) -> int:
    """Folded stacks ("frame;frame;leaf count") to top functions by own and total samples.

    Line numbers are dropped (``f (x.py:12)`` -> ``f (x.py)``) so a function's samples add up;
    py-spy leaves idle samples out by default, so percentages are of on-CPU samples.
    """
    p = argparse.ArgumentParser(prog="summarize.py flame")
    p.add_argument("file", type=Path)
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args(argv)
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in a.file.read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        # py-spy --nonblocking sometimes gets no stack at all: count it, do not hide it
        frames = [_LINE_NO.sub(r"(\1)", f) for f in stack.split(";") if f] or ["(no stack)"]
        samples += n
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
    if not samples:
        print("no samples", file=sys.stderr)
        return 1
    print(f"{samples} samples\n\n| own % | total % | function (file:line) |\n|---|---|---|")
    for f, n in own.most_common(a.top):
        print(f"| {100 * n / samples:.1f} | {100 * total[f] / samples:.1f} | `{f}` |")
    print(f"\nTop {a.top} by total (inclusive) time:\n\n| total % | function |\n|---|---|")
    for f, n in total.most_common(a.top):
        print(f"| {100 * n / samples:.1f} | `{f}` |")
    return 0


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "wrap":
        return wrap(argv[1:])
    if argv and argv[0] == "flame":
        return flame(argv[1:])
    return table_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
