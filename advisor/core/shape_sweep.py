"""Shape sweeps: which shapes the child times every option at (from the context), and what the timings at those
shapes say about the answer (the best option per shape, where it changes, what a static compile would give).

The child (advisor.harness.measurement.sweep) stores one `SweepPoint` per shape on each row; the decision engine
states `where_the_answer_changes`, the reports and the dashboard draw `speedups_by_shape`. Torch-free.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from advisor.core import claims
from advisor.core.catalogue import EAGER_LABEL
from advisor.core.context import MAX_SWEEP_POINTS, ContextError, DeploymentContext, parse_context
from advisor.core.results import MeasurementRun, read
from advisor.core.shape_plan import default_max_graphs, traffic_sweep

STATIC_GAIN = 1.10  # a static compile this much faster than automatic dynamic shapes at every point is worth saying


def sweep_spec(context: DeploymentContext | dict | None) -> dict[str, Any] | None:
    """What the child sweeps: the context's explicit points, else the sizes its traffic's shape plan needs (marked
    `traffic`: with a ranking, only the recommendation and its closest rival are timed there), else its shape ranges
    (min, middle, max), else None
    (also for a context dict that does not validate: the server validated it, a sweep is not worth failing for)."""
    if context is None:
        return None
    if not isinstance(context, DeploymentContext):
        try:
            context = parse_context(context)
        except ContextError:
            return None
    if context.shape_sweep:
        return {"points": [dict(point) for point in context.shape_sweep]}
    if context.shape_traffic:  # the sizes a shape plan needs (advisor.core.shape_plan)
        entries = [entry.model_dump() for entry in context.shape_traffic]
        max_graphs = context.max_graphs or default_max_graphs(context.target)
        # "traffic": a ranked measurement times these only for the plan's options (harness.measurement.details)
        return {"points": traffic_sweep(entries, max_graphs, MAX_SWEEP_POINTS), "traffic": True}
    if context.shape_ranges:
        return {"ranges": [r.model_dump() for r in context.shape_ranges]}
    return None


def range_sizes(low: int, high: int) -> list[int]:
    """The sizes a shape range is swept at: its ends and their geometric middle."""
    middle = round(math.sqrt(low * high))
    return sorted({low, middle, high})


class ShapeAnswer(NamedTuple):
    shape: str  # the point's label, "x=32x64"
    best: str  # the option with the highest speedup there (eager:default when nothing beats 1.0)
    speedup: float


def speedups_by_shape(run: MeasurementRun | dict | None) -> tuple[list[str], dict[str, list[float | None]]]:
    """(point labels, {option: its speedup at each point, None where it has none}) over the compiled options'
    sweeps, plus `option (static)` series where the static compile was measured."""
    run = read(MeasurementRun, run)
    rows = [row for row in (run.measurements if run else None) or [] if row.sweep and row.status == "ok"]
    labels = _swept_labels(rows)
    series: dict[str, list[float | None]] = {}
    for row in rows:
        if row.label != EAGER_LABEL:
            series.update(_row_series(row, labels))
    return labels, series


def _swept_labels(rows: list[Any]) -> list[str]:
    """Every point label the rows were swept at, in the order first seen."""
    labels = [p.label for row in rows for p in row.sweep or [] if p.label]
    return list(dict.fromkeys(labels))


def _row_series(row: Any, labels: list[str]) -> dict[str, list[float | None]]:
    """One option's speedup at each label, and its static compile's when that was measured anywhere."""
    by_label = {p.label: p for p in row.sweep or []}
    points = [by_label.get(label) for label in labels]
    series = {row.label: [p.speedup if p else None for p in points]}
    static = [p.static.speedup if p and p.static else None for p in points]
    if any(value is not None for value in static):
        series[f"{row.label} (static)"] = static
    return series


def best_by_shape(run: MeasurementRun | dict | None, allowed: set[str] | None = None) -> list[ShapeAnswer]:
    """Per swept shape, the option (among `allowed`, all when None) with the highest speedup vs eager there."""
    run = read(MeasurementRun, run)  # once: the helpers below take the model as it is
    labels, series = speedups_by_shape(run)
    eager_ran = _eager_ran_at(run)
    answers = []
    for index, label in enumerate(labels):
        if label not in eager_ran and all(values[index] is None for values in series.values()):
            continue  # nothing ran at this shape (e.g. outside an export's dynamic range): no answer there
        best, speed = EAGER_LABEL, 1.0
        for option, values in series.items():
            value = values[index]
            if option.endswith(" (static)") or (allowed is not None and option not in allowed) or value is None:
                continue
            if value > speed:
                best, speed = option, value
        answers.append(ShapeAnswer(label, best, speed))
    return answers


def _eager_ran_at(run: MeasurementRun | dict | None) -> set[str]:
    run = read(MeasurementRun, run)
    rows = [row for row in (run.measurements if run else None) or [] if row.label == EAGER_LABEL and row.sweep]
    return {p.label for row in rows for p in row.sweep or [] if p.label and p.median_ms is not None}


def where_the_answer_changes(run: MeasurementRun | dict | None, chosen: str | None, allowed: set[str]) -> str | None:
    """One sentence for the decision: the best option at each swept shape, and whether that is `chosen` everywhere;
    plus a static compile's gain where it beat automatic dynamic shapes at every point. None without a sweep."""
    run = read(MeasurementRun, run)  # once: the helpers below take the model as it is
    answers = best_by_shape(run, allowed | {EAGER_LABEL})
    if not answers:
        return None
    # a swept point's speedup has no interval: the words come from the one rule (claims), which calls no order there
    per_shape = "; ".join(f"{a.shape}: {a.best} ({a.speedup:.2f}x)" for a in answers) + f" - {claims.NO_INTERVAL}"
    winners = {a.best for a in answers}
    lead = claims.lead_words(None)
    if chosen is None:
        text = f"No option qualifies; the highest estimate by shape: {per_shape}."
    elif winners == {chosen}:
        text = f"{chosen} {lead} at every swept shape ({per_shape})."
    elif len(winners) == 1:
        text = f"At every swept shape {answers[0].best} {lead} ({per_shape}), not {chosen}."
    else:
        text = f"The highest estimate changes with the shape: {per_shape}."
    static = _static_gain(run, chosen)
    if static:
        text += f" {static}"
    return text


def _static_gain(run: MeasurementRun | dict | None, chosen: str | None) -> str | None:
    labels, series = speedups_by_shape(run)
    dynamic, static = series.get(chosen or ""), series.get(f"{chosen} (static)")
    if not dynamic or not static:
        return None
    ratios = [s / d for d, s in zip(dynamic, static, strict=True) if d and s]
    if len(ratios) == len(labels) and min(ratios) >= STATIC_GAIN:
        return (
            f"A static compile of {chosen} (one specialised graph per shape, dynamic=False) "
            f"{claims.ratio_range_words(min(ratios), max(ratios), None, 'automatic dynamic shapes')} at these "
            "shapes; with few distinct shapes in production it is worth trying for its extra compiles."
        )
    return None
