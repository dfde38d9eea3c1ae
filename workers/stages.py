"""The stage runner: one job's analysis (advisor.harness.pipeline) in a child of the agent.

Run as ``python -m workers.stages SPEC.json RESULT.json``. The agent starts it in its own process
group so that stopping it (cancel, lost lease, shutdown) also stops the sandbox children it spawned.
Progress goes to stdout as one `advisor.core.progress.ProgressEvent` per line (its `to_json`); the result
goes to RESULT.json as ``{"inspection", "measurements", "error", "retryable"}``; once the options are ranked,
before the recommended option's details, the results so far go to `spec.ranked_path` (same shape, no error) and
a `ranked` progress line says so; the agent posts them so the analysis shows its answer sooner
(app.job_queue.record_ranked). The worker does not decide: the server decides when the results arrive. SIGTERM
sets CANCEL, which the pipeline watches: the running sandbox child is killed and the runner exits.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.core.job_wire import JobSpec
from advisor.core.progress import ProgressEvent

if TYPE_CHECKING:
    from advisor.harness.pipeline import AnalysisOutcome, StepFailure

Emit = Callable[[ProgressEvent], None]
StagesFunction = Callable[[JobSpec, Emit], dict[str, Any]]

DEFAULT_STAGES = "workers.stages:run_stages"
RANKED = "ranked"  # the progress step that says the ranking was written (a signal to the agent, not a heartbeat)
GATE_TIMEOUT_S = 180.0  # a spare that takes longer than this to start does not hold a job back
STDERR_IN_ERROR_CHARS = 2000  # the error is capped at 8 KiB by the server; keep room for the reason

# Set by SIGTERM from the agent: the sandbox then kills the running stage's process group itself.
CANCEL = threading.Event()


def run_stages(spec: JobSpec, emit: Emit) -> dict[str, Any]:
    """Inspect the job's artifact, then measure its backends: `advisor.harness.pipeline.run_analysis`, undecided.
    `spec.measure` false (an inspect job): the inspection alone, with no measurements."""
    from advisor.harness.measurement import DEFAULT_TIMEOUT_S
    from advisor.harness.pipeline import AnalysisRequest, run_analysis

    request = AnalysisRequest(
        model=spec.artifact_path,
        device=spec.device,
        inputs=spec.inputs_path,
        # the int8 options' calibration .npz: checked against the model's inputs after the inspection (a mismatch
        # fails the job before anything is measured, naming the arrays)
        calibration=spec.calibration_path,
        backends=list(dict.fromkeys(spec.backends)) or ["eager"],
        workload=spec.workload,
        optimizer=spec.optimizer,
        decode_tokens=spec.decode_tokens,
        accuracy_tolerance=spec.accuracy_tolerance,
        measure=spec.measure,
        timeout_s=spec.timeout_s or DEFAULT_TIMEOUT_S,  # the stage timeout applies to inspection too
        memory_limit_mb=spec.memory_limit_mb,
        plan_context=spec.context,  # the analysis's deployment context: the plan follows it
    )
    zygote = None
    if spec.zygote:  # the job sandbox the worker prepared (workers.job_sandbox): fork from it, do not own it
        from advisor.harness.sandbox import Zygote

        zygote = Zygote.attach(spec.zygote)
    gate = spec.measure_gate_fd
    before_measure = (lambda: wait_for_gate(gate)) if gate is not None else None
    ranked_path = spec.ranked_path
    on_ranked = (lambda ranked: publish_ranking(Path(ranked_path), ranked, emit)) if ranked_path else None
    outcome = run_analysis(
        request, emit, cancel=CANCEL, zygote=zygote, before_measure=before_measure, on_ranked=on_ranked
    )
    if outcome.failure is not None:
        return failure(job_error(outcome.failure), retryable=outcome.failure.cancelled)
    return results_of(outcome)


def results_of(outcome: AnalysisOutcome) -> dict[str, Any]:
    """RESULT.json (and the ranking's file) for an outcome that did not fail."""
    return {"inspection": outcome.inspection, "measurements": outcome.measurements, "error": None, "retryable": False}


def publish_ranking(path: Path, outcome: AnalysisOutcome, emit: Emit) -> None:
    """The results so far at `path`, then a `RANKED` progress line: the agent posts them (workers.ranking)."""
    write_atomically(path, results_of(outcome))
    emit(ProgressEvent(RANKED))


def write_atomically(path: Path, data: dict[str, Any]) -> None:
    """`data` as JSON at `path`, renamed into place: the agent never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def wait_for_gate(fd: int, timeout_s: float = GATE_TIMEOUT_S) -> None:
    """Until the worker says the next job's sandbox is up (a byte, or its end of the pipe closed), at most `timeout_s`
    or until the job is cancelled: measuring then never overlaps the start of another sandbox."""
    deadline = time.monotonic() + timeout_s
    while not CANCEL.is_set() and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            break
    os.close(fd)


def job_error(stop: StepFailure) -> str:
    """The job's error for a `StepFailure` (what the analysis page shows)."""
    if stop.cancelled:
        return "cancelled"
    if stop.step == "measure":
        return f"measurement could not start: {stop.reason}"
    if stop.status == "rejected":
        return f"rejected: {stop.reason}"
    reason = stop.reason or "no reason given"
    tail = (stop.stderr_tail or "").strip()
    if tail and tail not in reason:  # the child's last words belong with the failure (the page shows them)
        reason += "\n--- last lines of the child's stderr ---\n" + tail[-STDERR_IN_ERROR_CHARS:]
    return f"inspection failed ({stop.status}): {reason}"


def failure(error: str, *, retryable: bool) -> dict[str, Any]:
    return {"inspection": None, "measurements": None, "error": error, "retryable": retryable}


def load_function(target: str) -> StagesFunction:
    module_name, _, function_name = target.partition(":")
    return getattr(importlib.import_module(module_name), function_name)


def main(argv: list[str]) -> int:
    spec_path, result_path = Path(argv[0]), Path(argv[1])
    signal.signal(signal.SIGTERM, lambda signum, frame: CANCEL.set())
    spec = JobSpec.model_validate_json(spec_path.read_text())

    def emit(event: ProgressEvent) -> None:
        print(json.dumps(event.to_json()), flush=True)

    write_atomically(result_path, load_function(spec.stages)(spec, emit))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
