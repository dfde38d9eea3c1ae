"""The shape plan's chart: latency against size along the traffic's axis (the dynamic option's and the static
compile's, as measured), the plan's buckets as dashed verticals, and the traffic's calls per size as bars along the
bottom. Drawn as SVG like the other charts (app.web.charts), every number in a <title> and the <desc>."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.web.charts import _num, _svg_open, _text, format_tick, nice_ticks

_X0, _WIDTH, _TOP, _HEIGHT, _CALLS_H = 70.0, 480.0, 14.0, 200.0, 36.0
SERIES = (("dynamic_ms", "dynamic (one graph)", "series-0"), ("static_ms", "static (one graph per size)", "series-1"))


def shape_plan_chart(plan: Mapping[str, Any], title: str = "Latency by size, with the plan's buckets") -> str:
    """The chart of `plan` (a recommendation's `shape_plan`); a short message when it has no measured size."""
    table = [row for row in plan.get("sizes") or [] if isinstance(row, Mapping)]
    sizes = [int(row["size"]) for row in table]
    values = [float(row[key]) for row in table for key, _, _ in SERIES if row.get(key) is not None]
    if not sizes or not values:
        return _svg_open(_X0 + _WIDTH, 60, title, "No size was measured.", "shape-plan-chart") + "</svg>"
    buckets = _bucket_sizes(plan)
    high = max([*sizes, *buckets])
    ticks = nice_ticks(max(values))

    def x(size: float) -> float:
        return _X0 + size / high * _WIDTH

    def y(ms: float) -> float:
        return _TOP + _HEIGHT - ms / ticks[-1] * _HEIGHT

    base = _TOP + _HEIGHT
    desc = _desc(table, buckets)
    height = base + _CALLS_H + 40 + 18 * len(SERIES)
    parts = [_svg_open(_X0 + _WIDTH + 40, height, title, desc, "shape-plan-chart")]
    for tick in ticks:
        parts.append(
            f'<line class="grid" x1="{_X0}" y1="{_num(y(tick))}" x2="{_num(_X0 + _WIDTH)}" y2="{_num(y(tick))}"/>'
        )
        parts.append(
            f'<text class="tick" x="{_X0 - 6}" y="{_num(y(tick) + 4)}" text-anchor="end">{format_tick(tick)}</text>'
        )
    parts.append(f'<text class="unit" x="{_X0 - 6}" y="{_TOP - 2}" text-anchor="end">ms</text>')
    parts += _calls_bars(table, x, base)
    parts += [_bucket_line(b, x(b), base) for b in buckets]
    for number, (key, label, style) in enumerate(SERIES):
        parts += _series(table, key, label, style, x, y)
        legend_y = base + _CALLS_H + 30 + 18 * number
        parts.append(f'<text class="legend {style}" x="{_X0}" y="{_num(legend_y)}">{_text(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _bucket_sizes(plan: Mapping[str, Any]) -> list[int]:
    if plan.get("kind") == "dynamic":
        return []
    for dims in (plan.get("buckets") or {}).values():
        for sizes in dims.values():
            return [int(s) for s in sizes]
    return []


def _series(table: Sequence[Mapping], key: str, label: str, style: str, x: Any, y: Any) -> list[str]:
    points = [(int(row["size"]), float(row[key])) for row in table if row.get(key) is not None]
    parts = [
        f'<circle class="cost-line {style}" cx="{_num(x(s))}" cy="{_num(y(ms))}" r="3">'
        f"<title>{_text(label)} at {s}: {ms:.3f} ms</title></circle>"
        for s, ms in points
    ]
    if len(points) > 1:
        line = " ".join(f"{_num(x(s))},{_num(y(ms))}" for s, ms in points)
        parts.append(f'<polyline class="cost-line {style}" points="{line}"/>')
    return parts


def _calls_bars(table: Sequence[Mapping], x: Any, base: float) -> list[str]:
    most = max((int(row.get("calls") or 0) for row in table), default=0) or 1
    parts = [f'<line class="axis" x1="{_X0}" y1="{_num(base)}" x2="{_num(_X0 + _WIDTH)}" y2="{_num(base)}"/>']
    for row in table:
        calls, size = int(row.get("calls") or 0), int(row["size"])
        h = calls / most * (_CALLS_H - 8)
        parts.append(
            f'<rect class="calls" x="{_num(x(size) - 2)}" y="{_num(base + _CALLS_H - h)}" width="4" height="{_num(h)}">'
            f"<title>{calls:,} calls at size {size}</title></rect>"
        )
    parts.append(
        f'<text class="unit" x="{_num(_X0 + _WIDTH)}" y="{_num(base + _CALLS_H + 12)}" text-anchor="end">'
        "size (bars: calls)</text>"
    )
    return parts


def _bucket_line(size: int, at: float, base: float) -> str:
    return (
        f'<line class="bucket" x1="{_num(at)}" y1="{_TOP}" x2="{_num(at)}" y2="{_num(base)}" stroke-dasharray="5 3">'
        f"<title>bucket {size}</title></line>"
        f'<text class="tick bucket-label" x="{_num(at)}" y="{_TOP + 10}" text-anchor="middle">{size}</text>'
    )


def _desc(table: Sequence[Mapping], buckets: list[int]) -> str:
    rows = "; ".join(
        f"size {row['size']}: {row.get('calls') or 0} calls"
        + "".join(f", {label} {row[key]:.3f} ms" for key, label, _ in SERIES if row.get(key) is not None)
        for row in table
    )
    return rows + (f". Buckets: {', '.join(map(str, buckets))}." if buckets else ".")
