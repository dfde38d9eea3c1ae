"""Inspect -> measure -> decide: the one assembly of an analysis, for `npu-advisor analyze` and the worker.

Inspection runs in a sandboxed child (advisor.harness.isolated_inspection), then every (backend, mode) variant in
a child of its own (advisor.harness.measurement); all of them fork from one zygote, so a job imports torch once.
Progress is one stream of `advisor.core.progress.ProgressEvent`. A stop is a `StepFailure` in the outcome, never
an exception, so that each caller words it for its own audience (a CLI message and exit code, a job error).
The decision is taken only when a deployment context is given: the server re-decides with advisor.core itself,
so the worker measures without deciding. This module does not import torch (the children do).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.core import snippets
from advisor.core.context import DEFAULT_DECODE_TOKENS, DEFAULT_OPTIMIZER, DEFAULT_WORKLOAD
from advisor.core.progress import ProgressEvent
from advisor.core.shape_sweep import sweep_spec
from advisor.harness import isolated_inspection, measurement
from advisor.harness.sandbox import Cancel, Zygote

OnProgress = Callable[[ProgressEvent], None]
OnRanked = Callable[["AnalysisOutcome"], None]
MEASURE_START = 0.1  # the job fraction at which measuring starts; the variants share the rest


@dataclass(frozen=True)
class AnalysisRequest:
    """What to analyse and how. `backends` None: every backend; `timeout_s` / `memory_limit_mb` None: the
    defaults of each step (they apply to each child separately)."""

    model: str
    device: str
    inputs: str | None = None
    input_shapes: Sequence[str] | None = None
    backends: list[str] | None = None
    workload: str = DEFAULT_WORKLOAD
    optimizer: str = DEFAULT_OPTIMIZER
    decode_tokens: int = DEFAULT_DECODE_TOKENS  # workload "generation": greedy tokens after the prompt
    accuracy_tolerance: dict | None = None
    measure: bool = True
    timeout_s: float | None = None
    memory_limit_mb: int | None = None
    # the deployment context (DeploymentContext or its dict) to plan for: variants that no result of theirs could
    # make the recommendation are skipped (advisor.core.decision.plan_pruning); None: measure every variant
    plan_context: Any = None
    calibration: str | None = None  # the int8 options' calibration .npz (advisor.core.calibration)


@dataclass(frozen=True)
class StepFailure:
    """Why the pipeline stopped. `status`: the inspection child's status (cancelled, rejected, timeout, oom, ...)
    or, measuring, "cancelled" / "not_started" (bad model file, inputs or backend name: `reason` says which)."""

    step: str
    status: str
    reason: str | None
    stderr_tail: str | None = None

    @property
    def cancelled(self) -> bool:
        return self.status == "cancelled"


@dataclass(frozen=True)
class AnalysisOutcome:
    inspection: dict | None = None
    measurements: dict | None = None
    recommendation: dict | None = None
    failure: StepFailure | None = None


def run_analysis(
    request: AnalysisRequest,
    on_progress: OnProgress = lambda event: None,
    *,
    context: Any = None,
    cancel: Cancel = None,
    zygote: Zygote | None = None,
    before_measure: Callable[[], None] | None = None,
    on_ranked: OnRanked | None = None,
) -> AnalysisOutcome:
    """Inspect, measure (unless `request.measure` is off) and - given a DeploymentContext - decide.

    `before_measure`: called after the inspection, before the first measuring child (a worker waits there until the
    next job's sandbox, started at this job's start, is up, so that starting it never overlaps a timed window).

    `cancel` (an Event or a callable) stops the running child; the outcome is then a "cancelled" failure.
    `zygote`: a running one to fork every child from (the job sandbox the worker prepared; the caller closes it),
    used when its sandbox can read the model and inputs; None: the analysis starts its own.
    `on_ranked`: called once the measured options are ranked, before the recommended option's details (other input
    sizes, profile, warm-cache compile: minutes on a slow model) are measured, with the outcome so far - inspection,
    the ranked measurements and, given a `context`, the recommendation, which the details do not change (without
    one it is None: the worker's server decides). Not called when nothing follows the ranking: no context to plan
    for (`context` or `request.plan_context`), a training or generation workload, no option to detail."""
    readable = [request.model, request.inputs, request.calibration]
    on_progress(ProgressEvent("inspect", 0.0))
    # inspection and every measurement child fork from one zygote: one `import torch` for the whole analysis
    owned = zygote is None or not zygote.covers([p for p in readable if p], [])
    if owned:
        variants = _measured_variants(request, context)
        zygote = measurement.measurement_zygote(
            request.device,
            readable,
            inductor=measurement.builds_inductor_cpp(variants),
            onnx=measurement.exports_onnx(variants),
        )
    with zygote if owned else contextlib.nullcontext(zygote) as zygote:
        inspected = isolated_inspection.inspect_isolated(
            request.model,
            inputs_file=request.inputs,
            input_shapes=request.input_shapes,
            zygote=zygote,
            timeout_s=request.timeout_s,
            memory_limit_mb=request.memory_limit_mb,
            cancel=cancel,
        )
        if inspected.status != "ok":
            return AnalysisOutcome(
                failure=StepFailure("inspect", inspected.status, inspected.reason, inspected.stderr_tail)
            )
        inspection = inspected.value
        on_progress(ProgressEvent("inspect", MEASURE_START, phase="done"))
        run = None
        if request.measure and (refused := _calibration_refused(request, inspection)) is not None:
            return AnalysisOutcome(inspection=inspection, failure=StepFailure("measure", "not_started", refused))
        traffic = context if context is not None else request.plan_context
        if request.measure and (refused := _traffic_refused(traffic, inspection)) is not None:
            return AnalysisOutcome(inspection=inspection, failure=StepFailure("measure", "not_started", refused))
        if request.measure:
            if before_measure is not None:
                before_measure()
            plan = context if context is not None else request.plan_context
            ranked = _deciding(on_ranked, context, inspection)
            run, failure = _measure(request, zygote, on_progress, cancel, inspection, plan, ranked)
            if failure is not None:
                return AnalysisOutcome(inspection=inspection, failure=failure)
    if context is not None:
        on_progress(ProgressEvent("decide", 1.0))
    return _outcome_so_far(context, inspection, run)


def _outcome_so_far(context: Any, inspection: dict, run: dict | None) -> AnalysisOutcome:
    """The outcome of `inspection` and `run`, decided when there is a `context` (the worker does not decide)."""
    recommendation = None
    if context is not None:
        from advisor.core.decision.engine import decide

        recommendation = dict(decide(context, inspection, run))
    return AnalysisOutcome(inspection=inspection, measurements=run, recommendation=recommendation)


def _deciding(on_ranked: OnRanked | None, context: Any, inspection: dict) -> Callable[[dict], None] | None:
    """The measurement's `on_ranked` for the pipeline's: the ranked run, decided, as an outcome so far."""
    if on_ranked is None:
        return None
    return lambda run: on_ranked(_outcome_so_far(context, inspection, run))


def _calibration_refused(request: AnalysisRequest, inspection: dict) -> str | None:
    """Why the calibration file does not fit the inspected model's inputs (before any child measures), or None."""
    if request.calibration is None:
        return None
    from advisor.core.calibration import CalibrationRefused, check_against_inputs, check_file

    try:
        check_against_inputs(check_file(request.calibration), inspection.get("inputs") or [])
    except CalibrationRefused as exc:
        return str(exc)
    return None


def _traffic_refused(context: Any, inspection: dict) -> str | None:
    """Why the context's shape traffic does not fit the inspected model's inputs (an unknown input, a wrong rank,
    a size its dynamic dims forbid), before any child measures; None when it fits or there is none."""
    from advisor.core.context import ContextError, DeploymentContext, parse_context
    from advisor.core.shape_traffic import traffic_problems

    try:
        parsed = context if isinstance(context, DeploymentContext) else parse_context(context)
    except ContextError:
        return None  # validated where it came in; a sweep is not worth failing for
    if not parsed.shape_traffic:
        return None
    entries = [entry.model_dump() for entry in parsed.shape_traffic]
    exported = inspection.get("format") == "exported_program"
    problems = traffic_problems(
        entries, inspection.get("inputs") or [], inspection.get("dynamic_dims") or [], exported=exported
    )
    return "the shape traffic does not fit the model: " + "; ".join(problems[:5]) if problems else None


def _measured_variants(request: AnalysisRequest, context: Any = None) -> list[tuple[str, str]]:
    """The variants this analysis measures, for what its zygote prepares (Inductor's C++ compile, ONNX export);
    none for an analysis that only inspects."""
    if not request.measure:
        return []
    try:
        return _variants(request, context)
    except measurement.MeasureError:
        return []  # the measurement will not start; the failure is reported there


def _variants(request: AnalysisRequest, context: Any = None) -> list[tuple[str, str]]:
    """The (backend, mode) variants this analysis measures for `context` (else the request's plan context): the edge
    stage adds the exported int8 options (measurement.quantizes_by_default)."""
    plan = context if context is not None else request.plan_context
    quantize = measurement.quantizes_by_default(plan, request.workload)
    return measurement.plan_variants(request.backends, request.device, quantize=quantize)


def _measure(
    request: AnalysisRequest,
    zygote: Any,
    on_progress: OnProgress,
    cancel: Cancel,
    inspection: dict,
    plan: Any,
    on_ranked: Callable[[dict], None] | None = None,
) -> tuple[dict | None, StepFailure | None]:
    """Eager first (the baseline and reference), then every other variant, each in a child (harness.measurement)."""
    on_progress(ProgressEvent("measure", MEASURE_START))
    try:
        variants = _variants(request, plan)
    except measurement.MeasureError as exc:
        return None, StepFailure("measure", "not_started", str(exc))
    finished: set[tuple[str, str]] = set()

    def forward(event: dict) -> None:
        variant = (str(event.get("backend")), str(event.get("mode") or "default"))
        if event.get("stage") in ("done", "skipped"):
            finished.add(variant)
        share = (1.0 - MEASURE_START) * len(finished) / max(1, len(variants))
        on_progress(ProgressEvent.from_measurement(event, MEASURE_START + share))

    limits = {"timeout_s": request.timeout_s, "memory_limit_mb": request.memory_limit_mb}
    try:
        run = measurement.measure_model(
            request.model,
            backends=request.backends,
            device=request.device,
            workload=request.workload,
            optimizer=request.optimizer,
            decode_tokens=request.decode_tokens,
            accuracy_tolerance=request.accuracy_tolerance,
            inputs_file=request.inputs,
            input_shapes=list(request.input_shapes) if request.input_shapes else None,
            progress=forward,
            cancel=cancel,
            zygote=zygote,
            keyword_inputs=snippets.keyword_inputs_of(inspection),
            plan_context=plan,
            inspection=inspection,
            shape_sweep=sweep_spec(plan),
            calibration_file=request.calibration,
            on_ranked=on_ranked,
            **{name: value for name, value in limits.items() if value is not None},
        )
    except measurement.MeasurementCancelled as exc:
        return None, StepFailure("measure", "cancelled", str(exc) or "cancelled")
    except measurement.MeasureError as exc:
        return None, StepFailure("measure", "not_started", str(exc))
    return dict(run), None
