"""What the analysis detail and compare pages show, computed from one analysis dict.

The input is the API's analysis shape (`GET /api/v1/analyses/{id}`): `context`, `inspection`,
`measurements` (a MeasurementRun), `recommendation` and the bookkeeping fields. Pure and torch-free,
so it is tested with synthetic dicts; the templates only lay the result out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from advisor.core import catalogue, noise, reproduce
from advisor.core.breakdown_report import breakdown_facts, breakdown_heading, outside_profiler_note, shown_breakdowns
from advisor.core.catalogue import option_label
from advisor.core.common_scale import ComparableTime, comparable_times, scale_footnote
from advisor.core.decision import torchair_status_unknown
from advisor.core.early_answer import pending_note
from advisor.core.report import generation_lines, seeded_compile_note
from advisor.core.results import MeasurementRun, Recommendation, read
from advisor.core.shape_plan_text import plan_config, plan_lines
from advisor.core.shape_sweep import speedups_by_shape
from advisor.core.source_report import SOURCE_LABEL, report_lines, source_report_or_none
from advisor.core.status import TERMINAL_ANALYSIS_STATUSES
from app.web.charts import (
    CompileBar,
    CostLine,
    Crossing,
    LatencyBar,
    ShareBar,
    break_even_chart,
    breakdown_chart,
    compile_chart,
    crossings,
    format_quantity,
    latency_chart,
    speedup_series_chart,
)
from app.web.shape_plan_chart import shape_plan_chart
from app.web.status_strip import StatusStrip, status_strip
from app.web.tree import backend_label, tree_svg

# Coverage statuses, worst last; the CSS class is the status itself, the text says it too (not colour alone).
INDUCTOR_STATUS_TEXT = {
    "lowered": "lowered (Inductor kernel)",
    "decomposed": "decomposed into lowered ops",
    "fallback": "fallback kernel (runs eagerly)",
    "untraceable": "untraceable (graph break)",
}
TORCHAIR_STATUS_TEXT = {
    "supported": "supported",
    "partial": "partial (some dtypes / shapes)",
    "stub": "stub (converter registered, no implementation)",
    "none": "no converter",
    "unknown": "unknown until measured on an NPU",
}


@dataclass
class MeasurementRow:
    label: str
    backend: str
    mode: str
    status: str
    reason: str
    median_ms: float | None
    ci: tuple[float, float] | None
    p99_ms: float | None
    verdict: str | None
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    compile_cold_s: float | None
    compile_warm_s: float | None
    compile_bound: str | None  # set: compile_cold_s is an upper bound, this says of what (core.report)
    peak_memory_mb: float | None
    memory_kind: str | None
    accuracy: Mapping | None
    graph_breaks: int | None
    recommended: bool
    noise: str | None = None  # why advisor.core.noise calls this row's timings noisy; None when they are not
    unresolved: bool = False  # its CI is too wide to rank it against other options (advisor.core.noise)
    window: str = "first window"  # which timed window `median_ms` came from (advisor.core.noise.latency_window)
    # its times as the table shows them: on one reference eager's scale (advisor.core.common_scale, the numbers the
    # CLI table and report.md quote); `median_ms` above is its own process's, for the chart's details and the JSON
    time: ComparableTime | None = None
    eliminated: str | None = None  # why racing stopped timing it (MeasurementRow.eliminated); None: timed in full


@dataclass
class Answer:
    """The detail page's first card: what to use, how much faster, how sure, each said once."""

    label: str  # "inductor:max-autotune"; "no backend qualifies"
    mode_note: str | None  # "default mode" when the label does not name the mode
    what: str | None  # what the option is, as every report names it (catalogue.option_display); None: no backend
    speedup: float | None  # the chosen row's side-by-side speedup vs eager
    speedup_ci: tuple[float, float] | None
    speedup_note: str | None  # why there is no speedup to show ("eager is the baseline", "not measured")
    confidence: str
    measured: bool
    tie: bool
    noisy: bool  # the run's quality says noisy (advisor.core.noise)
    noisy_text: str | None
    unresolved: bool  # the chosen row's CI is too wide to rank it against other options (advisor.core.noise)
    summary: str  # the engine's summary without the sentences the card already states


@dataclass
class CoverageRow:
    name: str
    namespace: str
    count: int
    custom: bool
    has_fake_kernel: bool
    inductor: str
    torchair: str
    torchair_note: str | None = None


