"""SVG charts for the dashboard, as pure functions: plain data in, an escaped SVG string out.

No JavaScript and no external assets: the SVG is inlined into the page, so it renders offline and
prints. Every label that can come from a user (backend names, modes) goes through `_text`.
Each chart carries `role="img"`, a `<title>` and a `<desc>` so screen readers get the numbers too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

_LABEL_W = 190  # room for "inductor:reduce-overhead"
_ROW_H = 34
_PLOT_W = 460
_PAD = 14
_AXIS_H = 34


@dataclass(frozen=True)
class LatencyBar:
    """One measured backend: median with the 95% CI of the median as a whisker, and p99 as a tick."""

    label: str
    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    p99_ms: float
    highlighted: bool = False  # the recommended backend


@dataclass(frozen=True)
class CompileBar:
    label: str
    cold_s: float | None
    warm_s: float | None
    highlighted: bool = False


@dataclass(frozen=True)
class CostLine:
    """Cumulative time of one backend after n calls: compile_s + n * latency_ms / 1000."""

    label: str
    compile_s: float
    latency_ms: float
    highlighted: bool = False

    def seconds_after(self, calls: float) -> float:
        return self.compile_s + calls * self.latency_ms / 1000.0


@dataclass(frozen=True)
class Crossing:
    """Where two cost lines meet: after `calls` calls the slower-compiling backend has paid off."""

    first: str
    second: str
    calls: float
    seconds: float


def _text(value: object) -> str:
    return escape(str(value), quote=True)


def _num(value: float) -> str:
    """Short, stable number formatting for coordinates."""
    return f"{value:.1f}".rstrip("0").rstrip(".") if math.isfinite(value) else "0"


def format_quantity(value: float) -> str:
    """3 significant digits, no exponent for everyday magnitudes: 0.0123, 1.23, 123, 12300."""
    if value == 0 or not math.isfinite(value):
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    digits = max(0, 2 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{digits}f}"


def nice_ticks(max_value: float, count: int = 5) -> list[float]:
    """Round axis ticks from 0 to at least max_value (1-2-5 steps)."""
    if not math.isfinite(max_value) or max_value <= 0:
        return [0.0, 1.0]
    raw = max_value / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    n = math.ceil(max_value / step - 1e-9)
    return [round(i * step, 10) for i in range(n + 1)]


def _svg_open(width: float, height: float, title: str, desc: str, css_class: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart {css_class}" role="img" '
        f'viewBox="0 0 {_num(width)} {_num(height)}" width="100%" preserveAspectRatio="xMinYMin meet" '
        f'aria-label="{_text(title)}"><title>{_text(title)}</title><desc>{_text(desc)}</desc>'
    )


def _x_axis(ticks: list[float], scale: float, x0: float, y: float, unit: str) -> list[str]:
    parts = [f'<line class="axis" x1="{_num(x0)}" y1="{_num(y)}" x2="{_num(x0 + ticks[-1] * scale)}" y2="{_num(y)}"/>']
    for tick in ticks:
        x = x0 + tick * scale
        parts.append(f'<line class="grid" x1="{_num(x)}" y1="{_PAD}" x2="{_num(x)}" y2="{_num(y + 4)}"/>')
        parts.append(
            f'<text class="tick" x="{_num(x)}" y="{_num(y + 16)}" text-anchor="middle">{format_quantity(tick)}</text>'
        )
    parts.append(
        f'<text class="unit" x="{_num(x0 + ticks[-1] * scale)}" y="{_num(y + 30)}" text-anchor="end">'
        f"{_text(unit)}</text>"
    )
    return parts


def _row_label(label: str, x0: float, y: float) -> str:
    return f'<text class="label" x="{_num(x0 - 8)}" y="{_num(y)}" text-anchor="end">{_text(_shorten(label))}</text>'


def _shorten(label: str, limit: int = 28) -> str:
    """Row labels must fit left of the plot; the full name stays in the bar's <title>."""
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _empty(title: str, message: str, css_class: str) -> str:
    return (
        _svg_open(_LABEL_W + _PLOT_W, 60, title, message, css_class)
        + f'<text class="empty" x="{_PAD}" y="34">{_text(message)}</text></svg>'
    )


