"""One variant from the parent's side: start its child, turn what the child returns (or how it died) into a row."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from advisor.core.noise import FIRST_WINDOW
from advisor.core.snippets import POSITIONAL_CALL
from advisor.harness.measurement.plan import CHILD, MeasureError, MeasurementCancelled
from advisor.harness.measurement.seeded_cache import state_seeded_compile
from advisor.harness.sandbox import SandboxResult, run_in_sandbox

Progress = Callable[[dict], None]


# ------------------------------------------------------------------ one variant
def measure_one(
    spec: str,
    mode: str,
    is_baseline: bool,
    common: dict,
    sandbox: dict,
    cache_dir: Path,
    policy: dict,
    stage: str = "cold",
    call: str = POSITIONAL_CALL,
    seed: tuple[Path, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The variant's row from its first child (and its warm-cache child when the policy asks for the warm compile).
    `seed`: (the cache directory, the row) of the mode this one compiles first in the same job (seeded_cache): the
    first child starts from a copy of that cache and the row states its cold compile as an upper bound."""
    from advisor.harness.backends import CompileRequest, get_backend

    backend = get_backend(spec)
    request = CompileRequest(
        mode=mode, device=common["device"], workload=common["workload"], cache_dir=str(cache_dir), call=call
    )
    row = _empty_row(backend, mode, common["device"], common["workload"], backend.snippet_for(request))
    notify = sandbox["on_progress"]
    notify({"backend": backend.name, "mode": mode, "stage": "starting", "iterations": 0})
    if common["device"] not in backend.devices:
        row.update(status="unavailable", reason=f"{backend.name} runs on {', '.join(backend.devices)} only")
        return _finish(row, notify, 0.0), None
    extra_env = backend.environment(request)
    kwargs = {**common, "backend_spec": spec, "mode": mode, "is_baseline": is_baseline, "policy": policy}
    seeded = {"seed_cache_from": str(seed[0])} if seed else {}
    cold = _run_child({**kwargs, **seeded}, sandbox, cache_dir, extra_env, f"{backend.name}:{mode} ({stage})")
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
    if seed:
        state_seeded_compile(row, seed[1], value.get("files_seeded"))
    wall_s, timed_s = cold.wall_s, value.get("timed_s") or 0.0
    if not is_baseline and policy["warm_cache"]:
        warm_s, warm_timed_s = _measure_warm_compile(row, kwargs, sandbox, cache_dir, extra_env)
        wall_s, timed_s = wall_s + warm_s, timed_s + warm_timed_s
    return _finish(row, notify, wall_s, timed_s), value.get("environment")


def _measure_warm_compile(
    row: dict[str, Any], kwargs: dict, sandbox: dict, cache_dir: Path, extra_env: dict
) -> tuple[float, float]:
    """The warm-cache child: it compiles again from the cache and calls once; an inference or training child times
    nothing more (its compile is its first call minus this row's median latency); a generation child times one
    short window per phase, as each phase's compile is its own first call minus its own median. Sets the row's
    `compile_s_warm`; returns the child's (wall seconds, timed seconds)."""
    policy = kwargs["policy"]
    warm_policy = {
        **policy,
        "min_time_s": min(policy["min_time_s"], 0.2),
        "max_time_s": min(policy["max_time_s"], 1.0),
        "dynamic_sizes": 0,
    }
    stage = f"{row['backend']}:{row['mode']} (warm cache)"
    warm = _run_child({**kwargs, "policy": warm_policy, "warm_run": True}, sandbox, cache_dir, extra_env, stage)
    if warm.status == "ok" and warm.value.get("first_call_s") is not None:
        latency = warm.value.get("latency") or row["latency"]  # generation: the warm child's decode window
        row["compile_s_warm"] = max(0.0, warm.value["first_call_s"] - latency["median_ms"] / 1e3)
    return warm.wall_s, (warm.value or {}).get("timed_s") or 0.0


