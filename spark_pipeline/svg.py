"""Small inline SVG charts for the HTML report (no plotting dependency).

Pure functions from numbers to SVG text. Coordinates: the plot area is the chart minus
fixed margins; y starts at 0 so bars and lines are read against a true baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Final

WIDTH: Final = 640
HEIGHT: Final = 240
_M: Final = {"left": 64, "right": 16, "top": 28, "bottom": 40}
COLORS: Final = ("#1f77b4", "#ff7f0e", "#d62728", "#2ca02c", "#9467bd", "#8c564b")

Point = tuple[float, float]


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    step = float(10.0 ** (len(str(int(value))) - 1))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if m * step >= value:
            return m * step
    return 10 * step


def _fmt(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:g}M"
    if abs(v) >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def _frame(title: str, y_max: float, y_label: str) -> list[str]:
    pw = WIDTH - _M["left"] - _M["right"]
    ph = HEIGHT - _M["top"] - _M["bottom"]
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="14" '
        f'font-weight="bold">{escape(title)}</text>',
        f'<text x="14" y="{_M["top"] + ph / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 14 {_M["top"] + ph / 2})">{escape(y_label)}</text>',
    ]
    for i in range(5):
        y = _M["top"] + ph - ph * i / 4
        out.append(
            f'<line x1="{_M["left"]}" x2="{_M["left"] + pw}" y1="{y:.1f}" y2="{y:.1f}" '
            'stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{_M["left"] - 6}" y="{y + 4:.1f}" font-size="10" '
            f'text-anchor="end">{_fmt(y_max * i / 4)}</text>'
        )
    return out


def line_chart(
    title: str,
    series: Mapping[str, Sequence[Point]],
    x_label: Callable[[float], str],
    y_label: str = "",
) -> str:
    """One polyline per series over a shared x range; legend top-left."""
    points = [p for s in series.values() for p in s]
    if not points:
        return _empty(title)
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y_max = _nice_max(max(p[1] for p in points))
    pw = WIDTH - _M["left"] - _M["right"]
    ph = HEIGHT - _M["top"] - _M["bottom"]
    span = (x1 - x0) or 1.0

    def sx(x: float) -> float:
        return _M["left"] + pw * (x - x0) / span

    def sy(y: float) -> float:
        return _M["top"] + ph - ph * y / y_max

    out = _frame(title, y_max, y_label)
    for x in sorted({x0, (x0 + x1) / 2, x1}):
        out.append(
            f'<text x="{sx(x):.1f}" y="{HEIGHT - 22}" font-size="10" '
            f'text-anchor="middle">{escape(x_label(x))}</text>'
        )
    for i, (name, pts) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(pts))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
        lx = _M["left"] + 8 + 110 * i
        out.append(
            f'<rect x="{lx}" y="{HEIGHT - 12}" width="10" height="3" fill="{color}"/>'
            f'<text x="{lx + 14}" y="{HEIGHT - 8}" font-size="10">{escape(name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(title: str, bars: Sequence[tuple[str, float]], y_label: str = "") -> str:
    """Vertical bars with their labels underneath, in the given order."""
    if not bars:
        return _empty(title)
    y_max = _nice_max(max(v for _, v in bars))
    pw = WIDTH - _M["left"] - _M["right"]
    ph = HEIGHT - _M["top"] - _M["bottom"]
    slot = pw / len(bars)
    out = _frame(title, y_max, y_label)
    for i, (label, value) in enumerate(bars):
        h = ph * value / y_max
        x = _M["left"] + slot * i + slot * 0.15
        out.append(
            f'<rect x="{x:.1f}" y="{_M["top"] + ph - h:.1f}" width="{slot * 0.7:.1f}" '
            f'height="{h:.1f}" fill="{COLORS[0]}"><title>{escape(label)}: {value:g}'
            "</title></rect>"
        )
        out.append(
            f'<text x="{x + slot * 0.35:.1f}" y="{HEIGHT - 24}" font-size="10" '
            f'text-anchor="middle">{escape(label)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _empty(title: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="60">'
        f'<text x="8" y="20" font-size="14" font-weight="bold">{escape(title)}</text>'
        '<text x="8" y="44" font-size="12">no data</text></svg>'
    )
