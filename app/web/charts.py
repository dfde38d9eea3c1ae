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
_AXIS_H = 38
_CLIP_LABEL_W = 96  # room right of the latency axis for "p99 1,234" of a clipped p99


@dataclass(frozen=True)
class LatencyBar:
    """One measured backend: median with the 95% CI of the median as a whisker, and p99 as a tick."""

    label: str
    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    p99_ms: float
    highlighted: bool = False  # the recommended backend
    window: str = "first window"  # which timed window the median came from (advisor.core.noise.latency_window)
    # set: the times above are the row's own scaled to one reference eager (advisor.core.common_scale), and this is
    # the median its own process measured
    measured_ms: float | None = None

    def describe(self) -> str:
        """The bar's numbers in words: on the reference eager's scale (with the measured median), or as measured."""
        own = f"median {format_quantity(self.measured_ms or self.median_ms)} ms of its {self.window}"
        if self.measured_ms is None:
            return f"{self.label}: {own}"
        return f"{self.label}: {format_quantity(self.median_ms)} ms on the reference eager's scale ({own})"


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


def integer_ticks(max_value: float, count: int = 5) -> list[int]:
    """Whole-number ticks from 0 to at least max_value in 1-2-5 steps of at least 1: axes of counts (calls)."""
    if not math.isfinite(max_value) or max_value <= 0:
        return [0, 1]
    raw = max(max_value / count, 1.0)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    n = math.ceil(max_value / step - 1e-9)
    return [i * step for i in range(n + 1)]


def log_ticks(low: float, high: float, max_ticks: int = 9) -> list[float]:
    """Powers of ten from low to high (both powers of ten), every second or third one when there are many."""
    first, last = round(math.log10(low)), round(math.log10(high))
    every = 1
    while (last - first) // every + 1 > max_ticks:
        every += 1
    return [10.0**e for e in range(first, last + 1, every)]


def format_tick(value: float) -> str:
    """An axis value as short as it can be said exactly: 0, 2.5, 0.005, 1,500."""
    if value == 0 or not math.isfinite(value):
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) >= 1e-4 else f"{value:.0e}"


def format_count(value: float, *, compact: bool = False) -> str:
    """A whole number of calls: 6,071; compact for axes where room is short: 10k, 2.5M."""
    n = max(1, round(value)) if value > 0 else 0  # a crossing at 0.4 calls is reached by the first call
    if compact:
        for size, suffix in ((1_000_000_000, "G"), (1_000_000, "M"), (10_000, "k")):
            if n >= size:
                divisor = size if suffix != "k" else 1000
                return f"{n / divisor:.3g}{suffix}"
    return f"{n:,}"


# ------------------------------------------------------------------ text boxes (labels must never collide)
_FONT_PX = 12.0  # svg.chart's font-size; tick labels are 11 px, so their boxes here are generous
_CHAR_EM = 0.68  # advance of a character in em: DejaVu Sans digits are 0.64 em, bold ones 0.7; kept generous


@dataclass(frozen=True)
class Box:
    """The rectangle a label (or a marker) occupies, in SVG user units."""

    x0: float
    y0: float
    x1: float
    y1: float

    def intersects(self, other: Box) -> bool:
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1

    def inside(self, outer: Box) -> bool:
        return self.x0 >= outer.x0 and self.x1 <= outer.x1 and self.y0 >= outer.y0 and self.y1 <= outer.y1


def text_box(text: str, x: float, y: float, anchor: str = "start", size: float = _FONT_PX) -> Box:
    """The box of one line of text whose baseline starts (anchor start), centres or ends at (x, y)."""
    width = len(text) * size * _CHAR_EM
    left = x if anchor == "start" else x - width if anchor == "end" else x - width / 2
    return Box(left, y - size, left + width, y + size * 0.25)


def _place(text: str, candidates: Sequence[tuple[float, float, str]], taken: list[Box], area: Box) -> tuple | None:
    """The first candidate (x, y, anchor) whose box stays in `area` and clear of `taken` (which it joins)."""
    for x, y, anchor in candidates:
        box = text_box(text, x, y, anchor)
        if box.inside(area) and not any(box.intersects(other) for other in taken):
            taken.append(box)
            return x, y, anchor
    return None


