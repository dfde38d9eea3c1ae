"""Measure a model under every requested (backend, mode): one sandboxed child each, eager first.

The eager child is the baseline row and writes the reference (inputs, eager float32 output,
float64 reference) that every other child compares against. Each other variant runs cold
(empty compile cache) and, when that worked, warm (a second child, same cache dir); in both,
eager is timed interleaved with the compiled callable so speedups are side by side. A failure
of any kind becomes that row's status. This module does not import torch (the children do).
The children are forked from one `Zygote` that imported torch, Dynamo and Inductor once (each child is
still a fresh process with its own cache dir, limits and scrubbed environment): ~3 s less per child.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from advisor.core import noise
from advisor.core.schema import Environment, Measurement, MeasurementRun
from advisor.harness.measure_child import TimingPolicy
from advisor.harness.sandbox import Cancel, SandboxResult, Zygote, run_in_sandbox

__all__ = [
    "MeasureError",
    "MeasurementCancelled",
    "TimingPolicy",
    "measure_model",
    "measurement_zygote",
    "plan_variants",
]

# Tests only: a JSON object of TimingPolicy fields replacing the defaults when no `timing` is passed, so end-to-end
# tests (a real worker, the browser flow) time in short windows. Unset (always, for users): the defaults.
TIMING_ENV = "ADVISOR_TEST_TIMING_POLICY"
DEFAULT_TIMEOUT_S = 900.0
DEFAULT_MEMORY_LIMIT_MB = 16384
_CHILD = "advisor.harness.measure_child:measure_variant"
_PRELOAD = "advisor.harness.measure_child:preload"

Progress = Callable[[dict], None]


class MeasureError(RuntimeError):
    """The measurement could not start (bad model file, unknown backend, ...); `str()` is the user message."""


class MeasurementCancelled(RuntimeError):
    """The caller's cancel signal stopped the measurement; the running child was killed."""


def measurement_zygote(device: str, readable: list[str | None] | tuple = ()) -> Zygote:
    """The zygote `measure_model` forks its children from; pass one in to share it with other children of
    the same job (e.g. inspection: one `import torch` per analysis instead of one per stage). Caller closes it.
    `readable`: the job's model (and inputs) file, the only files of the host its sandbox may read (besides
    Inductor's trusted precompiled headers, advisor.harness.inductor_headers, built on first use)."""
    from advisor.harness.inductor_headers import trusted_headers
    from advisor.harness.isolation import resolve_isolation

    isolation = resolve_isolation()
    headers = trusted_headers(isolation)
    return Zygote(
        _PRELOAD,
        {"device": device, "trusted_headers": headers},
        isolation=isolation,
        readable=[p for p in (*readable, headers) if p],
    )


def plan_variants(backends: list[str] | None, device: str) -> list[tuple[str, str]]:
    """(backend spec, mode) pairs to measure, eager first. "name" means all its modes on `device`."""
    from advisor.harness.backends import UnknownBackend, all_backends, get_backend, split_backend_spec

    try:
        specs = [b.name for b in all_backends()] if not backends else list(backends)
        variants: list[tuple[str, str]] = [("eager", "default")]
        for spec in specs:
            name, mode = split_backend_spec(spec)
            backend = get_backend(name)
            if backend.name == "eager":
                continue
            if mode is not None and mode not in backend.modes:
                raise MeasureError(f"{backend.name} has no mode '{mode}'; modes: {', '.join(backend.modes)}")
            modes = [mode] if mode else list(backend.modes_for(device) or backend.modes[:1])
            variants.extend((name, m) for m in modes if (name, m) not in variants)
        return variants
    except UnknownBackend as exc:
        raise MeasureError(str(exc)) from exc


