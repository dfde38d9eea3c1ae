"""Measuring a model: eager first (baseline and reference), then every variant, each in its own sandboxed child
forked from one zygote; a noisy run is re-measured in bounded rounds (a time budget). Torch-free on this (parent) side.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from advisor.core import noise, snippets
from advisor.core.context import DEFAULT_DECODE_TOKENS, DEFAULT_OPTIMIZER, DEFAULT_WORKLOAD, DeploymentContext
from advisor.core.decision import racing
from advisor.core.decision.plan_pruning import detailed_options, plan_swept_options
from advisor.core.decision.racing import RaceBound
from advisor.core.quantized import quantizes_by_default
from advisor.harness.measurement.details import (
    details_to_come,
    first_pass_policy,
    measure_leading_details,
    publish_ranked,
)
from advisor.harness.measurement.plan import (
    DEFAULT_MEMORY_LIMIT_MB,
    DEFAULT_TIMEOUT_S,
    PRELOAD,
    check_model_file,
    check_workload,
    plan_variants,
)
from advisor.harness.measurement.seeded_cache import floor_index
from advisor.harness.measurement.timing import TimingPolicy
from advisor.harness.measurement.variant import Progress, measure_one, not_measured, skipped
from advisor.harness.sandbox import Cancel, Zygote


def measurement_zygote(
    device: str, readable: list[str | None] | tuple = (), *, inductor: bool = True, onnx: bool = False
) -> Zygote:
    """The zygote `measure_model` forks its children from; pass one in to share it with other children of
    the same job (e.g. inspection: one `import torch` per analysis instead of one per stage). Caller closes it.
    `readable`: the job's model (and inputs) file, the only files of the host its sandbox may read (besides
    Inductor's trusted precompiled headers, advisor.harness.inductor_headers, built on first use).
    `inductor`: whether a child may compile C++ kernels with Inductor. Only then does the zygote copy the trusted
    header in and run the CPU-feature probe (~3 s per job on 2 cores; ~5 s unconfined, where it builds the probe's
    test programs itself); a child that compiles anyway still works, it builds its own header and probes for itself.
    `onnx`: whether a child may export with torch.onnx (ONNX Runtime): the zygote then sets up the exporter's
    registry once (advisor.harness.backends.ort.prepare_exporter) instead of each exporting child."""
    from advisor.harness.inductor_headers import trusted_headers
    from advisor.harness.isolation import resolve_isolation

    isolation = resolve_isolation()
    headers = trusted_headers(isolation) if inductor else None
    return Zygote(
        PRELOAD,
        {"device": device, "trusted_headers": headers, "compiles_inductor": inductor, "exports_onnx": onnx},
        isolation=isolation,
        readable=[p for p in (*readable, headers) if p],
    )


# Tests only: a JSON object of TimingPolicy fields replacing the defaults when no `timing` is passed, so end-to-end
# tests (a real worker, the browser flow) time in short windows. Unset (always, for users): the defaults.
TIMING_ENV = "ADVISOR_TEST_TIMING_POLICY"


def default_timing() -> TimingPolicy:
    """TimingPolicy(), or the test override of TIMING_ENV (an unknown field is a TypeError, not ignored)."""
    override = os.environ.get(TIMING_ENV)
    return TimingPolicy(**json.loads(override)) if override else TimingPolicy()


def measure_model(
    path: str,
    *,
    backends: list[str] | None = None,
    device: str = "cpu",
    workload: str = DEFAULT_WORKLOAD,
    inputs_file: str | None = None,
    input_shapes: list[str] | None = None,
    progress: Progress | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_limit_mb: int | None = DEFAULT_MEMORY_LIMIT_MB,
    timing: TimingPolicy | None = None,
    cancel: Cancel = None,
    optimizer: str = DEFAULT_OPTIMIZER,
    zygote: Zygote | None = None,
    accuracy_tolerance: dict | None = None,
    remeasure: bool = True,
    remeasure_budget_s: float | None = None,
    keyword_inputs: Sequence[str] = (),
    plan_context: DeploymentContext | dict | None = None,
    inspection: dict | None = None,
    shape_sweep: dict | None = None,
    decode_tokens: int = DEFAULT_DECODE_TOKENS,
    calibration_file: str | None = None,
    on_ranked: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Measure `path` on `device`: a MeasurementRun (advisor.core.results' shape, a plain dict), a row per variant.

    Raises MeasureError for a bad model file / inputs / backend name, MeasurementCancelled when `cancel` fires.
    `timeout_s` and `memory_limit_mb` apply to each child separately. `workload="training"` times a training step
    (advisor.harness.training_step) with `optimizer` ("sgd" or "adamw"); `workload="generation"` a causal LM's prefill
    and decode phases (advisor.harness.measurement.generation) over `decode_tokens` greedy tokens. Eager comes first.
    `zygote`: a `measurement_zygote(device)` already started for this job (the caller closes it); None starts one.
    `accuracy_tolerance`: {"atol", "rtol"} (either may be None) replacing the dtype defaults of the accuracy check.
    `keyword_inputs`: the names of the inputs the model takes by keyword (the inspection's): each row's snippet then
    calls `model(*args, **kwargs)`, as the measurement did.
    `plan_context`: the deployment context (or its dict) the measurement is for, with the `inspection`:
    before each variant starts, one that no result of its own could make the recommendation for this context is
    not measured (advisor.core.decision.plan_pruning), nor one the inspection already rules out (an ONNX export of a
    graph calling a custom op the exporter cannot take: advisor.core.decision.cheap_evidence); its row says "skipped"
    and why. None: measure every variant.
    A variant named with its mode in `backends` ("inductor:max-autotune") is always measured.
    `shape_sweep`: advisor.core.shape_sweep.sweep_spec's points or ranges: each variant is also timed at those
    shapes (inference only; measurement.sweep), its row's `sweep` (a traffic plan's sizes: see `_plan_sweep`).
    `calibration_file`: the user's calibration .npz (advisor.core.calibration), read by the int8 variants' children.
    `on_ranked`: with a `plan_context` (inference), called with a copy of the run once its options are ranked, before
    the leading options' details are measured, so a caller can publish the recommendation early (`_with_details`).

    The run carries its `quality` (advisor.core.noise): when its timings say the machine was unquiet, the noisy rows
    are timed again (`remeasure`) in rounds within `remeasure_budget_s` (default REMEASURE_BUDGET_S; `_remeasure_noisy`)
    keeping each row's quietest timing; what is still noisy then is reported, and the whole analysis is marked
    `noisy`. The environment records the load before the run and during its timed windows.
    """
    load_start = noise.read_load()  # before any child of this run adds to it
    variants = _checked_variants(path, inputs_file, backends, device, workload, optimizer, plan_context)
    policy = asdict(timing or default_timing())
    notify = progress or (lambda event: None)
    files = [path, inputs_file, calibration_file]
    children_sandbox = _children_sandbox(zygote, device, files, variants, timeout_s, memory_limit_mb, cancel, notify)
    with children_sandbox as (sandbox, workdir):
        common = {
            "model_path": os.path.abspath(path),
            "device": device,
            "workload": workload,
            "inputs_file": _absolute(inputs_file),
            "input_shapes": input_shapes,
            "reference_path": str(workdir / "reference.pt"),
            "policy": policy,
            "optimizer": optimizer,
            "accuracy_tolerance": accuracy_tolerance,
            "sweep": None if _plan_sweep(shape_sweep, plan_context, workload) else shape_sweep,  # see _with_details
            "decode_tokens": decode_tokens,
            "calibration_file": _absolute(calibration_file),
        }
        call = snippets.call_for(keyword_inputs)  # how each row's snippet calls the model
        plan = _Plan(variants, backends or (), plan_context, inspection, device, workload, call)
        children = _Children(common, sandbox, workdir, policy, _plan_sweep(shape_sweep, plan_context, workload))
        rows, environment, baseline_failed = _measure_variants(plan, children, notify)
        run = {"environment": environment or _host_environment(device), "workload": workload, "measurements": rows}
        budget = (REMEASURE_BUDGET_S if remeasure_budget_s is None else remeasure_budget_s) if remeasure else None
        run["quality"] = _judged(run, load_start, baseline_failed, plan, budget, on_ranked, children)
        return run


