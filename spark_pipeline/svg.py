"""Small inline SVG charts for the HTML report (no plotting dependency).

Pure functions from numbers to SVG text. Every chart is an ``<svg class="chart">`` whose
drawn data (bars, lines, points) carry ``class="mark"``, with a title, a legend when it
has several series, and both axes labelled with their units. y starts at 0 so bars and
lines are read against a true baseline.

Short spans: a line needs two points, and an incident may fill a single minute. A time
chart with one or two instants draws grouped bars instead; with up to ``POINTS_UP_TO``
instants it marks each point on its line. A single instant gets a one-minute axis.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Final

WIDTH: Final = 640
HEIGHT: Final = 270
_M: Final = {"left": 64, "right": 16, "top": 48, "bottom": 50}
COLORS: Final = ("#1f77b4", "#ff7f0e", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#17becf")
POINTS_UP_TO: Final = 40
BARS_UP_TO: Final = 2

Point = tuple[float, float]
_PW: Final = WIDTH - _M["left"] - _M["right"]
_PH: Final = HEIGHT - _M["top"] - _M["bottom"]


def nice_max(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is at least ``value``."""
    if value <= 0:
        return 1.0
    step = 10.0 ** (len(str(int(value))) - 1) if value >= 1 else 1.0
    if value < 1:
        while step / 10 >= value:
            step /= 10
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * step >= value:
            return m * step
    return 10 * step


def fmt(v: float) -> str:
    """A tick value: 1.5k, 2M, 0.25."""
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def clock(span: float) -> Callable[[float], str]:
    """Tick labels for epoch seconds: HH:MM, with the date when the span passes a day."""
    pattern = "%m-%d %H:%M" if span >= 86400 else "%H:%M"
    return lambda x: datetime.fromtimestamp(x, UTC).strftime(pattern)


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _sy(y: float, y_max: float) -> float:
    return _M["top"] + _PH - _PH * y / y_max


def _frame(
    title: str, y_max: float, y_label: str, x_label: str, legend: Sequence[str]
) -> list[str]:
    top, left = _M["top"], _M["left"]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{_slug(title)}" '
        f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14" '
        f'font-weight="bold">{escape(title)}</text>',
        f'<text x="14" y="{top + _PH / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + _PH / 2})">{escape(y_label)}</text>',
        f'<text x="{left + _PW / 2}" y="{HEIGHT - 6}" font-size="11" '
        f'text-anchor="middle">{escape(x_label)}</text>',
    ]
    for i in range(5):
        y = top + _PH - _PH * i / 4
        out.append(
            f'<line x1="{left}" x2="{left + _PW}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="10" '
            f'text-anchor="end">{fmt(y_max * i / 4)}</text>'
        )
    out.append(
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + _PH}" stroke="#888"/>'
        f'<line x1="{left}" x2="{left + _PW}" y1="{top + _PH}" y2="{top + _PH}" stroke="#888"/>'
    )
    if len(legend) > 1:
        for i, name in enumerate(legend):
            lx = left + 4 + 100 * i
            out.append(
                f'<rect x="{lx}" y="28" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>'
                f'<text x="{lx + 14}" y="37" font-size="10">{escape(name)}</text>'
            )
    return out


def time_chart(
    title: str,
    series: Mapping[str, Sequence[Point]],
    y_label: str,
    x_label: str = "time (UTC, per minute)",
) -> str:
    """Series over time (x in epoch seconds): lines, points when few, bars when one or two."""
    xs = sorted({x for pts in series.values() for x, _ in pts})
    if not xs:
        return _empty(title)
    if len(xs) <= BARS_UP_TO:
        label = clock(0)
        values = {n: dict(pts) for n, pts in series.items()}
        columns = {n: [values[n].get(x, 0.0) for x in xs] for n in series}
        return bar_chart(title, [label(x) for x in xs], columns, y_label, x_label)
    x0, x1 = xs[0], xs[-1]
    y_max = nice_max(max(y for pts in series.values() for _, y in pts))

    def sx(x: float) -> float:
        return _M["left"] + _PW * (x - x0) / (x1 - x0)

    out = _frame(title, y_max, y_label, x_label, list(series))
    label = clock(x1 - x0)
    ticks = min(6, len(xs))
    for i in range(ticks):
        x = x0 + (x1 - x0) * i / (ticks - 1)
        out.append(
            f'<text x="{sx(x):.1f}" y="{HEIGHT - 30}" font-size="10" '
            f'text-anchor="middle">{escape(label(x))}</text>'
        )
    for i, (name, pts) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        ordered = sorted(pts)
        path = " ".join(f"{sx(x):.1f},{_sy(y, y_max):.1f}" for x, y in ordered)
        if len(ordered) > 1:
            out.append(
                f'<polyline class="mark" fill="none" stroke="{color}" stroke-width="1.5" '
                f'points="{path}"/>'
            )
        if len(ordered) <= POINTS_UP_TO:
            out.extend(
                f'<circle class="mark" cx="{sx(x):.1f}" cy="{_sy(y, y_max):.1f}" r="3" '
                f'fill="{color}"><title>{escape(name)} {escape(label(x))}: {y:g}</title></circle>'
                for x, y in ordered
            )
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(
    title: str,
    labels: Sequence[str],
    series: Mapping[str, Sequence[float]],
    y_label: str,
    x_label: str,
    stacked: bool = False,
) -> str:
    """Bars per label: one per series side by side, or stacked; labels underneath."""
    if not labels or not series:
        return _empty(title)
    names = list(series)
    totals = [
        sum(series[n][i] for n in names) if stacked else max(series[n][i] for n in names)
        for i in range(len(labels))
    ]
    y_max = nice_max(max(totals))
    out = _frame(title, y_max, y_label, x_label, names)
    slot = _PW / len(labels)
    width = slot * 0.7 / (1 if stacked else len(names))
    base_y = _M["top"] + _PH
    for i, label in enumerate(labels):
        left = _M["left"] + slot * i + slot * 0.15
        below = 0.0
        for k, name in enumerate(names):
            value = float(series[name][i])
            h = _PH * value / y_max
            x = left if stacked else left + width * k
            y = base_y - h - (_PH * below / y_max if stacked else 0.0)
            if value > 0:
                out.append(
                    f'<rect class="mark" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" '
                    f'height="{h:.1f}" fill="{COLORS[k % len(COLORS)]}"><title>'
                    f"{escape(label)} {escape(name)}: {value:g}</title></rect>"
                )
            below += value if stacked else 0.0
        shown = label if len(label) <= max(4, int(slot / 6)) else label[: max(3, int(slot / 6))]
        out.append(
            f'<text x="{left + slot * 0.35:.1f}" y="{HEIGHT - 30}" font-size="10" '
            f'text-anchor="middle">{escape(shown)}<title>{escape(label)}</title></text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _empty(title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart empty" '
        f'data-chart="{_slug(title)}" width="{WIDTH}" height="60">'
        f'<text x="8" y="20" font-size="14" font-weight="bold">{escape(title)}</text>'
        '<text x="8" y="44" font-size="12">no data</text></svg>'
    )