def measure_model(
    path: str,
    *,
    backends: list[str] | None = None,
    device: str = "cpu",
    workload: str = "inference",
    inputs_file: str | None = None,
    input_shapes: list[str] | None = None,
    progress: Progress | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_limit_mb: int | None = DEFAULT_MEMORY_LIMIT_MB,
    timing: TimingPolicy | None = None,
    cancel: Cancel = None,
    optimizer: str = "sgd",
    zygote: Zygote | None = None,
    accuracy_tolerance: dict | None = None,
    remeasure: bool = True,
) -> MeasurementRun:
    """Measure `path` on `device`; returns one Measurement per (backend, mode), eager included.

    Raises MeasureError for a bad model file / inputs / backend name, MeasurementCancelled when
    `cancel` fires. `timeout_s` and `memory_limit_mb` apply to each child separately.
    `workload="training"` times a training step (advisor.harness.training_step) with `optimizer` ("sgd" or "adamw").
    `zygote`: a `measurement_zygote(device)` already started for this job (the caller closes it); None starts one.
    `accuracy_tolerance`: {"atol", "rtol"} (either may be None) replacing the dtype defaults of the accuracy check.

    The run carries its `quality` (advisor.core.noise): when its timings say the machine was unquiet (eager drifting
    between processes, interleaved blocks disagreeing, a too-wide speedup CI), the noisy rows are timed once more
    (`remeasure`; at most once, and not while the load average says the machine is still busy) and the quieter of
    the two timings is kept; what is still noisy then is reported, and the whole analysis is marked `noisy`.
    """
    load_start = noise.read_load()  # before any child of this run adds to it
    _check_model_file(path, inputs_file)
    variants = plan_variants(backends, device)
    _check_workload(workload, optimizer)
    policy = asdict(timing or _default_timing())
    notify = progress or (lambda event: None)
    # the children fork from one interpreter that has imported torch once (each still gets its own process)
    owns_zygote = zygote is None
    zygote = zygote or measurement_zygote(device, [path, inputs_file])
    workdir = Path(tempfile.mkdtemp(prefix="advisor-measure-", dir=zygote.scratch))
    common = {
        "model_path": os.path.abspath(path),
        "device": device,
        "workload": workload,
        "inputs_file": os.path.abspath(inputs_file) if inputs_file else None,
        "input_shapes": input_shapes,
        "reference_path": str(workdir / "reference.pt"),
        "policy": policy,
        "optimizer": optimizer,
        "accuracy_tolerance": accuracy_tolerance,
    }
    readable = [os.path.abspath(p) for p in (path, inputs_file) if p]
    sandbox = {
        "timeout_s": timeout_s,
        "memory_limit_mb": memory_limit_mb,
        "cancel": cancel,
        "on_progress": notify,
        "zygote": zygote,
        "readable": readable,
        "writable": [str(workdir)],
    }
    try:
        environment: Environment | None = None
        rows: list[Measurement] = []
        baseline_failed: str | None = None
        for index, (spec, mode) in enumerate(variants):
            if baseline_failed:
                rows.append(_not_measured(spec, mode, device, workload, baseline_failed))
                continue
            row, env = _measure_one(spec, mode, index == 0, common, sandbox, workdir / f"cache-{index}", policy)
            environment = environment or env
            rows.append(row)
            if index == 0 and row["status"] != "ok":
                baseline_failed = f"not measured: the eager baseline failed ({row['status']}: {row['reason']})"
        run = MeasurementRun(environment=environment or _host_environment(device), workload=workload, measurements=rows)
        quality = noise.assess(run, load={"start": load_start, "end": noise.read_load()})
        if remeasure and quality["noisy"] and not baseline_failed:
            quality = _remeasure_noisy(run, quality, variants, common, sandbox, workdir, policy, load_start)
        run["quality"] = quality  # type: ignore[typeddict-unknown-key]  # schema: MeasurementRun.quality
        return run
    finally:
        if owns_zygote:
            zygote.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _default_timing() -> TimingPolicy:
    """TimingPolicy(), or the test override of TIMING_ENV (an unknown field is a TypeError, not ignored)."""
    import json

    override = os.environ.get(TIMING_ENV)
    return TimingPolicy(**json.loads(override)) if override else TimingPolicy()


# ------------------------------------------------------------------ noise: one more timing of the noisy rows
_TIMING_FIELDS = ("latency", "eager_latency", "speedup_vs_eager", "speedup_ci", "throughput")