def _plan_sweep(shape_sweep: dict | None, plan_context: DeploymentContext | dict | None, workload: str) -> dict | None:
    """A traffic sweep (advisor.core.shape_sweep.sweep_spec marks it) when the run is ranked for a context: it is
    timed after the ranking, for the recommendation and its closest rival only (measurement.details); else None."""
    ranked = _ranking_context(plan_context) is not None and workload == "inference"
    return shape_sweep if ranked and shape_sweep and shape_sweep.get("traffic") else None


def _checked_variants(
    path: str,
    inputs_file: str | None,
    backends: list[str] | None,
    device: str,
    workload: str,
    optimizer: str,
    plan_context: DeploymentContext | dict | None,
) -> list[tuple[str, str]]:
    """The (backend, mode) variants to measure, eager first, once the model file, inputs and workload are checked
    (MeasureError otherwise)."""
    check_model_file(path, inputs_file)
    variants = plan_variants(backends, device, quantize=quantizes_by_default(plan_context, workload))
    check_workload(workload, optimizer)
    return variants


def _judged(
    run: dict[str, Any],
    load_start: dict | None,
    baseline_failed: str | None,
    plan: _Plan,
    remeasure_budget_s: float | None,
    on_ranked: Callable[[dict[str, Any]], None] | None,
    children: _Children,
) -> dict:
    """The run's quality (MeasurementRun.quality: advisor.core.noise's verdict), after the rounds of re-measuring a
    noisy run (`remeasure_budget_s`; None: none) and the leading options' details. A failed baseline: neither."""
    quality = _assess(run, load_start)
    if baseline_failed:
        return quality
    if remeasure_budget_s is not None and quality["noisy"]:
        ranking_context = _ranking_context(plan.context)
        quality = _remeasure_noisy(
            run, quality, plan.variants, children, load_start, remeasure_budget_s, ranking_context
        )
    if gone := {noise.label(row): row["eliminated"] for row in run["measurements"] if row.get("eliminated")}:
        quality["eliminated"] = gone  # racing: the options no longer timed, and why (their rows say it too)
    return _with_details(run, quality, plan, on_ranked, children)


