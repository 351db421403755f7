"""Plot a soak run (``soak.py`` JSON lines) and judge whether memory stayed flat.

The plot: RSS per process over time, with the node's legitimate state on a second axis
(persistent sessions, how many of them the clients entitle it to hold, retained
messages); below it the anonymous part of each RSS (the heap, without mapped files such
as an LMDB map); below that the other state series (subscriptions, queues, queued messages,
gossip tombstones), where growth that RSS alone does not explain shows up. The drain and
settle phases after the load are shaded.

The summary (markdown, to stdout or ``--summary``): when the working set was reached (the
first sample whose persistent-session count is within 10 % of its median over the
second half of the load), and each process's RSS slope over the second half of the load in MB per 10
minutes, by least squares (and the same for its anonymous part, RssAnon: VmRSS also
counts file pages mapped in, such as an LMDB map). That slope is how "flat" is judged: a
process is flat when it is within ``--flat`` (default 1 MB per 10 min); the state series
get the same slope, so a rising RSS can be told apart from a rising working set.

    bench/soak_plot.py bench/results/soak-<ts>.jsonl --png docs/soak-rss.png --summary s.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# on the RSS plot's second axis: persistent sessions (the lasting part of the working set;
# "sessions" also counts online clean ones) and retained messages
COUNTS = ("sessions_persistent", "retained")
OTHER_STATE = (
    "sessions",
    "subscriptions",
    "msgstore_queues",
    "msgstore_entries",
    "gossip_tombstones",
    "sessions_online",
    "registry_expired_total",
    "dropped_total",
)
ORDER = ("listener", "registry", "gossip", "msgstore", "supervisor")


def load(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    start: dict[str, Any] = {}
    samples: list[dict[str, Any]] = []
    end = None
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec["kind"] == "start":
            start = rec
        elif rec["kind"] == "sample":
            samples.append(rec)
        elif rec["kind"] == "end":
            end = rec
    return start, samples, end


def processes(samples: list[dict[str, Any]]) -> list[str]:
    names = {n for s in samples for n in s.get("rss_kb", {})}
    return sorted(names, key=lambda n: (n.split(".")[0] not in ORDER, _rank(n), n))


def _rank(name: str) -> int:
    base = name.split(".")[0]
    return ORDER.index(base) if base in ORDER else len(ORDER)


def series(samples: list[dict[str, Any]], get: Any) -> tuple[list[float], list[float]]:
    """(minutes, values) of the samples where ``get`` gives a number."""
    xs, ys = [], []
    for s in samples:
        value = get(s)
        if isinstance(value, int | float):
            xs.append(s["t"] / 60)
            ys.append(float(value))
    return xs, ys


def rss_mb(name: str, kind: str = "rss_kb") -> Any:
    """VmRSS (``rss_kb``) or its anonymous part (``anon_kb``) of one process, in MB."""
    return lambda s: (s.get(kind, {}).get(name) or 0) / 1024 or None


def state(key: str) -> Any:
    if key == "sessions_persistent":
        return persistent_sessions
    return lambda s: s.get("state", {}).get(key)


def persistent_sessions(s: dict[str, Any]) -> Any:
    """From session show; where its list was cut (10,000 rows), the registry's offline
    sessions instead (its sessions less those online: nearly the same set)."""
    st = s.get("state", {})
    if "sessions_persistent" in st:
        return st["sessions_persistent"]
    total, online = st.get("registry_sessions"), st.get("registry_online")
    return None if total is None or online is None else total - online


def expected(s: dict[str, Any]) -> Any:
    """Persistent sessions the node is entitled to hold, as the clients count them."""
    return s.get("load", {}).get("sessions_expected")


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys over xs (per unit of x), None below 3 points."""
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    if den == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


class Judged:
    """The run cut into phases, the working set, and the slopes over the judged window."""

    def __init__(self, samples: list[dict[str, Any]]) -> None:
        self.load = [s for s in samples if s["phase"] in ("start", "load")]
        self.after = [s for s in samples if s["phase"] not in ("start", "load")]
        self.load_end = self.load[-1]["t"] / 60 if self.load else 0.0
        self.window = [s for s in self.load if s["t"] / 60 >= self.load_end / 2]
        self.working_set_at = self._working_set()
        # levelled: over the judged window the persistent sessions move by less than 10 %
        # of their median per 10 minutes
        late = series(self.window, state(COUNTS[0]))[1]
        rise = self.per_10min(state(COUNTS[0]))
        self.levelled = bool(late) and rise is not None and rise <= 0.1 * statistics.median(late)
        if not self.levelled:
            self.working_set_at = None

    def _working_set(self) -> float | None:
        _, late = series(self.window, state(COUNTS[0]))
        if not late:
            return None
        target = 0.9 * statistics.median(late)
        for x, y in zip(*series(self.load, state(COUNTS[0])), strict=True):
            if y >= target:
                return x
        return None

    def per_10min(self, get: Any) -> float | None:
        s = slope(*series(self.window, get))
        return None if s is None else s * 10

    def value_at(self, get: Any, minute: float | None) -> float | None:
        xs, ys = series(self.load, get)
        if minute is None or not xs:
            return None
        return next((y for x, y in zip(xs, ys, strict=True) if x >= minute), ys[-1])