def latency_chart(bars: Sequence[LatencyBar], title: str = "Steady-state latency per backend") -> str:
    """Horizontal bars of the median latency, a whisker for its 95% CI and a tick for p99."""
    if not bars:
        return _empty(title, "No backend produced a latency measurement.", "latency-chart")
    top = max(max(b.p99_ms, b.ci_high_ms, b.median_ms) for b in bars)
    ticks = nice_ticks(top)
    scale = _PLOT_W / ticks[-1]
    x0 = _LABEL_W
    height = _PAD + len(bars) * _ROW_H + _AXIS_H
    desc = "; ".join(
        f"{b.label}: median {format_quantity(b.median_ms)} ms (95% CI {format_quantity(b.ci_low_ms)}–"
        f"{format_quantity(b.ci_high_ms)}), p99 {format_quantity(b.p99_ms)} ms"
        for b in bars
    )
    parts = [_svg_open(x0 + _PLOT_W + _PAD * 3, height, title, desc, "latency-chart")]
    for i, bar in enumerate(bars):
        y = _PAD + i * _ROW_H
        mid = y + _ROW_H / 2 - 3
        state = " highlighted" if bar.highlighted else ""
        parts.append(f'<g class="row{state}">')
        parts.append(_row_label(bar.label, x0, mid + 4))
        parts.append(
            f'<rect class="bar latency-bar{state}" data-backend="{_text(bar.label)}" x="{x0}" y="{_num(y + 4)}" '
            f'width="{_num(max(bar.median_ms * scale, 1))}" height="{_ROW_H - 14}">'
            f"<title>{_text(bar.label)}: median {format_quantity(bar.median_ms)} ms</title></rect>"
        )
        lo, hi = x0 + bar.ci_low_ms * scale, x0 + bar.ci_high_ms * scale
        parts.append(
            f'<path class="whisker" d="M{_num(lo)} {_num(mid)}H{_num(hi)}M{_num(lo)} {_num(mid - 5)}V{_num(mid + 5)}'
            f'M{_num(hi)} {_num(mid - 5)}V{_num(mid + 5)}"><title>95% CI of the median: '
            f"{format_quantity(bar.ci_low_ms)}–{format_quantity(bar.ci_high_ms)} ms</title></path>"
        )
        p99 = x0 + bar.p99_ms * scale
        parts.append(
            f'<path class="p99" d="M{_num(p99)} {_num(mid - 8)}L{_num(p99 + 5)} {_num(mid)}L{_num(p99)} {_num(mid + 8)}'
            f'L{_num(p99 - 5)} {_num(mid)}Z"><title>p99 {format_quantity(bar.p99_ms)} ms</title></path>'
        )
        parts.append("</g>")
    parts += _x_axis(ticks, scale, x0, _PAD + len(bars) * _ROW_H, "ms (bar = median, whisker = 95% CI, ◆ = p99)")
    parts.append("</svg>")
    return "".join(parts)