@contextmanager
def _children_sandbox(
    zygote: Zygote | None,
    device: str,
    files: list[str | None],
    variants: list[tuple[str, str]],
    timeout_s: float,
    memory_limit_mb: int | None,
    cancel: Cancel,
    notify: Progress,
) -> Iterator[tuple[dict[str, Any], Path]]:
    """How each child of the run is sandboxed (its limits, what it may read: the run's files, and write), and the
    run's work dir. The children fork from one zygote (one interpreter that has imported torch once; each child still
    gets its own process): the caller's (the work dir discarded after) or one started here (closed after)."""
    owns_zygote = zygote is None
    zygote = zygote or measurement_zygote(
        device, files, inductor=builds_inductor_cpp(variants), onnx=exports_onnx(variants)
    )
    # inside the zygote's sandbox (its size-capped /tmp) when isolated: the host never reads or writes there
    workdir = Path(zygote.new_path("measure"))
    sandbox = {
        "timeout_s": timeout_s,
        "memory_limit_mb": memory_limit_mb,
        "cancel": cancel,
        "on_progress": notify,
        "zygote": zygote,
        "readable": [os.path.abspath(p) for p in files if p],
        "writable": [str(workdir)],
    }
    try:
        yield sandbox, workdir
    finally:
        if owns_zygote:
            zygote.close()
        else:
            zygote.discard(str(workdir))


def _assess(run: dict[str, Any], load_start: dict | None) -> dict:
    """The run's load stamped on its environment, and advisor.core.noise's verdict on its timings."""
    _stamp_load(run, load_start)
    return noise.assess(run, load={"start": load_start, "end": noise.read_load(noise.RUNNABLE_SAMPLES)})