@dataclass
class BreakdownPanel:
    """Where one option's time goes: its bar chart (top entries by share), how it was measured, compiled-only facts."""

    label: str
    chart: str
    heading: str
    facts: list[str]


@dataclass(frozen=True)
class SourceView:
    """The source-side report uploaded with the program (`analyze FILE.py:factory --server`): its lines as the reports
    list them (advisor.core.source_report.report_lines), shown as text (autoescaped) under SOURCE_LABEL."""

    factory: str
    torch_version: str
    label: str
    lines: list[str]
    break_count: int | None


def source_view(data: Any) -> SourceView | None:
    report = source_report_or_none(data)
    if report is None:
        return None
    return SourceView(
        factory=report.factory,
        torch_version=report.torch_version or "?",
        label=SOURCE_LABEL,
        lines=report_lines(report),
        break_count=report.graph_breaks.break_count if report.graph_breaks.analysed else None,
    )


@dataclass
class DetailView:
    analysis: Mapping[str, Any]
    recommendation: Mapping[str, Any] | None
    recommended_label: str | None
    rows: list[MeasurementRow]
    coverage: list[CoverageRow]
    environment: Mapping[str, Any]
    measured_on: str | None
    not_npu_note: str | None
    charts: dict[str, str] = field(default_factory=dict)
    crossings: list[Crossing] = field(default_factory=list)
    tree: str | None = None
    reproduce_command: str = ""
    context_json: str = ""
    terminal: bool = False
    training: bool = False  # a training run: times are per step, accuracy is the gradients'
    quality: Mapping[str, Any] | None = None  # advisor.core.noise.quality_of(run): noisy, noisy_rows, unresolved, ...
    answer: Answer | None = None
    breakdowns: list[BreakdownPanel] = field(default_factory=list)  # eager's and the recommended option's
    generation: list[str] = field(default_factory=list)  # a generation run's phases per option (report lines)
    measured_by: Mapping[str, Any] | None = None  # the worker whose completion the measurements are
    source: SourceView | None = None  # the source-side report uploaded with the program, if any
    # a ranking published before the recommended option's details (advisor.core.early_answer); None when complete
    ranked_note: str | None = None
    strip: StatusStrip | None = None  # status, stage and queue position that agree (app.web.status_strip)
    shape_plan_lines: list[str] = field(default_factory=list)  # the traffic's plan (advisor.core.shape_plan_text)
    shape_plan_config: str | None = None
    scale_note: str | None = None  # what the table's time columns are scaled to (common_scale.scale_footnote)

    @property
    def unit(self) -> str:
        """What one timed call is: "step" for training, "call" for inference."""
        return "step" if self.training else "call"


def measurement_label(row: Mapping) -> str:
    return backend_label(row.get("backend"), row.get("mode"))


def _pair(value: Any) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2 and all(isinstance(v, int | float) for v in value):
        return float(value[0]), float(value[1])
    return None


def measurement_rows(
    run: Mapping | None, recommendation: Mapping | None, quality: Mapping[str, Any] | None = None
) -> list[MeasurementRow]:
    """One row per (backend, mode) measured, in the order the worker ran them, marked noisy / unresolved as the
    run's quality says (its labels are advisor.core.noise's "backend:mode")."""
    chosen = backend_label(recommendation.get("backend"), recommendation.get("mode")) if recommendation else None
    noisy_rows = (quality or {}).get("noisy_rows") or {}
    unresolved = set((quality or {}).get("unresolved") or ())
    _, times = comparable_times(run)
    rows = []
    for m in (run or {}).get("measurements") or []:
        latency = m.get("latency") or {}
        label = measurement_label(m)
        rows.append(
            MeasurementRow(
                label=label,
                backend=str(m.get("backend") or ""),
                mode=str(m.get("mode") or "default"),
                status=str(m.get("status") or "unknown"),
                reason=str(m.get("reason") or ""),
                median_ms=latency.get("median_ms"),
                ci=(latency["ci_low_ms"], latency["ci_high_ms"]) if "ci_low_ms" in latency else None,
                p99_ms=latency.get("p99_ms"),
                verdict=latency.get("verdict"),
                speedup=m.get("speedup_vs_eager"),
                speedup_ci=_pair(m.get("speedup_ci")),
                compile_cold_s=m.get("compile_s_cold"),
                compile_warm_s=m.get("compile_s_warm"),
                compile_bound=seeded_compile_note(m.get("compile_s_cold"), m.get("compile_seeded")),
                peak_memory_mb=m.get("peak_memory_mb"),
                memory_kind=m.get("memory_kind"),
                accuracy=m.get("accuracy"),
                graph_breaks=m.get("graph_breaks"),
                recommended=label == chosen,
                noise=noisy_rows.get(noise.label(m)),
                unresolved=noise.label(m) in unresolved,
                window=noise.latency_window(m),
                time=times.get(option_label(m.get("backend"), m.get("mode"))) if latency else None,
                eliminated=str(m["eliminated"]) if m.get("eliminated") else None,
            )
        )
    return rows


