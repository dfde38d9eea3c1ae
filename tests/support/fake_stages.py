"""Stand-ins for workers.stages.run_stages, run by the real stage runner child in agent tests.

Each takes (spec, emit) like the real one (a JobSpec; emit takes an advisor.core.progress.ProgressEvent).
Test knobs come through the runner's environment (the agent's, less secrets): PID_FILE_ENV (where the runner
writes its pid), SLEEP_S_ENV (how long the slow ones run).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from advisor.core.job_wire import JobSpec
from advisor.core.progress import ProgressEvent

PID_FILE_ENV = "FAKE_STAGES_PID_FILE"
SLEEP_S_ENV = "FAKE_STAGES_SLEEP_S"

RESULT = {
    "inspection": {"format": "exported_program", "ops": []},
    "measurements": {"environment": {"device": "cpu"}, "workload": "inference", "measurements": []},
    "error": None,
    "retryable": False,
}


def _note_pid() -> None:
    if os.environ.get(PID_FILE_ENV):
        Path(os.environ[PID_FILE_ENV]).write_text(str(os.getpid()))


def _sleep_s(default: float) -> float:
    return float(os.environ.get(SLEEP_S_ENV) or default)


def quick(spec: JobSpec, emit) -> dict[str, Any]:
    emit(ProgressEvent("inspect", 0.0))
    emit(ProgressEvent("measure", 0.5, backend="eager", mode="default"))
    tolerance = spec.deployment.accuracy_tolerance
    ran = {
        "backends_run": spec.backends,
        "workload_run": spec.workload,
        "optimizer_run": spec.optimizer,
        "tolerance_run": None if tolerance is None else {"atol": tolerance.atol, "rtol": tolerance.rtol},
        "context_run": None if spec.context is None else spec.context.model_dump(mode="json"),
    }
    return {**RESULT, "measurements": {**RESULT["measurements"], **ran}}


def ranked_then_details(spec: JobSpec, emit) -> dict[str, Any]:
    """Publishes its ranking as the runner's pipeline does (workers.stages), then takes `sleep_s` for the details."""
    from advisor.harness.pipeline import AnalysisOutcome
    from workers.stages import publish_ranking

    emit(ProgressEvent("inspect", 0.0))
    ranked = {**RESULT["measurements"], "quality": {"details": {"pending": ["eager"]}}}
    assert spec.ranked_path, "the agent names where the ranking goes"
    publish_ranking(Path(spec.ranked_path), AnalysisOutcome(RESULT["inspection"], ranked), emit)
    time.sleep(_sleep_s(1.0))
    return RESULT


def slow(spec: JobSpec, emit) -> dict[str, Any]:
    emit(ProgressEvent("inspect", 0.0))
    _note_pid()
    time.sleep(_sleep_s(60))
    emit(ProgressEvent("measure", 0.5, backend="eager", mode="default"))
    return RESULT


def crash(spec: JobSpec, emit) -> dict[str, Any]:
    emit(ProgressEvent("inspect", 0.0))
    print("Segmentation fault (pretend)", flush=True)
    os._exit(3)


def bad_model(spec: JobSpec, emit) -> dict[str, Any]:
    emit(ProgressEvent("inspect", 0.0))
    return {"inspection": None, "measurements": None, "error": "inspection failed: not a model", "retryable": False}


def sleep_and_note(pid_file: str, seconds: float) -> None:
    """A sandbox target: note this (sandboxed) process's pid, then sleep."""
    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(seconds)


def sandboxed_sleep(spec: JobSpec, emit) -> dict[str, Any]:
    """Like `slow`, but the sleeping happens in a real advisor.harness.sandbox child (its own session)."""
    from advisor.harness.isolation import NO_ISOLATION
    from advisor.harness.sandbox import run_in_sandbox
    from workers.stages import CANCEL

    emit(ProgressEvent("inspect", 0.0))
    _note_pid()
    target_pid_file = os.environ[PID_FILE_ENV] + ".sandbox"
    run_in_sandbox(
        "tests.support.fake_stages:sleep_and_note",
        {"pid_file": target_pid_file, "seconds": 60},
        timeout_s=120,
        memory_limit_mb=None,
        cancel=CANCEL,
        isolation=NO_ISOLATION,  # the test reads the child's host pid; isolated kills: tests/harness/test_sandbox.py
    )
    return RESULT


def inspect_or_measure(spec: JobSpec, emit) -> dict[str, Any]:
    """Like the real runner: the inspection alone when the spec says not to measure (an inspect job)."""
    emit(ProgressEvent("inspect", 0.0))
    if not spec.measure:
        return {**RESULT, "measurements": None}
    emit(ProgressEvent("measure", 0.5, backend="eager", mode="default"))
    return RESULT


def describe_child(model: str) -> dict[str, Any]:
    """A sandbox target: what a job's child sees of the job sandbox it was forked from."""
    import hashlib
    import sys

    return {
        "torch_preloaded": "torch" in sys.modules,  # forked from the warm zygote, not spawned afresh
        "sha256": hashlib.sha256(Path(model).read_bytes()).hexdigest(),
        "model": model,
    }


def forked_from_warm(spec: JobSpec, emit) -> dict[str, Any]:
    """Like the real runner with a prepared job sandbox: fork a child from its zygote (spec.zygote)."""
    from advisor.harness.sandbox import Zygote, run_in_sandbox

    emit(ProgressEvent("inspect", 0.0))
    assert spec.zygote is not None, "the agent prepared no sandbox"
    zygote = Zygote.attach(spec.zygote)
    done = run_in_sandbox(
        "tests.support.fake_stages:describe_child",
        {"model": spec.artifact_path},
        zygote=zygote,
        readable=[spec.artifact_path],
        timeout_s=60,
        memory_limit_mb=None,
    )
    child = {"status": done.status, "reason": done.reason, **(done.value or {}), "zygote": spec.zygote["pid"]}
    return {**RESULT, "inspection": {**RESULT["inspection"], "child": child}}


def deep_progress(spec: JobSpec, emit) -> dict[str, Any]:
    """A runner whose progress line (under the line cap) nests 30,000 levels deep, then hangs."""
    emit(ProgressEvent("inspect", 0.0))
    _note_pid()
    print('{"stage": "inspect", "fraction": 0.1, "detail": ' + "[" * 30_000 + "]" * 30_000 + "}", flush=True)
    time.sleep(60)
    return RESULT