def _with_details(
    run: dict[str, Any],
    quality: dict,
    plan: _Plan,
    on_ranked: Callable[[dict[str, Any]], None] | None,
    children: _Children,
) -> dict:
    """With a deployment context (inference): the ranked run published, then the leading options' details measured
    (advisor.harness.measurement.details); the quality with what `details` says. Without one, the quality as it is.

    `on_ranked` is called with a copy of the run once its options are ranked and before the details are measured,
    when there are any: the recommendation is known then, and the details do not change it, so a caller can publish
    it early. Its quality's `details` says which options' details are still to come (`pending`). A callback that
    raises is logged and the measurement goes on: publishing early is a courtesy, the run is the result."""
    ranked_for = _ranking_context(plan.context)
    if ranked_for is None or plan.workload != "inference":
        return quality
    run["quality"] = quality  # the ranking reads it
    wanted = detailed_options(ranked_for, plan.inspection, run)
    plan_sweep = None
    if children.plan_sweep is not None:  # the traffic's plan sizes: the recommendation and its closest rival
        swept = plan_swept_options(ranked_for, plan.inspection, run)
        wanted, plan_sweep = list(dict.fromkeys(wanted + swept)), (children.plan_sweep, swept)
    if on_ranked is not None and wanted:
        publish_ranked(on_ranked, {**run, "quality": {**quality, "details": details_to_come(wanted)}})
    details = measure_leading_details(
        wanted, run, plan.variants, children.common, children.sandbox, children.workdir, children.policy, plan_sweep
    )
    return {**quality, "details": details}


def _absolute(path: str | None) -> str | None:
    return os.path.abspath(path) if path else None


@dataclass(frozen=True)
class _Children:
    """How the run starts each child: the arguments every child gets (`common`), their sandbox, the run's work dir
    (the reference, each variant's compile cache) and the timing policy."""

    common: dict
    sandbox: dict
    workdir: Path
    policy: dict
    plan_sweep: dict | None = None  # a traffic sweep, timed in the plan's options' details children (_plan_sweep)


@dataclass(frozen=True)
class _Plan:
    """What `measure_model` measures and for which context (the pruning before each variant)."""

    variants: list[tuple[str, str]]
    asked: Sequence[str]  # the backends as named: a variant named with its mode is always measured
    context: DeploymentContext | dict | None
    inspection: dict | None
    device: str
    workload: str
    call: str


def _measure_variants(
    plan: _Plan, children: _Children, notify: Progress
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, str | None]:
    """Each variant's row in order, eager first: measured, skipped (pruned for the context) or, once the eager
    baseline failed, not measured; the first child's environment; why the baseline failed (None when it did not)."""
    environment: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = []
    baseline_failed: str | None = None
    device, workload, call = plan.device, plan.workload, plan.call
    for index, (spec, mode) in enumerate(plan.variants):
        if baseline_failed:
            rows.append(not_measured(spec, mode, device, workload, baseline_failed, call))
            continue
        context = None if f"{spec}:{mode}" in plan.asked else plan.context
        skip = _skip_reason(context, plan.inspection, environment, workload, rows, spec, mode, index)
        if skip is not None:
            rows.append(skipped(spec, mode, device, workload, skip, call))
            notify({"backend": rows[-1]["backend"], "mode": mode, "stage": "skipped", "reason": skip})
            continue
        cache_dir = children.workdir / f"cache-{index}"
        first = first_pass_policy(_ranking_context(plan.context), workload, children.policy, index == 0)
        bound = _race_bound(plan, context, environment, rows, index)
        if bound is not None:
            first = {**first, "race_below": bound.speedup_low, "race_above": bound.field_high}
        floor = floor_index(spec, mode, rows)  # its compile starts from the kernels its floor mode built (seeded_cache)
        seed = None if floor is None else (children.workdir / f"cache-{floor}", rows[floor])
        row, env = measure_one(
            spec, mode, index == 0, children.common, children.sandbox, cache_dir, first, call=call, seed=seed
        )
        environment = environment or env
        if row.pop("raced", False) and bound is not None:
            row["eliminated"] = _raced_reason(row, bound)
        if row.pop("ahead", False) and bound is not None:
            row["stopped_ahead"] = bound.ahead_reason(row)
        rows.append(row)
        if index == 0 and row["status"] != "ok":
            baseline_failed = f"not measured: the eager baseline failed ({row['status']}: {row['reason']})"
    return rows, environment, baseline_failed