def _has_latency(row: MeasurementRow) -> bool:
    return row.status == "ok" and row.median_ms is not None


def latency_bars(rows: list[MeasurementRow]) -> list[LatencyBar]:
    """One bar per timed row, at its times on one reference eager's scale (MeasurementRow.time, the table's numbers),
    so no loaded process's median stands beside quiet ones; a scaled bar names its own process's median."""
    bars = []
    for row in filter(_has_latency, rows):
        if row.time is None:
            continue
        t = row.time
        own = t.own_median_ms if t.scaled else None
        bars.append(
            LatencyBar(row.label, t.median_ms, t.ci_low_ms, t.ci_high_ms, t.p99_ms, row.recommended, row.window, own)
        )
    return bars


def compile_bars(rows: list[MeasurementRow]) -> list[CompileBar]:
    return [CompileBar(r.label, r.compile_cold_s, r.compile_warm_s, r.recommended) for r in rows if r.status == "ok"]


def cost_lines(rows: list[MeasurementRow]) -> list[CostLine]:
    """Cold compile time (0 for eager, which compiles nothing) plus median latency per call, on one reference eager's
    scale (MeasurementRow.time, as the decision's break-even reads it)."""
    return [
        CostLine(row.label, row.compile_cold_s or 0.0, row.time.median_ms, row.recommended)
        for row in rows
        if _has_latency(row) and row.time is not None
    ]


def coverage_rows(inspection: Mapping | None) -> list[CoverageRow]:
    """Every op, custom ops (outside aten/prims) first, then by count."""
    if not inspection:
        return []
    custom_names = {op.get("name") for op in inspection.get("custom_ops") or []}
    seen: dict[str, Mapping] = {}
    for op in list(inspection.get("custom_ops") or []) + list(inspection.get("ops") or []):
        seen.setdefault(str(op.get("name")), op)
    rows = []
    for name, op in seen.items():
        coverage = op.get("coverage") or {}
        known_only_on_npu = torchair_status_unknown(coverage)
        namespace = str(op.get("namespace") or name.split(".", 1)[0])
        rows.append(
            CoverageRow(
                name=name,
                namespace=namespace,
                count=int(op.get("count") or 0),
                custom=name in custom_names or namespace not in ("aten", "prims"),
                has_fake_kernel=bool(op.get("has_fake_kernel", True)),
                inductor=str(coverage.get("inductor") or "unknown"),
                torchair="unknown" if known_only_on_npu else str(coverage.get("torchair") or "unknown"),
                torchair_note=coverage.get("torchair_note"),
            )
        )
    return sorted(rows, key=lambda r: (not r.custom, -r.count, r.name))


def not_npu_note(measured_on: str | None, has_measurements: bool) -> str | None:
    """The honesty line: numbers from anything but a real Ascend NPU say so."""
    if not has_measurements:
        return "Not measured yet: no numbers below come from a device."
    if measured_on == "npu":
        return None
    if measured_on == "test-double":
        return "Measured on test double: the NPU path ran against a stand-in for torch_npu, not NPU-measured."
    return f"Not NPU-measured: these numbers come from {measured_on or 'an unknown device'}, not an Ascend NPU."