def _fmt(v: float | None, digits: int = 1, sign: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def _foreign(samples: list[dict[str, Any]]) -> list[str]:
    """A warning when the node had connections beyond the clients' own (someone else's load
    on the same node); from the samples that record what the clients hold."""
    extra = [
        (s["state"]["connections"] - s["load"]["open_connections"], s["t"] / 60)
        for s in samples
        if s["phase"] == "load"
        and isinstance(s.get("state", {}).get("connections"), int | float)
        and "open_connections" in s.get("load", {})
    ]
    worst = max(extra, default=(0.0, 0.0))
    if worst[0] <= 50:
        return []
    return [
        "",
        f"**Warning:** the node had up to {worst[0]:.0f} connections beyond the clients' own "
        f"(at {worst[1]:.1f} min): something else was connected to it during the load.",
    ]


def _verdict(per10: float | None, flat: float) -> str:
    if per10 is None:
        return "-"
    if per10 > flat:
        return "**grows**"
    return "falls" if per10 < -flat else "flat"


def summary(
    start: dict[str, Any], samples: list[dict[str, Any]], end: dict[str, Any] | None, flat: float
) -> str:
    j = Judged(samples)
    args = start.get("args", {})
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(start.get("ts", 0)))
    compiled = "compiled" if start.get("compiled") else "pure Python"
    out = [
        f"Soak of {when}: commit {start.get('commit', '?')}"
        f"{' (dirty tree)' if start.get('dirty') else ''}, {compiled}, "
        f"{args.get('clients')} clients, {args.get('minutes')} min of load, "
        f"expiry {args.get('expiry')} s, sleep {args.get('sleep_min')}-{args.get('sleep_max')} s, "
        f"seed {args.get('seed')}, {start.get('nproc')} cores.",
        "",
    ]
    ws = j.working_set_at
    window = (
        f"Slopes are least squares over the second half of the load, "
        f"{j.load_end / 2:.1f}-{j.load_end:.1f} min ({len(j.window)} samples); flat = within "
        f"{flat} MB per 10 min."
    )
    if ws is not None:
        sessions = j.value_at(state(COUNTS[0]), ws)
        out.append(
            f"Working set reached at {ws:.1f} min ({sessions:.0f} persistent sessions). " + window
        )
    elif j.per_10min(state(COUNTS[0])) is None:
        out.append("Working set: too few samples to tell. " + window)
    else:
        at_end = j.value_at(state(COUNTS[0]), j.load_end)
        entitled = j.value_at(expected, j.load_end)
        out.append(
            "**Working set not reached:** persistent sessions still rose "
            f"{j.per_10min(state(COUNTS[0])):+.0f} per 10 min over the judged window "
            f"({_fmt(at_end, 0)} at the end of the load"
            + (f", against {entitled:.0f} the clients entitle the node to" if entitled else "")
            + "). RSS slopes then include the growth of that state. "
            + window
        )
    out += [
        "",
        "| process | RSS at start MB | at working set | end of load | after the load "
        "| slope MB/10 min | | anon at start | end of load | after | anon slope |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    first, last_load = j.load[:1], j.load[-1:]
    for name in processes(samples):
        rss, anon = rss_mb(name), rss_mb(name, "anon_kb")
        per10 = j.per_10min(rss)
        verdict = _verdict(per10, flat)
        cells = [name]
        for get in (rss, anon):
            begin = series(first, get)[1]
            loaded = series(last_load, get)[1]
            after = series(j.after, get)[1]
            cells += [_fmt(begin[0] if begin else None)]
            cells += [_fmt(j.value_at(get, ws))] if get is rss else []
            cells += [_fmt(loaded[-1] if loaded else None), _fmt(after[-1] if after else None)]
            cells += [_fmt(j.per_10min(get), 2, sign=True)]
            cells += [verdict] if get is rss else []
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "| state | at working set | end of load | after the load | slope per 10 min |"]
    out.append("|---|---:|---:|---:|---:|")
    rows = [(key, state(key)) for key in (*COUNTS, *OTHER_STATE)]
    rows.insert(1, ("persistent sessions entitled (clients' count)", expected))
    for key, get in rows:
        after = series(j.after, get)[1]
        per10 = j.per_10min(get)
        out.append(
            f"| {key} | {_fmt(j.value_at(get, ws), 0)} "
            f"| {_fmt(j.value_at(get, j.load_end), 0)} "
            f"| {_fmt(after[-1] if after else None, 0)} | {_fmt(per10, 1, sign=True)} |"
        )
    out += _foreign(samples)
    if end is not None:
        load = end.get("load", {})
        out += [
            "",
            f"Load: {load.get('cycles')} cycles, {load.get('connects')} connects, "
            f"published {load.get('published')}, errors {load.get('errors') or 'none'}. "
            f"Inbox QoS 1: {load.get('inbox_acked')} acknowledged, {end.get('lost')} lost, "
            f"{end.get('inbox_dups')} duplicates. Restarts: {end.get('restarts')}; node alive "
            f"at the end: {end.get('node_alive_at_end')}.",
        ]
    return "\n".join(out) + "\n"