def _remeasure_noisy(
    run: MeasurementRun,
    quality: dict,
    variants: list[tuple[str, str]],
    common: dict,
    sandbox: dict,
    workdir: Path,
    policy: dict,
    load_start: dict | None,
) -> dict:
    """Time the noisy rows (and those whose eager saw a different machine) once more, each in a fresh child with
    its own warm compile cache; keep the quieter timing of the two (`_noise_score`). Compile times, accuracy and
    memory stay the first child's (a second compile would be a warm one). Returns the quality after."""
    if noise.busy_now((quality.get("load") or {}).get("end")):
        quality["remeasured"] = []
        quality["not_remeasured"] = "the load average says the machine is still busy: timing again now would not help"
        return quality
    rows = run["measurements"]
    middle = _middle_eager_ms(run)
    wanted = set(quality["noisy_rows"]) | set(noise.eager_outliers(run))
    again_policy = {**policy, "warm_cache": False, "dynamic_sizes": 0}
    remeasured, kept = [], {}
    for index, (spec, mode) in enumerate(variants):
        row = rows[index]
        name = noise.label(row)
        if name not in wanted or row["status"] not in ("ok", "fail_accuracy"):
            continue
        again, _ = _measure_one(
            spec, mode, index == 0, common, sandbox, workdir / f"cache-{index}", again_policy, stage="re-measure"
        )
        remeasured.append(name)
        if again["status"] == row["status"] and _noise_score(again, middle) < _noise_score(row, middle):
            for key in _TIMING_FIELDS:
                row[key] = again.get(key)  # type: ignore[literal-required]
            row["wall_s"] += again["wall_s"]
            kept[name] = "second"
        else:
            row["wall_s"] += again["wall_s"]
            kept[name] = "first"
    after = noise.assess(run, load={"start": load_start, "end": noise.read_load()})
    after["remeasured"] = remeasured
    after["kept"] = kept
    return after