def reproduce_command(analysis: Mapping, rows: list[MeasurementRow], device: str | None = None) -> str:
    """Shell lines that re-run this analysis (`npu-advisor analyze`) on a machine of the same kind: the uploaded
    files' names, the context, and the measured option set (advisor.core.reproduce)."""
    names = analysis.get("upload_names") or {}
    return reproduce.reproduce_command(
        context=analysis.get("context") or {},
        options=[(r.backend, r.mode) for r in rows],
        device=device or str(analysis.get("target") or "cpu"),
        model_file=reproduce.model_file_name(names, str(analysis.get("model_name") or "model"), analysis.get("format")),
        inputs_file=names.get("inputs"),
        calibration_file=names.get("calibration"),
    )


def detail_view(analysis: Mapping[str, Any]) -> DetailView:
    recommendation = analysis.get("recommendation") or None
    run = analysis.get("measurements") or {}
    quality = run_quality(run)
    rows = measurement_rows(run, recommendation, quality)
    environment = run.get("environment") or {}
    measured_on = environment.get("measured_on")
    context = analysis.get("context") or {}
    view = DetailView(
        analysis=analysis,
        recommendation=recommendation,
        recommended_label=(
            backend_label(recommendation.get("backend"), recommendation.get("mode")) if recommendation else None
        ),
        rows=rows,
        coverage=coverage_rows(analysis.get("inspection")),
        environment=environment,
        measured_on=measured_on,
        not_npu_note=not_npu_note(measured_on, bool(rows)),
        reproduce_command=reproduce_command(analysis, rows, environment.get("device")),
        context_json=json.dumps(context, indent=2, sort_keys=True),
        terminal=analysis.get("status") in TERMINAL_ANALYSIS_STATUSES,
        training=(run.get("workload") or context.get("workload")) == "training",
        quality=quality,
        measured_by=analysis.get("measured_by") or None,
        source=source_view(analysis.get("source_report")),
        ranked_note=pending_note(run),  # only a running job's ranking says details are pending (app.job_queue)
        strip=status_strip(analysis),
    )
    if recommendation:
        view.answer = answer(recommendation, rows, quality)
    if rows:
        _add_measurement_charts(view, run, context)
    view.breakdowns = breakdown_panels(run, recommendation)
    view.generation = generation_lines(read(MeasurementRun, run))
    shapes, series = speedups_by_shape(run)
    if shapes and series:
        view.charts["sweep"] = speedup_series_chart(shapes, series, "Speedup vs eager at each swept input shape")
    plan = (recommendation or {}).get("shape_plan")
    if isinstance(plan, Mapping) and plan.get("kind"):
        view.charts["shape_plan"] = shape_plan_chart(plan)
        view.shape_plan_lines = plan_lines(dict(plan))
        view.shape_plan_config = plan_config(dict(plan), str(context.get("target") or "npu"))
    if recommendation:
        # the tree shows the path; the summary is in the answer card and the reasons in the why-not table
        why_not = dict.fromkeys(recommendation.get("why_not") or {}, "")
        view.tree = tree_svg({**recommendation, "summary": "", "why_not": why_not})
    return view


def _add_measurement_charts(view: DetailView, run: Mapping[str, Any], context: Mapping[str, Any]) -> None:
    """The latency, compile and break-even charts of a run with measured rows, on one reference eager's scale."""
    reference, times = comparable_times(run)
    view.scale_note = scale_footnote(reference, times)
    lines = cost_lines(view.rows)
    title = "Steady-state latency per backend"
    if reference is not None and any(time.scaled for time in times.values()):
        title += f", each scaled to one reference eager ({format_quantity(reference)} ms)"
    view.charts = {
        "latency": latency_chart(latency_bars(view.rows), title),
        "compile": compile_chart(compile_bars(view.rows)),
        "break_even": break_even_chart(
            lines,
            expected_calls=_number(context.get("expected_calls_per_compile")),
            unit=view.unit,
            title=f"Break-even: total time (compile + {view.unit}s) vs number of {view.unit}s",
        ),
    }
    view.crossings = crossings(lines)


def breakdown_panels(run: Mapping | None, recommendation: Mapping | None) -> list[BreakdownPanel]:
    panels = []
    for label, breakdown in shown_breakdowns(read(MeasurementRun, run), read(Recommendation, recommendation)):
        if (note := outside_profiler_note(label.split(":", 1)[0])) is not None:  # its glue is not where time goes
            panels.append(BreakdownPanel(label, "", breakdown_heading(breakdown), [note]))
            continue
        bars = [
            ShareBar(str(e.name), e.kind or "op", e.share, e.ms_per_call)
            for e in breakdown.entries or []
            if e.name is not None and e.share is not None
        ]
        title = f"Where the time goes: {label}"
        panels.append(
            BreakdownPanel(
                label, breakdown_chart(bars, title), breakdown_heading(breakdown), breakdown_facts(breakdown)
            )
        )
    return panels


