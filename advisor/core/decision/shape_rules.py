"""The recommendation's `shape_plan`: the plan (dynamic, static per size or buckets) for the context's traffic,
from the chosen option's measured sweep (advisor.core.shape_plan chooses; this reads the rows). Torch-free."""

from __future__ import annotations

import math
from typing import Any

from advisor.core.context import DeploymentContext
from advisor.core.results import MeasurementRun, read
from advisor.core.shape_plan import (
    Axis,
    SizeTiming,
    Timings,
    choose,
    default_max_graphs,
    plan_options,
    traffic_axis,
)
from advisor.core.shape_traffic import input_name

MAX_RIVALS = 2
NOT_SWEPT = (
    "not the recommendation or its closest rival: their plans could only be alternatives of an option that is not "
    "recommended, so the plan's sizes were timed for these two only"
)


def by_speed(options: list[Any]) -> list[Any]:
    """Qualified options (advisor.core.decision.candidates.Option), fastest median first: the plan's rivals in order."""
    return sorted(options, key=lambda o: ((o.row or {}).get("latency") or {}).get("median_ms") or math.inf)


def budget(context: DeploymentContext) -> int:
    return context.max_graphs or default_max_graphs(context.target)


def shape_plan(
    context: DeploymentContext, run: dict[str, Any] | None, chosen: str | None, rivals: list[str]
) -> dict[str, Any] | None:
    """The plan for `chosen` (an option label) over the context's traffic, with the other plans and the closest
    rivals' best plans as `alternatives`; None without traffic, an axis, or a sweep of `chosen`."""
    axis = traffic_axis([entry.model_dump() for entry in context.shape_traffic])
    rows = {row.label: row for row in (read(MeasurementRun, run).measurements or [])} if run else {}
    if axis is None or chosen not in rows:
        return None
    calls = context.expected_calls_per_compile
    options = plan_options(axis, row_timings(rows[chosen], axis), budget(context), calls)
    if not options:
        return None
    best, reasons = choose(options, calls)
    alternatives = [{**o, "option": chosen} for o in options if o is not best]
    for label in [r for r in rivals if r in rows and r != chosen][:MAX_RIVALS]:
        theirs = plan_options(axis, row_timings(rows[label], axis), budget(context), calls)
        if theirs:
            alternatives.append({**choose(theirs, calls)[0], "option": label})
    return {
        **best,
        "option": chosen,
        "axis": [{"input": name, "dim": dim} for name, dim in axis.dims],
        "max_graphs": budget(context),
        "reasons": reasons,
        "alternatives": alternatives,
        "sizes": size_table(rows[chosen], axis),
        "memory_kind": next((p.memory_kind for p in rows[chosen].sweep or [] if p.memory_kind), None),
        **swept_at_plan_sizes(run, rows),
    }


def swept_at_plan_sizes(run: dict[str, Any] | None, rows: dict[str, Any]) -> dict[str, Any]:
    """Which options were timed at the plan's sizes ("swept") and which measured ones were not, and why ("not_swept":
    {"options", "why"}; the why the measurement recorded in its quality's details, else NOT_SWEPT)."""
    swept = [label for label, row in rows.items() if row.sweep]
    others = [label for label, row in rows.items() if not row.sweep and row.status in ("ok", "fail_accuracy")]
    details = ((run or {}).get("quality") or {}).get("details") or {}
    why = details.get("not_swept") if isinstance(details, dict) else None
    return {"swept": swept, "not_swept": {"options": others, "why": str(why or NOT_SWEPT)} if others else None}


def row_timings(row: Any, axis: Axis) -> Timings:
    """The sizes `row`'s sweep measured along `axis`, and its dynamic graphs' count and compile time."""
    by_size: dict[int, SizeTiming] = {}
    graphs, compile_s = 1, row.compile_s_cold or 0.0
    for point in row.sweep or []:
        size = axis_size(point.shape, axis)
        if size is None or point.error or point.median_ms is None:
            continue
        static = point.static
        static_ok = static is not None and static.median_ms is not None
        by_size[size] = SizeTiming(
            point.median_ms,
            static.median_ms if static_ok else None,
            static.compile_s if static_ok else None,
            point.peak_memory_mb,
            static.peak_memory_mb if static_ok else None,
        )
        if point.recompiles:
            graphs += point.recompiles
            compile_s += max(0.0, (point.first_call_s or 0.0) - point.median_ms / 1000.0)
    return Timings(by_size, compile_s, graphs)


def axis_size(shape: dict[str, list[int]] | None, axis: Axis) -> int | None:
    """The axis' size in a swept point's shape (by the model's input names), or None."""
    if not shape:
        return None
    name, dim = axis.dims[0]
    resolved = input_name(name, shape)
    if resolved is None or dim >= len(shape[resolved]):
        return None
    return shape[resolved][dim]


def size_table(row: Any, axis: Axis) -> list[dict[str, Any]]:
    """Per size (the traffic's and the measured ones): its calls and the measured latencies, for the chart."""
    calls = dict(axis.sizes)
    timings = row_timings(row, axis).by_size
    table = []
    for size in sorted(set(calls) | set(timings)):
        t = timings.get(size)
        table.append(
            {
                "size": size,
                "calls": calls.get(size, 0),
                "dynamic_ms": t.dynamic_ms if t else None,
                "static_ms": t.static_ms if t else None,
            }
        )
    return table


def plan_step(plan: dict[str, Any]) -> dict[str, Any]:
    """The decision path's step for a plan."""
    from advisor.core.decision.rules import step

    outcome = f"{describe(plan)}. " + "; ".join(plan["reasons"]) + "."
    evidence = {
        "options": [
            {k: o.get(k) for k in ("option", "kind", "graphs", "expected_latency_ms", "compile_s", "memory_mb")}
            for o in [plan, *plan["alternatives"]]
        ]
    }
    return step("shape_plan", "Which graphs should serve the traffic's shapes?", evidence, outcome)


def describe(plan: dict[str, Any]) -> str:
    """One line: the plan's kind, sizes and figures."""
    sizes = next((dims for dims in plan["buckets"].values()), {})
    where = ", ".join(f"{a['input']}[{a['dim']}]" for a in plan["axis"])
    text = f"Shape plan for {plan['option']}: {plan['kind']}"
    if plan["kind"] != "dynamic" and sizes:
        text += f" at {where} = {next(iter(sizes.values()))}"
    text += (
        f" ({plan['graphs']} graph(s) of a budget of {plan['max_graphs']}; {plan['expected_latency_ms']:.3f} ms "
        f"per call expected, {plan['padding_waste']:.0%} padding, {plan['compile_s']:.1f} s compile)"
    )
    return text