def measure_details(
    spec: str,
    mode: str,
    is_baseline: bool,
    row: dict[str, Any],
    common: dict,
    sandbox: dict,
    cache_dir: Path,
    policy: dict,
    eager: dict[str, Any] | None = None,
) -> None:
    """A leading option's details, measured once the options are ranked, in a warm-cache child (its first child's
    compile cache): the warm compile, other sizes of the dynamic dims with their recompiles, the profile and, when
    `common` carries one (a traffic sweep: measurement.details), the shape plan's sizes. They
    go into `row`; its timings stay the first child's. A details child that fails leaves the row as it was, saying
    why in `details_error`. `eager`: the eager row, whose profile this child also takes (of the eager module it
    loads, scaled by that row's median) into its `time_breakdown`."""
    from advisor.harness.backends import CompileRequest, get_backend

    backend = get_backend(spec)
    request = CompileRequest(mode=mode, device=common["device"], workload=common["workload"], cache_dir=str(cache_dir))
    median_ms = row["latency"]["median_ms"]
    kwargs = {
        **common,
        "reference_exists": True,  # the baseline's first child wrote it
        "backend_spec": spec,
        "mode": mode,
        "is_baseline": is_baseline,
        "policy": policy,
        "warm_run": True,
        "details_median_ms": median_ms,
    }
    if eager is not None:
        kwargs["eager_profile_ms"] = eager["latency"]["median_ms"]
    label = f"{backend.name}:{mode} (details)"
    details = _run_child(kwargs, sandbox, cache_dir, backend.environment(request), label)
    row["wall_s"] += details.wall_s
    value = details.value if details.status == "ok" else None
    if value is None or value.get("status") not in ("ok", "fail_accuracy"):
        why = details.reason if value is None else value.get("reason")
        row["details_error"] = f"{details.status if value is None else value['status']}: {why}"
        return
    if not is_baseline and row.get("compile_s_warm") is None and value.get("first_call_s") is not None:
        row["compile_s_warm"] = max(0.0, value["first_call_s"] - median_ms / 1e3)
    for key in ("dynamic", "recompiles", "time_breakdown", "sweep"):
        if value.get(key) is not None:
            row[key] = value[key]
    if eager is not None and value.get("eager_time_breakdown") is not None:
        eager["time_breakdown"] = value["eager_time_breakdown"]


def _run_child(kwargs: dict, sandbox: dict, cache_dir: Path, extra_env: dict, stage: str) -> SandboxResult:
    result = run_in_sandbox(CHILD, kwargs, cache_dir=str(cache_dir), stage=stage, extra_env=extra_env, **sandbox)
    if result.status == "cancelled":
        raise MeasurementCancelled(result.reason or "cancelled")
    return result


def _fill_from_child(row: dict[str, Any], value: dict, is_baseline: bool) -> None:
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
        serialized_bytes=value.get("serialized_bytes"),
        accuracy=value["accuracy"],
        graph_count=value.get("graph_count"),
        graph_breaks=value.get("graph_breaks"),
        recompiles=value.get("recompiles"),
        throughput=value.get("throughput"),
        dynamic=value.get("dynamic"),
        compile_breakdown=value.get("compile_breakdown"),
        time_breakdown=value.get("time_breakdown"),
        sweep=value.get("sweep"),
        generation=value.get("generation"),
        latency_window=FIRST_WINDOW,
        timing_load=value.get("timing_load"),
    )
    if value.get("training"):
        row["training"] = value["training"]
    if value.get("raced"):
        row["raced"] = True  # its window stopped behind the leader it raced: the run states why (`eliminated`)
    if value.get("ahead"):
        row["ahead"] = True  # its window stopped ahead of every other option: the run states why (`stopped_ahead`)
    determinism = value.get("determinism") or {}
    notes = []
    if determinism and not determinism.get("deterministic", True):
        notes.append(f"two eager runs differ by up to {determinism['max_abs_diff']:.3g}: the model is nondeterministic")
    if determinism.get("fp64_note"):
        notes.append(determinism["fp64_note"])
    if notes and row["accuracy"] is not None:  # after the comparison's own reason (why it failed), not instead of it
        row["accuracy"]["reason"] = "; ".join(filter(None, [row["accuracy"].get("reason"), *notes]))


def _empty_row(backend: Any, mode: str, device: str, workload: str, snippet: str) -> dict[str, Any]:
    return {
        "backend": backend.name,
        "mode": mode,
        "family": backend.family,
        "device": device,
        "workload": workload,
        "status": "unavailable",
        "reason": None,
        "stderr_tail": None,
        "compile_s_cold": None,
        "compile_s_warm": None,
        "latency": None,
        "eager_latency": None,
        "speedup_vs_eager": None,
        "speedup_ci": None,
        "peak_memory_mb": None,
        "memory_kind": None,
        "serialized_bytes": None,
        "accuracy": None,
        "graph_count": None,
        "graph_breaks": None,
        "recompiles": None,
        "throughput": None,
        "dynamic": None,
        "compile_breakdown": None,
        "time_breakdown": None,
        "sweep": None,
        "generation": None,
        "wall_s": 0.0,
        "snippet": snippet,
    }


def _finish(row: dict[str, Any], notify: Progress, wall_s: float, timed_s: float | None = None) -> dict[str, Any]:
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


def not_measured(
    spec: str, mode: str, device: str, workload: str, reason: str, call: str = POSITIONAL_CALL
) -> dict[str, Any]:
    from advisor.harness.backends import CompileRequest, get_backend

    backend = get_backend(spec)
    snippet = backend.snippet_for(CompileRequest(mode=mode, device=device, workload=workload, call=call))
    row = _empty_row(backend, mode, device, workload, snippet)
    row["reason"] = reason
    return row


def skipped(
    spec: str, mode: str, device: str, workload: str, reason: str, call: str = POSITIONAL_CALL
) -> dict[str, Any]:
    """The row of a variant the plan left out (advisor.core.decision.plan_pruning): status "skipped", and why."""
    row = not_measured(spec, mode, device, workload, reason, call)
    row["status"] = "skipped"
    return row