def run_quality(run: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """advisor.core.noise's verdict on the run (None before anything was measured, or for a shape it cannot read)."""
    if not run or not run.get("measurements"):
        return None
    try:
        return noise.quality_of(run)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, ZeroDivisionError):
        return None


def answer(recommendation: Mapping[str, Any], rows: list[MeasurementRow], quality: Mapping | None) -> Answer:
    backend, mode = recommendation.get("backend"), recommendation.get("mode")
    chosen = next((r for r in rows if r.recommended), None)
    note, speedup, speedup_ci = _chosen_speedup(backend, chosen)
    quality = quality or {}
    confidence = str(recommendation.get("confidence") or "unknown")
    return Answer(
        label=backend_label(backend, mode),
        mode_note="default mode" if backend and backend != "eager" and (mode or "default") == "default" else None,
        what=catalogue.option_display(backend, mode) if backend else None,
        speedup=speedup,
        speedup_ci=speedup_ci,
        speedup_note=note,
        confidence=confidence,
        measured=recommendation.get("measured") is not False,
        tie=bool(recommendation.get("tie")),
        noisy=bool(quality.get("noisy")),
        noisy_text=_noisy_text(quality),
        unresolved=bool(chosen and chosen.unresolved),
        summary=answer_summary(str(recommendation.get("summary") or ""), confidence, quality),
    )


def _chosen_speedup(
    backend: str | None, chosen: MeasurementRow | None
) -> tuple[str | None, float | None, tuple[float, float] | None]:
    """(why there is no speedup to show, the chosen row's speedup, its 95% CI): eager is the baseline; an option
    without a measured speedup says so; no backend says nothing."""
    if not backend:
        return None, None, None
    if backend == "eager":
        return "eager is the baseline (1×)", None, None
    if chosen is None or chosen.speedup is None:
        return "not measured", None, None
    return None, chosen.speedup, chosen.speedup_ci


def _noisy_text(quality: Mapping[str, Any]) -> str | None:
    """What made a noisy run noisy: the whole run's reasons (and what to do), else the noisy rows, else the reasons."""
    if not quality.get("noisy"):
        return None
    if quality.get("whole_run"):
        reasons = "; ".join(quality.get("run_reasons") or quality.get("reasons") or ())
        return reasons + ". Treat the speeds as rough and re-measure on a quiet node"
    if quality.get("noisy_rows"):
        return f"noisy timings for {', '.join(quality['noisy_rows'])} (marked in the measurements table)"
    return "; ".join(quality.get("reasons") or ())


_USE_SENTENCE = re.compile(r"^Use .+? on [A-Za-z0-9_-]+\.\s*")
_SPEEDUP_CLAUSE = re.compile(
    r"It ran \d+(?:\.\d+)?x as fast as eager side by side in the same process \(95% CI [\d.]+-[\d.]+x(?:: [a-z ]+)?"
    r"(?:; too wide an interval to (?:call it faster|rank it against other options))?\), "
)
_WHOLE_RUN_NOISY = (
    "The measurement run was noisy (the machine's speed changed or it was loaded): treat the speeds as rough and "
    "re-measure on a quiet node."
)


def answer_summary(summary: str, confidence: str, quality: Mapping[str, Any] | None = None) -> str:
    """The engine's summary less what the answer card states right above it: the opening "Use X on Y.", the
    side-by-side speedup and its CI, the noisy-run sentence and "Confidence: high." Only those exact phrasings
    (advisor.core.decision.engine's) are taken out; anything else stays as the engine wrote it."""
    text = _USE_SENTENCE.sub("", summary, count=1)
    text = _SPEEDUP_CLAUSE.sub("It ran at ", text, count=1)
    drop = [f"Confidence: {confidence}.", _WHOLE_RUN_NOISY]
    if (quality or {}).get("noisy_rows"):
        drop.append(f"Noisy timings for {', '.join(quality['noisy_rows'])}.")  # type: ignore[index]
    for sentence in drop:
        text = text.replace(f" {sentence}", "").replace(sentence, "")
    return text.strip()


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