def builds_inductor_cpp(variants: Sequence[tuple[str, str]]) -> bool:
    """Whether any of these (backend, mode) variants may compile C++ kernels with Inductor (a plugin backend may)."""
    from advisor.core.catalogue import may_build_inductor_cpp

    return any(may_build_inductor_cpp(name) for name, _ in variants)


def exports_onnx(variants: Sequence[tuple[str, str]]) -> bool:
    """Whether any of these (backend, mode) variants exports the model with torch.onnx (ONNX Runtime's modes)."""
    return any(name == "onnxruntime" for name, _ in variants)


def _race_bound(
    plan: _Plan,
    context: DeploymentContext | dict | None,
    environment: dict[str, Any] | None,
    rows: list[dict[str, Any]],
    index: int,
) -> RaceBound | None:
    """What this variant's first window races against (advisor.core.decision.racing): the leader so far, where
    the steady-state speed decides the context; None: its window runs in full (the baseline, a variant asked for by
    its mode, a context where the compile time may decide)."""
    ranked_for = _ranking_context(context)
    if index == 0 or environment is None or ranked_for is None or not racing.races(ranked_for, plan.workload):
        return None
    return racing.race_bound({"environment": environment, "workload": plan.workload, "measurements": rows}, ranked_for)


def _raced_reason(row: dict[str, Any], bound: RaceBound) -> str:
    """Why a first window stopped early: its accuracy failed, or it was clearly behind the leader."""
    if (row.get("accuracy") or {}).get("passed") is False:
        return racing.ACCURACY_FAILED
    return bound.reason(row)


def _skip_reason(
    context: DeploymentContext | dict | None,
    inspection: dict | None,
    environment: dict[str, Any] | None,
    workload: str,
    rows: list[dict[str, Any]],
    spec: str,
    mode: str,
    index: int,
) -> str | None:
    """Why this variant need not be measured for `context`, or None: the inspection already rules it out
    (advisor.core.decision.cheap_evidence), or no result of its own could change the recommendation
    (advisor.core.decision.plan_pruning). No context (none given, or the variant asked for by its mode): measured."""
    if context is None or index == 0:
        return None
    from advisor.core.decision import cheap_evidence

    if (ruled_out := cheap_evidence.skip_reason(inspection, spec, mode)) is not None:
        return ruled_out
    if environment is None:
        return None
    from advisor.core.decision.plan_pruning import skip_reason

    so_far = {"environment": environment, "workload": workload, "measurements": rows}
    return skip_reason(context, inspection, so_far, spec, mode)


# ------------------------------------------------------------------ noise: one more timing of the noisy rows
# the kept timing's own fields: its phases (generation), shapes (sweep) and profile come from the same child
_TIMING_FIELDS = (
    "latency",
    "eager_latency",
    "speedup_vs_eager",
    "speedup_ci",
    "throughput",
    "generation",
    "sweep",
    "time_breakdown",
)


REMEASURE_BUDGET_S = 120.0  # seconds of re-measuring children a noisy run may spend on more rounds (quality records it)
REMEASURE_MAX_ROUNDS = 3
_ORDINALS = ("first", "second", "third", "fourth", "later")  # which timing of a row was kept


