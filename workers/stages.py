"""The stages of one job, run in a child of the agent: inspect, then measure each backend.

Run as ``python -m workers.stages SPEC.json RESULT.json``. The agent starts it in its own process
group so that stopping it (cancel, lost lease, shutdown) also stops the sandbox children it spawned.
Progress goes to stdout as one JSON object per line (``{"stage": "measure:inductor:default",
"progress": 0.4}``); the result goes to RESULT.json as ``{"inspection", "measurements", "error",
"retryable"}``. Inspection runs through ``advisor.harness.sandbox.run_in_sandbox``; ``advisor.harness.measure``
isolates every (backend, mode) variant in its own sandboxed child itself. SIGTERM sets CANCEL,
which both of them watch: the running sandbox child is killed and the runner exits.
"""

from __future__ import annotations

import importlib
import json
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

Emit = Callable[[str, float], None]
StagesFunction = Callable[[dict[str, Any], Emit], dict[str, Any]]

DEFAULT_STAGES = "workers.stages:run_stages"
STDERR_IN_ERROR_CHARS = 2000  # the error is capped at 8 KiB by the server; keep room for the reason

# Set by SIGTERM from the agent: the sandbox then kills the running stage's process group itself.
CANCEL = threading.Event()


def run_stages(spec: dict[str, Any], emit: Emit) -> dict[str, Any]:
    """Inspect the artifact in a sandboxed child, then measure the job's backends (each variant sandboxed).

    Every child of the job forks from one zygote that imported torch once (see advisor.harness.sandbox.Zygote)."""
    from advisor.harness.isolated_inspection import inspect_isolated
    from advisor.harness.measure import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIMEOUT_S, measurement_zygote

    emit("inspect", 0.0)
    with measurement_zygote(spec["device"], [spec["artifact_path"], spec.get("inputs_path")]) as zygote:
        inspected = inspect_isolated(
            spec["artifact_path"],
            inputs_file=spec.get("inputs_path"),
            zygote=zygote,
            timeout_s=float(spec.get("timeout_s") or DEFAULT_TIMEOUT_S),  # the stage timeout applies here too
            memory_limit_mb=spec.get("memory_limit_mb") or DEFAULT_MEMORY_LIMIT_MB,
            cancel=CANCEL,
        )
        if inspected.status == "cancelled":
            return failure("cancelled", retryable=True)
        if inspected.status == "rejected":
            return failure(f"rejected: {inspected.reason}", retryable=False)
        if inspected.status != "ok":
            reason = inspected.reason or "no reason given"
            tail = (inspected.stderr_tail or "").strip()
            if tail and tail not in reason:  # the child's last words belong with the failure (the page shows them)
                reason += "\n--- last lines of the child's stderr ---\n" + tail[-STDERR_IN_ERROR_CHARS:]
            return failure(f"inspection failed ({inspected.status}): {reason}", retryable=False)
        return measure_stage(spec, emit, inspected.value, zygote)


def measure_stage(spec: dict[str, Any], emit: Emit, inspection: dict[str, Any], zygote: Any = None) -> dict[str, Any]:
    """Eager first (the baseline and reference), then every other variant, each in a child (advisor.harness.measure)."""
    from advisor.harness.measure import MeasureError, MeasurementCancelled, measure_model, plan_variants

    backends = list(dict.fromkeys(spec["backends"])) or ["eager"]
    try:
        variants = plan_variants(backends, spec["device"])
    except MeasureError as exc:
        return failure(f"measurement could not start: {exc}", retryable=False)
    finished: set[tuple[str, str]] = set()

    def on_progress(event: dict) -> None:
        variant = (str(event.get("backend")), str(event.get("mode") or "default"))
        if event.get("stage") == "done":
            finished.add(variant)
        emit(f"measure:{variant[0]}:{variant[1]}", 0.1 + 0.9 * len(finished) / max(1, len(variants)))

    limits = {"timeout_s": spec.get("timeout_s"), "memory_limit_mb": spec.get("memory_limit_mb")}
    try:
        run = measure_model(
            spec["artifact_path"],
            backends=backends,
            device=spec["device"],
            workload=spec.get("workload", "inference"),
            optimizer=spec.get("optimizer", "sgd"),
            accuracy_tolerance=spec.get("accuracy_tolerance"),
            inputs_file=spec.get("inputs_path"),
            progress=on_progress,
            cancel=CANCEL,
            zygote=zygote,
            **{name: value for name, value in limits.items() if value is not None},
        )
    except MeasurementCancelled:
        return failure("cancelled", retryable=True)
    except MeasureError as exc:
        return failure(f"measurement could not start: {exc}", retryable=False)
    return {"inspection": inspection, "measurements": dict(run), "error": None, "retryable": False}


def failure(error: str, *, retryable: bool) -> dict[str, Any]:
    return {"inspection": None, "measurements": None, "error": error, "retryable": retryable}


def load_function(target: str) -> StagesFunction:
    module_name, _, function_name = target.partition(":")
    return getattr(importlib.import_module(module_name), function_name)


def main(argv: list[str]) -> int:
    spec_path, result_path = Path(argv[0]), Path(argv[1])
    signal.signal(signal.SIGTERM, lambda signum, frame: CANCEL.set())
    spec = json.loads(spec_path.read_text())

    def emit(stage: str, progress: float) -> None:
        print(json.dumps({"stage": stage, "progress": round(progress, 4)}), flush=True)

    result = load_function(spec.get("stages", DEFAULT_STAGES))(spec, emit)
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(result_path)  # the agent never sees half a result
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