def plot(start: dict[str, Any], samples: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    j = Judged(samples)
    fig, (top, middle, bottom) = plt.subplots(
        3, 1, figsize=(11, 11), sharex=True, gridspec_kw={"height_ratios": [3, 2, 2]}
    )
    for name in processes(samples):
        style = "--" if "." in name else "-"
        xs, ys = series(samples, rss_mb(name))
        top.plot(xs, ys, label=name, linewidth=1.2, linestyle=style)
        xs, ys = series(samples, rss_mb(name, "anon_kb"))
        middle.plot(xs, ys, label=name, linewidth=1.2, linestyle=style)
    top.set_ylabel("RSS (MB)")
    middle.set_ylabel("anonymous RSS (MB)")
    counts = top.twinx()
    for key, style in zip(COUNTS, (":", "-."), strict=True):
        xs, ys = series(samples, state(key))
        counts.plot(xs, ys, color="grey", linestyle=style, linewidth=1.2, label=f"{key} (right)")
    xs, ys = series(samples, expected)
    if xs:
        counts.plot(xs, ys, color="black", linestyle=":", linewidth=1.0, label="entitled (right)")
    counts.set_ylabel("persistent sessions / retained messages")
    lines = top.get_legend_handles_labels()
    more = counts.get_legend_handles_labels()
    top.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8, ncol=3)
    for key in OTHER_STATE:
        if key in ("registry_expired_total", "dropped_total"):
            continue
        xs, ys = series(samples, state(key))
        bottom.plot(xs, ys, label=key, linewidth=1.1)
    bottom.set_yscale("symlog", linthresh=10)  # queued messages outnumber the rest 30x
    bottom.set_ylabel("count (log above 10)")
    bottom.set_xlabel("minutes")
    bottom.legend(loc="upper left", fontsize=8, ncol=3)
    for ax in (top, middle, bottom):
        if j.working_set_at is not None:
            ax.axvline(j.working_set_at, color="black", linewidth=0.8, linestyle=":")
        if j.after:
            ax.axvspan(j.load_end, j.after[-1]["t"] / 60, color="0.9", zorder=0)
        ax.axvspan(j.load_end / 2, j.load_end, color="#e6f0ff", zorder=0)
        ax.grid(alpha=0.3)
    args = start.get("args", {})
    top.set_title(
        f"ternmq soak at {start.get('commit', '?')}: {args.get('clients')} clients, "
        f"{args.get('minutes')} min (blue: judged window; grey: drain and settle, no load)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("jsonl", type=Path)
    ap.add_argument("--png", type=Path, help="write the plot here")
    ap.add_argument("--summary", type=Path, help="write the summary here (default: stdout)")
    ap.add_argument("--flat", type=float, default=1.0, help="MB per 10 min still called flat")
    ap.add_argument("--until", type=float, help="leave out the samples after this minute")
    args = ap.parse_args(argv)
    start, samples, end = load(args.jsonl)
    if args.until is not None:
        samples = [s for s in samples if s["t"] <= args.until * 60]
    if not samples:
        print(f"{args.jsonl}: no samples", file=sys.stderr)
        return 2
    text = summary(start, samples, end, args.flat)
    if args.summary:
        args.summary.write_text(text)
    else:
        sys.stdout.write(text)
    if args.png:
        plot(start, samples, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