def _remeasure_noisy(
    run: dict[str, Any],
    quality: dict,
    variants: list[tuple[str, str]],
    children: _Children,
    load_start: dict | None,
    budget_s: float = REMEASURE_BUDGET_S,
    ranking_context: DeploymentContext | None = None,
) -> dict:
    """Rounds of re-measuring: each times the rows still noisy (and those whose eager saw a different machine) once
    more, each in a fresh child with its own warm compile cache, and keeps the quieter timing of each row
    (`_noise_score`); the kept window is named in the row's `latency_window`. Compile times, accuracy and memory
    stay the first child's (a second compile would be a warm one). Another round follows while the run is still
    noisy and its leading options are unranked (advisor.core.decision.rules.leading_ranking: "inconclusive between X
    and Y"), at most REMEASURE_MAX_ROUNDS, only while noise.still_busy says the machine is not busy, and only
    when the round just done fits once more into what is left of `budget_s` (seconds of re-measuring children, wall
    time). When only some rows were noisy (not the whole run) and the leading options are already ranked, the first
    round times only the noisy rows the choice rests on (rules.deciding_labels; none: no round). The quality records
    rounds, remeasure_budget_s, remeasure_spent_s, the ranking and why it stopped."""
    from advisor.core.decision.rules import leading_ranking

    quality["remeasure_budget_s"] = budget_s
    if busy := noise.still_busy((quality.get("load") or {}).get("end")):
        quality["remeasured"], quality["rounds"], quality["remeasure_spent_s"] = [], 0, 0.0
        quality["not_remeasured"] = f"the machine is still busy ({busy}): timing again now would not help"
        return quality
    remeasured: list[str] = []
    kept: dict[str, str] = {}
    spent, rounds, stopped = 0.0, 0, None
    ranking: dict = leading_ranking(dict(run), ranking_context)  # type: ignore[arg-type]
    while True:
        wanted = _still_racing(run, _rows_to_time_again(run, quality, ranking, rounds), ranking_context)
        if not wanted and ranking["resolved"]:
            stopped = (
                f"the leading options are ranked ({ranking['text']}); the noisy rows are beaten beyond their "
                "noise: timing them again could not change the choice"
            )
            break
        round_s = _time_again(run, wanted, variants, children, ranking_context, rounds, remeasured, kept)
        rounds += 1
        spent += round_s
        quality = _assess(run, load_start)
        ranking = leading_ranking(dict(run), ranking_context)  # type: ignore[arg-type]
        stopped = _why_rounds_stop(quality, ranking, rounds, spent + round_s > budget_s, budget_s, spent)
        if stopped:
            break
    quality.update(
        remeasured=remeasured,
        kept=kept,
        rounds=rounds,
        remeasure_budget_s=budget_s,
        remeasure_spent_s=round(spent, 3),
        ranking={**ranking, "stopped": stopped},
    )
    return quality


def _time_again(
    run: dict[str, Any],
    wanted: set[str],
    variants: list[tuple[str, str]],
    children: _Children,
    ranking_context: DeploymentContext | None,
    rounds: int,
    remeasured: list[str],
    kept: dict[str, str],
) -> float:
    """One round of `_remeasure_noisy`: each `wanted` row timed once more in a fresh child, its quieter timing kept
    (`remeasured` and `kept` updated); returns the round's wall time in seconds."""
    rows = run["measurements"]
    middle = _middle_eager_ms(run)
    workload = children.common["workload"]
    round_s = 0.0
    for index, (spec, mode) in enumerate(variants):
        row = rows[index]
        name = noise.label(row)
        if name not in wanted or row["status"] not in ("ok", "fail_accuracy"):
            continue
        first = first_pass_policy(ranking_context, workload, children.policy, index == 0)
        again, _ = measure_one(
            spec,
            mode,
            index == 0,
            {**children.common, "reference_exists": True},  # the baseline's first child wrote it: not computed again
            children.sandbox,
            children.workdir / f"cache-{index}",
            {**first, "warm_cache": False, "dynamic_sizes": 0},
            stage="re-measure",
        )
        if name not in remeasured:
            remeasured.append(name)
        row["wall_s"] += again["wall_s"]
        round_s += again["wall_s"]
        if again["status"] == row["status"] and _noise_score(again, middle) < _noise_score(row, middle):
            for key in _TIMING_FIELDS:
                row[key] = again.get(key)  # type: ignore[literal-required]
            row["latency_window"] = noise.REMEASURED_WINDOW
            kept[name] = _ORDINALS[min(rounds + 1, len(_ORDINALS) - 1)]  # "second": the first re-measure
        else:
            kept.setdefault(name, "first")
    return round_s


