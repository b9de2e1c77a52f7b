"""Small SVG charts for ``lakefmt report``: grouped bars and step/line series, no plotting library.

Every function returns one ``<svg>`` element as a string, sized in CSS pixels, with
its text escaped, axis ticks on "nice" values and a ``<title>`` on every bar and point
(a tooltip in browsers).

Example:
    >>> svg = bar_chart(["<4 KiB", "4-16 KiB"], {"before": [30, 2], "after": [0, 3]}, title="mission_id=1")
    >>> svg.startswith("<svg")
    True
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from itertools import pairwise

COLORS = ("#9aa5b1", "#2f6fdf", "#e07b39", "#3a9a5b")
FONT = 'font-family="system-ui, sans-serif" font-size="11"'
Point = tuple[float, float]


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[low, high]``."""
    if not math.isfinite(low) or not math.isfinite(high):
        return [0.0]
    if high <= low:
        high = low + 1
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _frame(width: int, height: int, title: str, body: list[str]) -> str:
    head = f'<text x="{width / 2:.0f}" y="14" text-anchor="middle" font-weight="600">{esc(title)}</text>' if title \
        else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" {FONT} role="img" aria-label="{esc(title)}">{head}'
            + "".join(body) + "</svg>")


def _legend(names: Sequence[str], x: float, y: float) -> list[str]:
    out = []
    for i, name in enumerate(names):
        cx = x + i * 110
        out.append(f'<rect x="{cx:.0f}" y="{y - 9:.0f}" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>'
                   f'<text x="{cx + 14:.0f}" y="{y:.0f}">{esc(name)}</text>')
    return out


def bar_chart(labels: Sequence[str], series: dict[str, Sequence[float]], *, title: str = "", width: int = 460,
              height: int = 220, y_label: str = "files") -> str:
    """Grouped vertical bars: one group per label, one bar per series."""
    left, right, top, bottom = 44, 10, 24, 54
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max((v for values in series.values() for v in values), default=0) or 1
    ticks = nice_ticks(0, peak, 4)
    y_max = ticks[-1] or 1
    body = [(f'<text x="10" y="{top + plot_h / 2:.0f}" transform="rotate(-90 10 {top + plot_h / 2:.0f})" '
             f'text-anchor="middle">{esc(y_label)}</text>')]
    for t in ticks:
        y = top + plot_h - t / y_max * plot_h
        body.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e7eb"/>'
                    f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{esc(_short(t))}</text>')
    group_w = plot_w / max(1, len(labels))
    bar_w = max(1.0, (group_w - 6) / max(1, len(series)))
    for i, label in enumerate(labels):
        gx = left + i * group_w + 3
        for j, (name, values) in enumerate(series.items()):
            v = values[i] if i < len(values) else 0
            h = v / y_max * plot_h
            body.append(f'<rect x="{gx + j * bar_w:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w - 1:.1f}" '
                        f'height="{h:.1f}" fill="{COLORS[j % len(COLORS)]}"><title>{esc(name)}, {esc(label)}: '
                        f'{esc(_short(v))}</title></rect>')
        body.append(f'<text x="{gx + group_w / 2 - 3:.1f}" y="{top + plot_h + 14}" text-anchor="middle" '
                    f'font-size="9">{esc(label)}</text>')
    body.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#555"/>')
    body += _legend(list(series), left, height - 8)
    return _frame(width, height, title, body)


def line_chart(series: dict[str, Sequence[Point]], *, title: str = "", width: int = 940, height: int = 260,
               x_format: Callable[[float], str] = lambda v: f"{v:g}", y_label: str = "", step: bool = False,
               markers: dict[str, Sequence[Point]] | None = None) -> str:
    """Lines (or steps) over a shared x axis, with optional marker-only series (drawn as dots)."""
    left, right, top, bottom = 56, 14, 24, 46
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [p for s in (*series.values(), *(markers or {}).values()) for p in s]
    if not points:
        return _frame(width, 60, title, ['<text x="10" y="40">no data</text>'])
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_ticks = nice_ticks(0, max(ys) or 1, 4)
    y_max = y_ticks[-1] or 1

    def sx(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * plot_w

    def sy(y: float) -> float:
        return top + plot_h - y / y_max * plot_h

    body = [(f'<text x="12" y="{top + plot_h / 2:.0f}" transform="rotate(-90 12 {top + plot_h / 2:.0f})" '
             f'text-anchor="middle">{esc(y_label)}</text>')]
    for t in y_ticks:
        body.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#e3e7eb"/>'
                    f'<text x="{left - 4}" y="{sy(t) + 4:.1f}" text-anchor="end">{esc(_short(t))}</text>')
    for k in range(5):
        x = x_lo + (x_hi - x_lo) * k / 4
        anchor = "start" if k == 0 else "end" if k == 4 else "middle"
        body.append(f'<text x="{sx(x):.1f}" y="{top + plot_h + 16}" text-anchor="{anchor}">{esc(x_format(x))}</text>')
    body.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#555"/>')
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(pts)
        if not pts:
            continue
        path = [f"M{sx(pts[0][0]):.1f},{sy(pts[0][1]):.1f}"]
        for (_x0, _y0), (x1, y1) in pairwise(pts):
            if step:
                path.append(f"H{sx(x1):.1f}V{sy(y1):.1f}")
            else:
                path.append(f"L{sx(x1):.1f},{sy(y1):.1f}")
        color = COLORS[(i + 1) % len(COLORS)]
        body.append(f'<path d="{"".join(path)}" fill="none" stroke="{color}" stroke-width="1.6"/>')
        if len(pts) <= 60:
            body += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.2" fill="{color}"><title>{esc(name)}: '
                     f'{esc(x_format(x))}, {esc(_short(y))}</title></circle>' for x, y in pts]
    for j, (name, pts) in enumerate((markers or {}).items()):
        color = COLORS[(len(series) + j + 1) % len(COLORS)]
        body += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{color}" fill-opacity="0.8"><title>'
                 f'{esc(name)}: {esc(x_format(x))}, {esc(_short(y))}</title></circle>' for x, y in pts]
    names = [*series, *(markers or {})]
    body += [f'<rect x="{left + i * 150}" y="{height - 17}" width="10" height="10" '
             f'fill="{COLORS[(i + 1) % len(COLORS)]}"/><text x="{left + i * 150 + 14}" y="{height - 8}">'
             f'{esc(n)}</text>' for i, n in enumerate(names)]
    return _frame(width, height, title, body)


def _short(v: float) -> str:
    if abs(v) >= 1e6:
        return f"{v / 1e6:.3g}M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}" if v != int(v) else str(int(v))