def compile_chart(bars: Sequence[CompileBar], title: str = "Compile time, cold vs warm cache") -> str:
    """Two thin bars per backend: compile time with an empty cache (cold) and a warm one."""
    measured = [b for b in bars if b.cold_s is not None or b.warm_s is not None]
    if not measured:
        return _empty(title, "No compile times were measured.", "compile-chart")
    top = max(max(b.cold_s or 0.0, b.warm_s or 0.0) for b in measured)
    ticks = nice_ticks(top)
    scale = _PLOT_W / ticks[-1]
    x0 = _LABEL_W
    height = _PAD + len(measured) * _ROW_H + _AXIS_H + 16
    desc = "; ".join(f"{b.label}: cold {_seconds(b.cold_s)}, warm {_seconds(b.warm_s)}" for b in measured)
    parts = [_svg_open(x0 + _PLOT_W + _PAD * 3, height, title, desc, "compile-chart")]
    for i, bar in enumerate(measured):
        y = _PAD + i * _ROW_H
        state = " highlighted" if bar.highlighted else ""
        parts.append(f'<g class="row{state}">')
        parts.append(_row_label(bar.label, x0, y + _ROW_H / 2 + 1))
        for offset, kind, value in ((3, "cold", bar.cold_s), (15, "warm", bar.warm_s)):
            if value is None:
                continue
            parts.append(
                f'<rect class="bar compile-{kind}" data-backend="{_text(bar.label)}" x="{x0}" y="{_num(y + offset)}" '
                f'width="{_num(max(value * scale, 1))}" height="10"><title>{_text(bar.label)} {kind}: '
                f"{_seconds(value)}</title></rect>"
            )
        parts.append("</g>")
    axis_y = _PAD + len(measured) * _ROW_H
    parts += _x_axis(ticks, scale, x0, axis_y, "seconds")
    legend_y = axis_y + _AXIS_H + 8
    parts.append(
        f'<rect class="compile-cold" x="{x0}" y="{_num(legend_y - 9)}" width="12" height="10"/>'
        f'<text class="legend" x="{x0 + 16}" y="{_num(legend_y)}">cold (empty cache)</text>'
        f'<rect class="compile-warm" x="{x0 + 150}" y="{_num(legend_y - 9)}" width="12" height="10"/>'
        f'<text class="legend" x="{x0 + 166}" y="{_num(legend_y)}">warm (cache reused)</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _seconds(value: float | None) -> str:
    return "not measured" if value is None else f"{format_quantity(value)} s"


def crossings(lines: Sequence[CostLine]) -> list[Crossing]:
    """Every pair of cost lines that meets at a positive number of calls, sorted by calls."""
    found = []
    for i, a in enumerate(lines):
        for b in lines[i + 1 :]:
            slope = a.latency_ms - b.latency_ms
            if slope == 0:
                continue
            calls = (b.compile_s - a.compile_s) * 1000.0 / slope
            if calls > 0 and math.isfinite(calls):
                found.append(Crossing(a.label, b.label, calls, a.seconds_after(calls)))
    return sorted(found, key=lambda c: c.calls)


def break_even_chart(
    lines: Sequence[CostLine],
    *,
    expected_calls: float | None = None,
    unit: str = "call",
    title: str = "Break-even: total time (compile + calls) vs number of calls",
) -> str:
    """Cumulative time per backend as straight lines; each crossing is marked and labelled.

    The x range covers twice the furthest crossing (so the lines visibly cross) and the
    context's expected calls per compile when that is given.
    """
    if not lines:
        return _empty(title, "Needs at least one backend with latency and compile time.", "break-even-chart")
    meets = crossings(lines)
    x_max = max([c.calls * 2 for c in meets] + [expected_calls or 0, 10.0])
    y_max = max(line.seconds_after(x_max) for line in lines)
    x_ticks, y_ticks = nice_ticks(x_max), nice_ticks(y_max, 4)
    x_max, y_max = x_ticks[-1], y_ticks[-1]
    left, top, plot_h = 70, _PAD, 240
    width, height = left + _PLOT_W + 160, top + plot_h + 60
    sx, sy = _PLOT_W / x_max, plot_h / y_max

    def point(calls: float, seconds: float) -> str:
        return f"{_num(left + calls * sx)} {_num(top + plot_h - seconds * sy)}"

    desc = (
        "; ".join(f"{c.first} and {c.second} cost the same after {format_quantity(c.calls)} {unit}s" for c in meets)
        or f"No crossing: one backend is cheaper at every number of {unit}s."
    )
    parts = [_svg_open(width, height, title, desc, "break-even-chart")]
    for tick in y_ticks:
        y = top + plot_h - tick * sy
        parts.append(f'<line class="grid" x1="{left}" y1="{_num(y)}" x2="{left + _PLOT_W}" y2="{_num(y)}"/>')
        parts.append(
            f'<text class="tick" x="{left - 6}" y="{_num(y + 4)}" text-anchor="end">{format_quantity(tick)}</text>'
        )
    parts.append(f'<text class="unit" x="{left - 6}" y="{top - 2 + 8}" text-anchor="end">s</text>')
    for tick in x_ticks:
        x = left + tick * sx
        parts.append(f'<line class="grid" x1="{_num(x)}" y1="{top}" x2="{_num(x)}" y2="{top + plot_h + 4}"/>')
        parts.append(
            f'<text class="tick" x="{_num(x)}" y="{top + plot_h + 18}" text-anchor="middle">'
            f"{format_quantity(tick)}</text>"
        )
    parts.append(
        f'<text class="unit" x="{left + _PLOT_W}" y="{top + plot_h + 34}" text-anchor="end">{_text(unit)}s</text>'
    )
    parts.append(f'<path class="axis" d="M{left} {top}V{top + plot_h}H{left + _PLOT_W}"/>')
    if expected_calls and expected_calls <= x_max:
        x = left + expected_calls * sx
        parts.append(
            f'<line class="expected" x1="{_num(x)}" y1="{top}" x2="{_num(x)}" y2="{top + plot_h}">'
            f"<title>expected {_text(unit)}s per compile: {format_quantity(expected_calls)}</title></line>"
            f'<text class="expected-label" x="{_num(x + 4)}" y="{top + 12}">expected {_text(unit)}s</text>'
        )
    for i, line in enumerate(lines):
        state = " highlighted" if line.highlighted else ""
        end = line.seconds_after(x_max)
        parts.append(
            f'<path class="cost-line series-{i % 6}{state}" data-backend="{_text(line.label)}" '
            f'd="M{point(0, line.compile_s)}L{point(x_max, end)}"><title>{_text(line.label)}: '
            f"{format_quantity(line.compile_s)} s compile + {format_quantity(line.latency_ms)} ms per {_text(unit)}"
            "</title></path>"
        )
        label_y = top + plot_h - end * sy
        parts.append(
            f'<text class="series-label series-{i % 6}{state}" x="{left + _PLOT_W + 6}" '
            f'y="{_num(min(max(label_y, top + 8), top + plot_h) + 4)}">{_text(line.label)}</text>'
        )
    highlighted = {line.label for line in lines if line.highlighted}
    for c in meets:
        if c.calls > x_max:
            continue
        cx, cy = left + c.calls * sx, top + plot_h - c.seconds * sy
        parts.append(
            f'<circle class="crossing" cx="{_num(cx)}" cy="{_num(cy)}" r="5">'
            f"<title>{_text(c.first)} = {_text(c.second)} after {format_quantity(c.calls)} calls</title></circle>"
        )
        if not highlighted or {c.first, c.second} & highlighted:  # label the crossings that matter, not all
            parts.append(
                f'<text class="crossing-label" x="{_num(cx + 7)}" y="{_num(cy - 7)}">'
                f"{format_quantity(c.calls)} calls</text>"
            )
    parts.append("</svg>")
    return "".join(parts)