def _rows_to_time_again(run: dict[str, Any], quality: dict, ranking: dict, rounds: int) -> set[str]:
    """The labels the next round times: first the noisy rows and eager's outliers, and when only some rows were noisy
    (not the whole run) and the choice is already clear, only those of them it rests on (rules.deciding_labels);
    later rounds settle the ranking: the two leading options, and eager where its timing is off."""
    wanted = set(quality["noisy_rows"]) | set(noise.eager_outliers(run))
    if rounds:
        eager = {noise.label(run["measurements"][0])} | set(noise.eager_outliers(run))
        return set(ranking["leading"]) | (wanted & eager)
    if ranking["resolved"] and not quality["whole_run"]:
        return wanted & set(ranking["deciding"])
    return wanted


def _still_racing(run: dict[str, Any], wanted: set[str], context: DeploymentContext | None) -> set[str]:
    """Racing in the rounds: of the `wanted` rows, those still in the race. A row a stated rule rules out
    (advisor.core.decision.racing.eliminations: a filter of the context, or clearly behind an option the choice
    rests on) is not timed again; its row says why (`eliminated`)."""
    out = racing.eliminations(run, context)
    for row in run["measurements"]:
        name = noise.label(row)
        if name in wanted and name in out:
            row["eliminated"] = f"not timed again: {out[name].reason}"
    return {name for name in wanted if name not in out}


def _why_rounds_stop(
    quality: dict, ranking: dict, rounds: int, over_budget: bool, budget_s: float, spent: float
) -> str | None:
    """Why no further round runs after the one just done (None: another one does)."""
    if not quality["noisy"]:
        return "the run is no longer noisy"
    if ranking["resolved"]:
        return f"the leading options are ranked ({ranking['text']})"
    if rounds >= REMEASURE_MAX_ROUNDS:
        return f"{REMEASURE_MAX_ROUNDS} rounds done, still {ranking['text']}"
    if over_budget:
        return f"another round would exceed the {budget_s:g} s budget ({spent:.3g} s spent), still {ranking['text']}"
    if busy := noise.still_busy((quality.get("load") or {}).get("end")):
        return f"the machine is busy ({busy}), still {ranking['text']}"
    return None


def _ranking_context(plan_context: DeploymentContext | dict | None) -> DeploymentContext | None:
    """The deployment context the leading options are ranked for (None: the run's device with the defaults)."""
    if plan_context is None or isinstance(plan_context, DeploymentContext):
        return plan_context
    from advisor.core.context import ContextError, parse_context

    try:
        return parse_context(plan_context)
    except ContextError:
        return None


def _stamp_load(run: dict[str, Any], load_start: dict | None) -> None:
    """environment.load: before the run, the highest reading at the start or end of any timed window (`during`)."""
    readings = [
        reading
        for row in run["measurements"]
        for reading in ((row.get("timing_load") or {}).get("start"), (row.get("timing_load") or {}).get("end"))
        if reading and reading.get("load") is not None and reading.get("cores")
    ]
    during = max(readings, key=lambda r: r["load"] / r["cores"]) if readings else None
    run["environment"]["load"] = {"before": load_start, "during": during}


def _middle_eager_ms(run: dict[str, Any]) -> float | None:
    values = sorted(noise.eager_medians(run).values())
    return values[(len(values) - 1) // 2] if values else None


def _noise_score(row: dict[str, Any], middle_eager_ms: float | None) -> tuple[int, float]:
    """Lower is quieter: how many pieces of noise evidence (advisor.core.noise.row_noise, plus an eager median off the
    run's middle one), then how wide the interval is."""
    evidence = len(noise.row_noise(row))
    eager = (row.get("eager_latency") or row.get("latency") or {}).get("median_ms")
    if (
        middle_eager_ms
        and eager
        and max(eager / middle_eager_ms, middle_eager_ms / eager) > noise.EAGER_DRIFT_MAX_RATIO
    ):
        evidence += 1
    ratio = noise.row_interval_ratio(row)
    if ratio is None:  # eager: its own relative CI width
        latency = row.get("latency") or {}
        ratio = noise.ci_ratio([latency.get("ci_low_ms"), latency.get("ci_high_ms")])
    return evidence, ratio if ratio is not None else float("inf")


def _host_environment(device: str) -> dict[str, Any]:
    import platform

    return {
        "device": device,
        "python_version": platform.python_version(),
        "host": socket.gethostname(),  # type: ignore
        "measured_on": "not-measured",
    }