def _middle_eager_ms(run: MeasurementRun) -> float | None:
    values = sorted(noise.eager_medians(run).values())
    return values[(len(values) - 1) // 2] if values else None


def _noise_score(row: Measurement, middle_eager_ms: float | None) -> tuple[int, float]:
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


# ------------------------------------------------------------------ one variant
def _measure_one(
    spec: str,
    mode: str,
    is_baseline: bool,
    common: dict,
    sandbox: dict,
    cache_dir: Path,
    policy: dict,
    stage: str = "cold",
) -> tuple[Measurement, Environment | None]:
    from advisor.harness.backends import CompileRequest, get_backend

    backend = get_backend(spec)
    request = CompileRequest(mode=mode, device=common["device"], workload=common["workload"], cache_dir=str(cache_dir))
    row = _empty_row(backend, mode, common["device"], common["workload"], backend.snippet_for(request))
    notify = sandbox["on_progress"]
    notify({"backend": backend.name, "mode": mode, "stage": "starting", "iterations": 0})
    if common["device"] not in backend.devices:
        row.update(status="unavailable", reason=f"{backend.name} runs on {', '.join(backend.devices)} only")
        return _finish(row, notify, 0.0), None
    extra_env = backend.environment(request)
    kwargs = {**common, "backend_spec": spec, "mode": mode, "is_baseline": is_baseline}
    cold = _run_child(kwargs, sandbox, cache_dir, extra_env, f"{backend.name}:{mode} ({stage})")
    value = cold.value if cold.status == "ok" else None
    if value is not None and value.get("status") == "load_error":
        raise MeasureError(value["reason"])
    if value is None or value["status"] not in ("ok", "fail_accuracy"):
        row.update(
            status=cold.status if value is None else value["status"],
            reason=cold.reason if value is None else value.get("reason"),
            stderr_tail=cold.stderr_tail if value is None else None,
        )
        return _finish(row, notify, cold.wall_s), (value or {}).get("environment")
    _fill_from_child(row, value, is_baseline)
    wall_s, timed_s = cold.wall_s, value.get("timed_s") or 0.0
    if not is_baseline and policy["warm_cache"]:
        warm_policy = {
            **policy,
            "min_time_s": min(policy["min_time_s"], 0.2),
            "max_time_s": min(policy["max_time_s"], 1.0),
            "dynamic_sizes": 0,
        }
        warm = _run_child(
            {**kwargs, "policy": warm_policy, "warm_run": True},
            sandbox,
            cache_dir,
            extra_env,
            f"{backend.name}:{mode} (warm cache)",
        )
        wall_s += warm.wall_s
        timed_s += (warm.value or {}).get("timed_s") or 0.0
        if warm.status == "ok" and warm.value.get("first_call_s") is not None:
            row["compile_s_warm"] = max(0.0, warm.value["first_call_s"] - warm.value["latency"]["median_ms"] / 1e3)
    return _finish(row, notify, wall_s, timed_s), value.get("environment")


def _run_child(kwargs: dict, sandbox: dict, cache_dir: Path, extra_env: dict, stage: str) -> SandboxResult:
    cache_dir.mkdir(parents=True, exist_ok=True)
    result = run_in_sandbox(_CHILD, kwargs, cache_dir=str(cache_dir), stage=stage, extra_env=extra_env, **sandbox)
    if result.status == "cancelled":
        raise MeasurementCancelled(result.reason or "cancelled")
    return result


def _fill_from_child(row: Measurement, value: dict, is_baseline: bool) -> None:
    latency = value["latency"]
    compile_s = 0.0 if is_baseline else max(0.0, value["first_call_s"] - latency["median_ms"] / 1e3)
    row.update(
        status=value["status"],
        reason=value.get("reason"),
        compile_s_cold=compile_s,
        compile_s_warm=0.0 if is_baseline else None,
        latency=latency,
        eager_latency=value["eager_latency"],
        speedup_vs_eager=value["speedup_vs_eager"],
        speedup_ci=value["speedup_ci"],
        peak_memory_mb=value["peak_memory_mb"],
        memory_kind=value["memory_kind"],
        accuracy=value["accuracy"],
        graph_count=value.get("graph_count"),
        graph_breaks=value.get("graph_breaks"),
        recompiles=value.get("recompiles"),
        throughput=value.get("throughput"),
        dynamic=value.get("dynamic"),
        compile_breakdown=value.get("compile_breakdown"),
    )
    if value.get("training"):
        row["training"] = value["training"]  # type: ignore[typeddict-unknown-key]
    determinism = value.get("determinism") or {}
    notes = []
    if determinism and not determinism.get("deterministic", True):
        notes.append(f"two eager runs differ by up to {determinism['max_abs_diff']:.3g}: the model is nondeterministic")
    if determinism.get("fp64_note"):
        notes.append(determinism["fp64_note"])
    if notes and row["accuracy"] is not None:
        row["accuracy"]["reason"] = "; ".join(notes)


def _empty_row(backend: Any, mode: str, device: str, workload: str, snippet: str) -> Measurement:
    return Measurement(
        backend=backend.name,
        mode=mode,
        family=backend.family,
        device=device,  # type: ignore[typeddict-item]
        workload=workload,
        status="unavailable",
        reason=None,
        stderr_tail=None,
        compile_s_cold=None,
        compile_s_warm=None,
        latency=None,
        eager_latency=None,
        speedup_vs_eager=None,
        speedup_ci=None,
        peak_memory_mb=None,
        memory_kind=None,
        accuracy=None,
        graph_count=None,
        graph_breaks=None,
        recompiles=None,
        throughput=None,
        dynamic=None,
        compile_breakdown=None,
        wall_s=0.0,
        snippet=snippet,
    )


def _finish(row: Measurement, notify: Progress, wall_s: float, timed_s: float | None = None) -> Measurement:
    """Stamp the wall time and announce the row; `timed_s` (seconds spent in timed windows) goes only to progress."""
    row["wall_s"] = wall_s
    notify(
        {
            "backend": row["backend"],
            "mode": row["mode"],
            "stage": "done",
            "status": row["status"],
            "iterations": (row.get("latency") or {}).get("n", 0),
            "timed_s": timed_s,
        }
    )
    return row


def _not_measured(spec: str, mode: str, device: str, workload: str, reason: str) -> Measurement:
    from advisor.harness.backends import CompileRequest, get_backend

    backend = get_backend(spec)
    snippet = backend.snippet_for(CompileRequest(mode=mode, device=device, workload=workload))
    row = _empty_row(backend, mode, device, workload, snippet)
    row["reason"] = reason
    return row


# ------------------------------------------------------------------ checks and environment
def _check_workload(workload: str, optimizer: str) -> None:
    from advisor.harness.training_step import OPTIMIZERS

    if workload not in ("inference", "training"):
        raise MeasureError(f"unknown workload '{workload}' (inference or training)")
    if optimizer not in OPTIMIZERS:
        raise MeasureError(f"unknown optimizer '{optimizer}' ({' or '.join(OPTIMIZERS)})")


def _check_model_file(path: str, inputs_file: str | None) -> None:
    """Fail fast, before any child starts, with the specific message for a missing or unusable file."""
    if not os.path.isfile(path):
        raise MeasureError(f"model file not found: {path}")
    if inputs_file is not None and not os.path.isfile(inputs_file):
        raise MeasureError(f"inputs file not found: {inputs_file}")
    try:
        from advisor.core.artifacts import ArtifactRejected, sniff
    except ImportError:  # artifact sniffing not installed: the child's loader reports instead
        return
    try:
        sniff(path)
    except ArtifactRejected as exc:
        raise MeasureError(str(exc)) from exc


def _host_environment(device: str) -> Environment:
    import platform

    return Environment(
        device=device,
        python_version=platform.python_version(),
        host=socket.gethostname(),  # type: ignore
        measured_on="not-measured",
    )