def _dodge(wanted: Sequence[float], gap: float, low: float, high: float) -> list[float]:
    """Positions as close as possible to `wanted` (any order), at least `gap` apart, kept in [low, high] when
    they fit there (pushed below `high` when they do not)."""
    order = sorted(range(len(wanted)), key=lambda i: wanted[i])
    placed = [min(max(wanted[i], low), high) for i in order]
    for k in range(1, len(placed)):
        placed[k] = max(placed[k], placed[k - 1] + gap)
    if placed and placed[-1] > high:
        placed[-1] = max(high, low + gap * (len(placed) - 1))
        for k in range(len(placed) - 2, -1, -1):
            placed[k] = min(placed[k], placed[k + 1] - gap)
    result = [0.0] * len(wanted)
    for k, i in enumerate(order):
        result[i] = placed[k]
    return result


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
            f'<text class="tick" x="{_num(x)}" y="{_num(y + 16)}" text-anchor="middle">{format_tick(tick)}</text>'
        )
    parts.append(
        f'<text class="unit" x="{_num(x0 + ticks[-1] * scale)}" y="{_num(y + 33)}" text-anchor="end">'
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


P99_CLIP_RATIO = 3.0  # the latency axis ends near 3x the largest median; p99s and CIs beyond it are clipped


def latency_chart(
    bars: Sequence[LatencyBar], title: str = "Steady-state latency per backend", *, clip_ratio: float = P99_CLIP_RATIO
) -> str:
    """Horizontal bars of the median latency, a whisker for its 95% CI and a tick for p99.

    The axis is sized by the medians, not the tails: it ends at the first round tick at or above the largest
    value within `clip_ratio` x the largest median. A p99 (or CI end) beyond it is drawn as an arrow at the
    axis end with its value written next to it, so one 100x outlier cannot squash every median to a sliver.
    """
    if not bars:
        return _empty(title, "No backend produced a latency measurement.", "latency-chart")
    largest_median = max(b.median_ms for b in bars)
    cap = clip_ratio * largest_median
    top = max(largest_median, *(min(max(b.p99_ms, b.ci_high_ms), cap) for b in bars))
    ticks = nice_ticks(top)
    axis_end = ticks[-1]
    scale = _PLOT_W / axis_end
    clipped_any = any(max(b.p99_ms, b.ci_high_ms) > axis_end for b in bars)
    x0 = _LABEL_W
    right = _PAD * 3 + (_CLIP_LABEL_W if clipped_any else 0)
    height = _PAD + len(bars) * _ROW_H + _AXIS_H
    desc = "; ".join(
        f"{b.describe()} (95% CI {format_quantity(b.ci_low_ms)}–{format_quantity(b.ci_high_ms)}), "
        f"p99 {format_quantity(b.p99_ms)} ms"
        for b in bars
    )
    if clipped_any:
        desc += f". The axis ends at {format_tick(axis_end)} ms; values beyond it are marked at its end."
    end_x = x0 + axis_end * scale
    parts = [_svg_open(x0 + _PLOT_W + right, height, title, desc, "latency-chart")]
    for i, bar in enumerate(bars):
        y = _PAD + i * _ROW_H
        mid = y + _ROW_H / 2 - 3
        state = " highlighted" if bar.highlighted else ""
        parts.append(f'<g class="row{state}">')
        parts.append(_row_label(bar.label, x0, mid + 4))
        parts.append(
            f'<rect class="bar latency-bar{state}" data-backend="{_text(bar.label)}" x="{x0}" y="{_num(y + 4)}" '
            f'width="{_num(max(min(bar.median_ms, axis_end) * scale, 1))}" height="{_ROW_H - 14}">'
            f"<title>{_text(bar.describe())}</title></rect>"
        )
        lo = x0 + min(bar.ci_low_ms, axis_end) * scale
        ci_clipped = bar.ci_high_ms > axis_end
        hi = x0 + min(bar.ci_high_ms, axis_end) * scale
        high_end = (
            f"M{_num(hi - 6)} {_num(mid - 4)}L{_num(hi)} {_num(mid)}L{_num(hi - 6)} {_num(mid + 4)}"
            if ci_clipped
            else f"M{_num(hi)} {_num(mid - 5)}V{_num(mid + 5)}"
        )
        parts.append(
            f'<path class="whisker{" clipped" if ci_clipped else ""}" d="M{_num(lo)} {_num(mid)}H{_num(hi)}'
            f'M{_num(lo)} {_num(mid - 5)}V{_num(mid + 5)}{high_end}"><title>95% CI of the median: '
            f"{format_quantity(bar.ci_low_ms)}–{format_quantity(bar.ci_high_ms)} ms</title></path>"
        )
        if bar.p99_ms > axis_end:
            parts.append(
                f'<path class="p99 clipped" d="M{_num(end_x)} {_num(mid - 8)}L{_num(end_x + 9)} {_num(mid)}'
                f'L{_num(end_x)} {_num(mid + 8)}Z"><title>p99 {format_quantity(bar.p99_ms)} ms, beyond the axis '
                f"(which ends at {format_tick(axis_end)} ms)</title></path>"
                f'<text class="clip-label" x="{_num(end_x + 13)}" y="{_num(mid + 4)}">'
                f"p99 {format_quantity(bar.p99_ms)}</text>"
            )
        else:
            p99 = x0 + bar.p99_ms * scale
            parts.append(
                f'<path class="p99" d="M{_num(p99)} {_num(mid - 8)}L{_num(p99 + 5)} {_num(mid)}L{_num(p99)} '
                f'{_num(mid + 8)}L{_num(p99 - 5)} {_num(mid)}Z"><title>p99 {format_quantity(bar.p99_ms)} ms</title>'
                "</path>"
            )
        parts.append("</g>")
    unit = "ms (bar = median, whisker = 95% CI, ◆ = p99" + (", ▶ = beyond the axis)" if clipped_any else ")")
    if any(b.measured_ms is not None for b in bars):
        unit = "ms on one eager's scale " + unit.removeprefix("ms ")
    parts += _x_axis(ticks, scale, x0, _PAD + len(bars) * _ROW_H, unit)
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


@dataclass(frozen=True)
class ShareBar:
    """One entry of a time breakdown: an op, a generated kernel or a runtime marker, and its share of the time."""

    name: str
    kind: str  # op | kernel | aten call | fallback | runtime (a CSS class and written next to the bar)
    share: float  # 0..1
    ms_per_call: float | None


def breakdown_chart(bars: Sequence[ShareBar], title: str) -> str:
    """Horizontal bars of each entry's share of the profiled time, largest first; the kind is written, not only
    coloured, and the full name is in each bar's <title> (long kernel names are shortened on the label)."""
    if not bars:
        return _empty(title, "The profiler saw no ops.", "breakdown-chart")
    ticks = nice_ticks(max(b.share for b in bars) * 100)
    scale = _PLOT_W / ticks[-1]
    x0 = _LABEL_W
    height = _PAD + len(bars) * _ROW_H + _AXIS_H
    desc = "; ".join(f"{b.name} ({b.kind}): {b.share * 100:.1f}%" for b in bars)
    parts = [_svg_open(x0 + _PLOT_W + _CLIP_LABEL_W + _PAD, height, title, desc, "breakdown-chart")]
    for i, bar in enumerate(bars):
        y = _PAD + i * _ROW_H
        width = max(bar.share * 100 * scale, 1)
        per_call = f", {format_quantity(bar.ms_per_call)} ms per call" if bar.ms_per_call is not None else ""
        kind = _text(bar.kind).replace(" ", "-")
        parts.append(
            f'<g class="row">{_row_label(bar.name, x0, y + _ROW_H / 2 + 4)}'
            f'<rect class="bar share-{kind}" x="{x0}" y="{_num(y + 8)}" width="{_num(width)}" height="14">'
            f"<title>{_text(bar.name)} ({_text(bar.kind)}): {bar.share * 100:.1f}%{per_call}</title></rect>"
            f'<text class="value" x="{_num(x0 + width + 6)}" y="{_num(y + _ROW_H / 2 + 4)}">'
            f"{bar.share * 100:.0f}% {_text(bar.kind)}</text></g>"
        )
    parts += _x_axis(ticks, scale, x0, _PAD + len(bars) * _ROW_H, "% of profiled time")
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


LOG_SPREAD = 25.0  # crossings (and the expected calls) further apart than this ratio get log axes
_SERIES_LABEL_W = 190  # the column right of the break-even plot that names each line
_SERIES_CHARS = int((_SERIES_LABEL_W - 14) / (_FONT_PX * _CHAR_EM))


@dataclass(frozen=True)
class _Axis:
    """Value -> pixel along one axis, linear from `low` or logarithmic (low > 0)."""

    low: float
    high: float
    start_px: float
    end_px: float
    log: bool = False

    def __call__(self, value: float) -> float:
        if self.log:
            value = min(max(value, self.low), self.high)
            t = (math.log10(value) - math.log10(self.low)) / (math.log10(self.high) - math.log10(self.low))
        else:
            t = (value - self.low) / (self.high - self.low)
        return self.start_px + t * (self.end_px - self.start_px)


def _decade_floor(value: float) -> float:
    return 10.0 ** math.floor(math.log10(value) + 1e-9)


def _decade_ceil(value: float) -> float:
    return 10.0 ** math.ceil(math.log10(value) - 1e-9)


def break_even_uses_log(meets: Sequence[Crossing], expected_calls: float | None = None) -> bool:
    """Log axes when the points that matter (crossings, the expected calls) are too far apart for a linear axis:
    a crossing at 5 calls next to one at 50,000 would sit on the y axis."""
    points = [max(c.calls, 1.0) for c in meets] + ([expected_calls] if expected_calls and expected_calls >= 1 else [])
    return len(points) >= 2 and max(points) / min(points) > LOG_SPREAD


@dataclass(frozen=True)
class _BreakEvenPlot:
    """Where the break-even plot sits and how values map to pixels (both axes logarithmic or both linear)."""

    log: bool
    x_low: float
    x_high: float
    x_ticks: list[float]
    y_ticks: list[float]
    sx: _Axis
    sy: _Axis
    unit: str
    left: float = 70
    top: float = 28
    plot_h: float = 240

    @property
    def area(self) -> Box:
        return Box(self.left, self.top, self.left + _PLOT_W, self.top + self.plot_h)

    def point(self, calls: float, seconds: float) -> str:
        return f"{_num(self.sx(calls))} {_num(self.sy(seconds))}"


def _break_even_plot(
    lines: Sequence[CostLine], meets: Sequence[Crossing], expected_calls: float | None, unit: str
) -> _BreakEvenPlot:
    """Axes covering twice the furthest crossing and the expected calls: integer calls on linear axes, decades on
    logarithmic ones (from one call and the cheapest line's time there)."""
    log = break_even_uses_log(meets, expected_calls)
    left, top, plot_h = 70, 28, 240
    x_high = max([c.calls * 2 for c in meets] + [expected_calls or 0, 10.0])
    if log:
        x_low = 1.0
        x_ticks = log_ticks(x_low, _decade_ceil(x_high))
        x_high = x_ticks[-1]
        y_values = [line.seconds_after(n) for line in lines for n in (x_low, x_high)]
        positive = [v for v in y_values if v > 0]
        y_low = _decade_floor(max(min(positive), 1e-9)) if positive else 1e-3
        y_ticks = log_ticks(y_low, _decade_ceil(max(max(y_values), y_low * 10)), max_ticks=8)
    else:
        x_low, y_low = 0.0, 0.0
        x_ticks = [float(t) for t in integer_ticks(x_high)]
        x_high = x_ticks[-1]
        y_ticks = nice_ticks(max(line.seconds_after(x_high) for line in lines), 4)
    sx = _Axis(x_low, x_high, left, left + _PLOT_W, log)
    sy = _Axis(y_low, y_ticks[-1], top + plot_h, top, log)
    return _BreakEvenPlot(log, x_low, x_high, x_ticks, y_ticks, sx, sy, unit, left, top, plot_h)


def _break_even_desc(meets: Sequence[Crossing], unit: str, log: bool) -> str:
    desc = (
        "; ".join(f"{c.first} and {c.second} cost the same after {format_count(c.calls)} {unit}s" for c in meets)
        or f"No crossing: one backend is cheaper at every number of {unit}s."
    )
    return desc + ". Both axes are logarithmic." if log else desc


def _break_even_axes(plot: _BreakEvenPlot) -> list[str]:
    """Grid lines, tick labels and units of both axes, and the axis lines."""
    left, top, plot_h, log = plot.left, plot.top, plot.plot_h, plot.log
    parts = []
    for tick in plot.y_ticks:
        y = plot.sy(tick)
        parts.append(f'<line class="grid" x1="{left}" y1="{_num(y)}" x2="{left + _PLOT_W}" y2="{_num(y)}"/>')
        parts.append(
            f'<text class="tick" x="{left - 6}" y="{_num(y + 4)}" text-anchor="end">{format_tick(tick)}</text>'
        )
    y_unit = "total seconds" + (" (log)" if log else "")
    parts.append(f'<text class="unit" x="8" y="{top - 14}">{y_unit}</text>')
    for tick in plot.x_ticks:
        x = plot.sx(tick)
        parts.append(f'<line class="grid" x1="{_num(x)}" y1="{top}" x2="{_num(x)}" y2="{top + plot_h + 4}"/>')
        parts.append(
            f'<text class="tick x-tick" data-value="{round(tick)}" x="{_num(x)}" y="{top + plot_h + 18}" '
            f'text-anchor="middle">{format_count(tick, compact=log or tick >= 10_000_000)}</text>'
        )
    parts.append(
        f'<text class="unit" x="{left + _PLOT_W}" y="{top + plot_h + 34}" text-anchor="end">'
        f"{_text(plot.unit)}s{' (log)' if log else ''}</text>"
    )
    parts.append(f'<path class="axis" d="M{left} {top}V{top + plot_h}H{left + _PLOT_W}"/>')
    return parts


def _expected_calls_marker(plot: _BreakEvenPlot, expected_calls: float | None, taken: list[Box]) -> list[str]:
    """The context's expected calls per compile as a vertical line, labelled where there is room."""
    if not (expected_calls and plot.x_low < expected_calls <= plot.x_high):
        return []
    x, top, unit = plot.sx(expected_calls), plot.top, plot.unit
    text = f"expected {unit}s"
    parts = [
        f'<line class="expected" x1="{_num(x)}" y1="{top}" x2="{_num(x)}" y2="{top + plot.plot_h}">'
        f"<title>expected {_text(unit)}s per compile: {format_count(expected_calls)}</title></line>"
    ]
    spot = _place(text, [(x + 4, top + 13, "start"), (x - 4, top + 13, "end")], taken, plot.area)
    if spot:
        parts.append(
            f'<text class="expected-label" x="{_num(spot[0])}" y="{_num(spot[1])}" '
            f'text-anchor="{spot[2]}">{_text(text)}</text>'
        )
    return parts


def _cost_line(plot: _BreakEvenPlot, index: int, line: CostLine, end_y: float, label_y: float) -> list[str]:
    """One backend's cumulative time, and its name right of the plot (with a leader when moved off the line's end)."""
    unit = plot.unit
    if plot.log:
        samples = [plot.x_low * (plot.x_high / plot.x_low) ** (k / 48) for k in range(49)]
    else:
        samples = [plot.x_low, plot.x_high]
    state = " highlighted" if line.highlighted else ""
    path = "M" + "L".join(plot.point(n, line.seconds_after(n)) for n in samples)
    parts = [
        f'<path class="cost-line series-{index % 6}{state}" data-backend="{_text(line.label)}" '
        f'd="{path}"><title>{_text(line.label)}: '
        f"{format_quantity(line.compile_s)} s compile + {format_quantity(line.latency_ms)} ms per {_text(unit)}"
        "</title></path>"
    ]
    label_x = plot.left + _PLOT_W + 10
    if abs(label_y - 4 - end_y) > 1:  # moved off its line's end: a leader shows whose it is
        parts.append(
            f'<path class="leader series-{index % 6}" d="M{plot.left + _PLOT_W} {_num(end_y)}'
            f'L{label_x - 2} {_num(label_y - 4)}"/>'
        )
    parts.append(
        f'<text class="series-label series-{index % 6}{state}" x="{label_x}" y="{_num(label_y)}">'
        f"{_text(_shorten(line.label, _SERIES_CHARS))}<title>{_text(line.label)}</title></text>"
    )
    return parts


def _crossing_markers(plot: _BreakEvenPlot, shown: Sequence[Crossing], taken: list[Box]) -> list[str]:
    """A circle (with its tooltip) at each crossing inside the plotted range; each marker's box is taken."""
    parts = []
    for c in shown:
        cx, cy = plot.sx(c.calls), plot.sy(c.seconds)
        taken.append(Box(cx - 6, cy - 6, cx + 6, cy + 6))
        parts.append(
            f'<circle class="crossing" cx="{_num(cx)}" cy="{_num(cy)}" r="5">'
            f"<title>{_text(c.first)} = {_text(c.second)} after {format_count(c.calls)} "
            f"{_text(plot.unit)}s</title></circle>"
        )
    return parts


def _crossing_labels(
    plot: _BreakEvenPlot, lines: Sequence[CostLine], shown: Sequence[Crossing], taken: list[Box]
) -> list[str]:
    """The calls at each crossing that matters (one involving a highlighted line, when any is), placed where no
    other label is; one label where several lines meet in one point; none where there is no free spot."""
    highlighted = {line.label for line in lines if line.highlighted}
    wanted = [c for c in shown if not highlighted or {c.first, c.second} & highlighted]
    said: set[tuple[int, int, str]] = set()
    parts = []
    for c in wanted:
        cx, cy = plot.sx(c.calls), plot.sy(c.seconds)
        text = f"{format_count(c.calls)} {plot.unit}s"
        if (round(cx / 4), round(cy / 4), text) in said:  # three lines meeting in one point: one label
            continue
        said.add((round(cx / 4), round(cy / 4), text))
        candidates = [
            (cx + dx, cy + dy, "start" if dx > 0 else "end") for dy in (-8, 16, -22, 30, -36, 44) for dx in (8, -8)
        ]
        spot = _place(text, candidates, taken, plot.area)
        if spot:
            parts.append(
                f'<text class="crossing-label" x="{_num(spot[0])}" y="{_num(spot[1])}" '
                f'text-anchor="{spot[2]}">{_text(text)}</text>'
            )
    return parts


def break_even_chart(
    lines: Sequence[CostLine],
    *,
    expected_calls: float | None = None,
    unit: str = "call",
    title: str = "Break-even: total time (compile + calls) vs number of calls",
) -> str:
    """Cumulative time per backend; each crossing is marked, the ones that matter labelled.

    The x range covers twice the furthest crossing (so the lines visibly cross) and the context's expected
    calls per compile when that is given. Calls are whole numbers: the x ticks are integers. When the
    crossings lie orders of magnitude apart both axes are logarithmic (the cost lines then bend). Labels are
    placed so that their boxes never overlap; a crossing label that has no free spot is left out (the circle's
    tooltip and the list under the chart still give it).
    """
    if not lines:
        return _empty(title, "Needs at least one backend with latency and compile time.", "break-even-chart")
    meets = crossings(lines)
    plot = _break_even_plot(lines, meets, expected_calls, unit)
    top, plot_h = plot.top, plot.plot_h
    width = plot.left + _PLOT_W + _SERIES_LABEL_W
    ends = [plot.sy(line.seconds_after(plot.x_high)) for line in lines]
    label_ys = _dodge([y + 4 for y in ends], _FONT_PX + 3, top + 10, top + plot_h)  # the names right of the plot
    height = max(top + plot_h + 46, max(label_ys) + 6)
    desc = _break_even_desc(meets, unit, plot.log)
    parts = [_svg_open(width, height, title, desc, "break-even-chart" + (" log" if plot.log else ""))]
    parts += _break_even_axes(plot)
    taken: list[Box] = []  # label boxes (and crossing markers) already on the plot
    parts += _expected_calls_marker(plot, expected_calls, taken)
    for i, line in enumerate(lines):
        parts += _cost_line(plot, i, line, ends[i], label_ys[i])
    shown = [c for c in meets if plot.x_low <= c.calls <= plot.x_high]
    parts += _crossing_markers(plot, shown, taken)
    parts += _crossing_labels(plot, lines, shown, taken)
    parts.append("</svg>")
    return "".join(parts)


_SERIES_STYLES = 6  # web.css defines series-0 .. series-5


def speedup_series_chart(days: Sequence[str], series: dict[str, list[float | None]], title: str) -> str:
    """One line per option: its speedup vs eager at each point along the x axis (a suite's days, a sweep's shapes;
    a gap where it has no value), with a dashed line at 1.0x (eager). Each point's <title> and the <desc> give
    the numbers."""
    values = [v for points in series.values() for v in points if v is not None]
    if not days or not values:
        return _empty(title, "No speedups measured yet.", "series-chart")
    ticks = nice_ticks(max(max(values), 1.0))
    x0, width = _LABEL_W, _PLOT_W
    plot_h = 200.0
    top = _PAD
    step = width / max(len(days) - 1, 1)

    def xy(index: int, value: float) -> tuple[float, float]:
        return x0 + index * step, top + plot_h - value / ticks[-1] * plot_h

    desc = "; ".join(
        f"{label}: "
        + ", ".join(f"{day} {'-' if v is None else f'{v:.2f}x'}" for day, v in zip(days, points, strict=True))
        for label, points in series.items()
    )
    parts = [_svg_open(x0 + width + _PAD * 4, top + plot_h + _AXIS_H + 18 * len(series), title, desc, "series-chart")]
    for tick in ticks:
        y = xy(0, tick)[1]
        parts.append(f'<line class="grid" x1="{x0}" y1="{_num(y)}" x2="{_num(x0 + width)}" y2="{_num(y)}"/>')
        parts.append(f'<text class="tick" x="{x0 - 6}" y="{_num(y + 4)}" text-anchor="end">{format_tick(tick)}x</text>')
    eager_y = xy(0, 1.0)[1]
    parts.append(
        f'<line class="axis eager-line" x1="{x0}" y1="{_num(eager_y)}" x2="{_num(x0 + width)}" '
        f'y2="{_num(eager_y)}" stroke-dasharray="4 3"/>'
    )
    for index, day in enumerate(days):
        x = xy(index, 0)[0]
        parts.append(
            f'<text class="tick" x="{_num(x)}" y="{_num(top + plot_h + 16)}" text-anchor="middle">{_text(day)}</text>'
        )
    for number, (label, points) in enumerate(series.items()):
        style = f"series-{number % _SERIES_STYLES}"
        segment: list[str] = []
        segments = [segment]
        for index, value in enumerate(points):
            if value is None:
                segment = []
                segments.append(segment)
                continue
            x, y = xy(index, value)
            segment.append(f"{_num(x)},{_num(y)}")
            parts.append(
                f'<circle class="cost-line {style}" cx="{_num(x)}" cy="{_num(y)}" r="3">'
                f"<title>{_text(label)} on {_text(days[index])}: {value:.2f}x</title></circle>"
            )
        parts += [f'<polyline class="cost-line {style}" points="{" ".join(s)}"/>' for s in segments if len(s) > 1]
        legend_y = top + plot_h + _AXIS_H + 18 * number
        parts.append(f'<text class="legend {style}" x="{x0}" y="{_num(legend_y)}">{_text(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
