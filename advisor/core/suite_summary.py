"""A model suite at a glance: the analyses sharing a tag, summarised per option the way the PyTorch compiler
dashboard summarises its suites (geomean speedup, pass rate, compile time, memory), with its history.

Input: the suite's measured analyses as `SuiteMember`s (any order). The current summary uses each model's latest
analysis; the history uses each model's latest analysis of each UTC day, so a day's point compares like with
like. A regression is a point whose geomean speedup fell more than REGRESSION_DROP below the previous point's, or
whose pass rate fell. Torch-free.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from datetime import date, datetime

from pydantic import BaseModel

from advisor.core.catalogue import EAGER_LABEL
from advisor.core.results import MeasurementRow, MeasurementRun

REGRESSION_DROP = 0.10  # geomean speedup this much below the previous point is called a regression
NOT_ATTEMPTED = frozenset({"skipped", "unavailable"})  # the plan left it out, or the worker cannot run it
PASSED = "ok"


class SuiteMember(BaseModel):
    """One measured analysis of the suite."""

    analysis_id: int
    model_name: str
    created_at: datetime
    measurements: MeasurementRun
    recommended: str | None = None  # "inductor:default"


class OptionSummary(BaseModel):
    label: str  # backend:mode
    attempted: int  # models whose row was measured (not skipped, not unavailable on the worker)
    passed: int  # of those, ran and stayed accurate
    pass_rate: float | None
    geomean_speedup: float | None  # over the passed rows, vs eager side by side
    median_compile_s: float | None  # cold compile over the passed rows (an upper bound where compile_seeded)
    memory_vs_eager: float | None  # geomean of peak memory / eager's peak memory, over the passed rows


class ModelLine(BaseModel):
    model_name: str
    analysis_id: int
    created_at: datetime
    recommended: str | None
    speedup: float | None  # the recommended option's
    speedup_ci: list[float] | None = None  # its 95% CI: the page marks the speedup by advisor.core.claims' rule


class SuitePoint(BaseModel):
    day: date
    models: int
    options: list[OptionSummary]


class Regression(BaseModel):
    day: date
    option: str
    what: str  # "geomean speedup 1.52x -> 1.21x"


class SuiteSummary(BaseModel):
    tag: str
    models: list[ModelLine]
    options: list[OptionSummary]
    history: list[SuitePoint]
    regressions: list[Regression]


def summarise_suite(tag: str, members: Iterable[SuiteMember]) -> SuiteSummary:
    members = sorted(members, key=lambda m: (m.created_at, m.analysis_id))
    latest = _latest_per_model(members)
    by_day: dict[date, list[SuiteMember]] = {}
    for member in members:
        by_day.setdefault(member.created_at.date(), []).append(member)
    history = []
    for day, day_members in sorted(by_day.items()):
        day_latest = _latest_per_model(day_members)
        history.append(SuitePoint(day=day, models=len(day_latest), options=option_summaries(day_latest)))
    return SuiteSummary(
        tag=tag,
        models=[_model_line(m) for m in sorted(latest, key=lambda m: m.model_name)],
        options=option_summaries(latest),
        history=history,
        regressions=regressions(history),
    )


def option_summaries(members: list[SuiteMember]) -> list[OptionSummary]:
    """Per option over one analysis per model; eager first, then by label."""
    rows: dict[str, list[tuple[MeasurementRow, MeasurementRow | None]]] = {}
    for member in members:
        measured = member.measurements.measurements or []
        eager = next((r for r in measured if r.backend == "eager" and r.status == PASSED), None)
        for row in measured:
            if row.backend and row.status not in NOT_ATTEMPTED:
                rows.setdefault(row.label, []).append((row, eager))
    return [_option(label, rows[label]) for label in sorted(rows, key=lambda label: (label != EAGER_LABEL, label))]


def _option(label: str, rows: list[tuple[MeasurementRow, MeasurementRow | None]]) -> OptionSummary:
    passed = [(row, eager) for row, eager in rows if row.status == PASSED]
    memory = [
        row.peak_memory_mb / eager.peak_memory_mb
        for row, eager in passed
        if eager is not None and row.peak_memory_mb and eager.peak_memory_mb
    ]
    compile_s = [row.compile_s_cold for row, _ in passed if row.compile_s_cold is not None]
    return OptionSummary(
        label=label,
        attempted=len(rows),
        passed=len(passed),
        pass_rate=len(passed) / len(rows) if rows else None,
        geomean_speedup=geomean(row.speedup_vs_eager for row, _ in passed if row.speedup_vs_eager),
        median_compile_s=statistics.median(compile_s) if compile_s else None,
        memory_vs_eager=geomean(memory),
    )


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive finite values (None when there are none)."""
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def regressions(history: list[SuitePoint]) -> list[Regression]:
    found = []
    for before, after in zip(history, history[1:], strict=False):
        previous = {o.label: o for o in before.options}
        for option in after.options:
            old = previous.get(option.label)
            if old is None:
                continue
            if old.geomean_speedup and option.geomean_speedup is not None:
                if option.geomean_speedup < old.geomean_speedup * (1 - REGRESSION_DROP):
                    what = f"geomean speedup {old.geomean_speedup:.2f}x -> {option.geomean_speedup:.2f}x"
                    found.append(Regression(day=after.day, option=option.label, what=what))
            if old.pass_rate is not None and option.pass_rate is not None and option.pass_rate < old.pass_rate:
                what = f"pass rate {old.pass_rate:.0%} -> {option.pass_rate:.0%}"
                found.append(Regression(day=after.day, option=option.label, what=what))
    return found


def _latest_per_model(members: list[SuiteMember]) -> list[SuiteMember]:
    latest: dict[str, SuiteMember] = {}
    for member in members:  # in time order: the last one wins
        latest[member.model_name] = member
    return list(latest.values())


def _model_line(member: SuiteMember) -> ModelLine:
    chosen = next(
        (r for r in member.measurements.measurements or [] if member.recommended and r.label == member.recommended),
        None,
    )
    return ModelLine(
        model_name=member.model_name,
        analysis_id=member.analysis_id,
        created_at=member.created_at,
        recommended=member.recommended,
        speedup=chosen.speedup_vs_eager if chosen else None,
        speedup_ci=list(chosen.speedup_ci) if chosen and chosen.speedup_ci else None,
    )
