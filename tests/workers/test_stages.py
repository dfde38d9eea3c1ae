"""The job's stages (workers.stages.run_stages) as the runner child runs them, on a real exported model."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

import advisor.harness.measurement
from advisor.core.context import parse_context
from advisor.core.job_wire import JobSpec
from advisor.harness.sandbox import Zygote
from workers.stages import DEFAULT_STAGES


def spec_of(**fields) -> JobSpec:  # noqa: ANN003
    """The runner's spec as the agent writes it (workers.agent), with the real stages."""
    return JobSpec(stages=DEFAULT_STAGES, **fields)


class RecordingZygote(Zygote):
    """A real zygote that records the target of every child it forks."""

    forked: list[str] = []
    forked_at: list[float] = []

    def fork(self, spec_fd: int, streams, env, workdir: str):  # type: ignore[no-untyped-def]
        spec = json.loads(os.pread(spec_fd, 1 << 24, 0))  # the memfd the child reads its spec from
        child = super().fork(spec_fd, streams, env, workdir)
        if child is not None:
            RecordingZygote.forked.append(spec["target"])
            RecordingZygote.forked_at.append(time.monotonic())
        return child


def test_inspection_and_measurement_fork_from_one_zygote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.harness.examples import export_example
    from workers.stages import run_stages

    started: list[RecordingZygote] = []

    def one_zygote(device: str, readable: list | tuple = (), *, inductor: bool = True, onnx: bool = False) -> Zygote:
        started.append(
            RecordingZygote(
                "advisor.harness.measurement.child:preload", {"device": device}, readable=[p for p in readable if p]
            )
        )
        return started[-1]

    monkeypatch.setattr(advisor.harness.measurement, "measurement_zygote", one_zygote)
    RecordingZygote.forked, RecordingZygote.forked_at = [], []
    model = export_example("mlp", tmp_path / "mlp.pt2")
    # the worker's readiness pipe (workers.job_sandbox): opened a second after the inspection started, as if the next
    # job's sandbox came up then; no measuring child may start before
    gate_read, gate_write = os.pipe()
    opened_at: list[float] = []

    def open_gate() -> None:
        while not RecordingZygote.forked:
            time.sleep(0.05)
        time.sleep(1.0)
        opened_at.append(time.monotonic())
        os.write(gate_write, b"1")

    threading.Thread(target=open_gate, daemon=True).start()
    spec = spec_of(artifact_path=str(model), device="cpu", backends=["eager"], measure_gate_fd=gate_read)
    stages: list[str] = []
    result = run_stages(spec, lambda event: stages.append(event.label))
    os.close(gate_write)
    assert result["error"] is None, result["error"]
    assert opened_at and RecordingZygote.forked_at[1] >= opened_at[0]  # measuring waited for the gate
    assert result["inspection"]["format"] == "exported_program"
    assert result["measurements"]["measurements"][0]["status"] == "ok"
    assert len(started) == 1  # one `import torch` for the whole job
    # inspection, then eager's measurement (timed once more when the run was noisy: advisor.core.noise)
    assert RecordingZygote.forked[0] == "advisor.harness.inspection:inspect_model"
    assert set(RecordingZygote.forked[1:]) == {"advisor.harness.measurement.child:measure_variant"}
    assert len(RecordingZygote.forked) in (2, 3)
    assert started[0]._proc is None  # closed when the job's stages end
    assert stages[0] == "inspect" and stages[-1] == "measure:eager:default"


def test_a_failed_inspection_carries_the_childs_last_stderr_lines(tmp_path: Path, monkeypatch) -> None:
    """The user sees why a child died (e.g. the interpreter's own segfault report), not only its status."""
    import advisor.harness.isolated_inspection
    from advisor.harness.sandbox import SandboxResult
    from workers.stages import run_stages

    tail = "Fatal Python error: Segmentation fault\n  File model.py, line 3 in forward"
    crashed = SandboxResult("crashed", None, "inspection crashed: the process was killed by SIGSEGV", tail, 1.0)
    monkeypatch.setattr(advisor.harness.isolated_inspection, "inspect_isolated", lambda *a, **k: crashed)
    model = tmp_path / "m.pt2"
    model.write_bytes(b"stand-in: never loaded")
    spec = spec_of(artifact_path=str(model), device="cpu", backends=["eager"])
    result = run_stages(spec, lambda event: None)
    assert result["error"].startswith("inspection failed (crashed): inspection crashed: the process was killed by")
    assert "Fatal Python error: Segmentation fault" in result["error"] and result["retryable"] is False


def test_an_inspect_job_inspects_and_measures_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import advisor.harness.isolated_inspection
    from advisor.harness.sandbox import SandboxResult
    from workers.stages import run_stages

    inspected = SandboxResult("ok", {"format": "exported_program", "ops": []}, None, None, 1.0)
    monkeypatch.setattr(advisor.harness.isolated_inspection, "inspect_isolated", lambda *a, **k: inspected)

    def no_measuring(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("an inspect job measured")

    monkeypatch.setattr(advisor.harness.measurement, "measure_model", no_measuring)
    model = tmp_path / "m.pt2"
    model.write_bytes(b"stand-in: never loaded")
    spec = spec_of(artifact_path=str(model), device="cpu", backends=["eager"], measure=False)
    stages: list[str] = []
    result = run_stages(spec, lambda event: stages.append(event.label))
    assert result == {"inspection": inspected.value, "measurements": None, "error": None, "retryable": False}
    assert stages and set(stages) == {"inspect"}  # started and finished the inspection, measured nothing


def test_the_jobs_context_is_the_plan_the_measurement_follows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker measures for the analysis's deployment context (issue 15: the plan follows the context), with the
    inspection it just made."""
    import advisor.harness.isolated_inspection
    from advisor.harness.sandbox import SandboxResult
    from workers.stages import run_stages

    inspected = SandboxResult("ok", {"format": "exported_program", "ops": [], "inputs": []}, None, None, 1.0)
    monkeypatch.setattr(advisor.harness.isolated_inspection, "inspect_isolated", lambda *a, **k: inspected)
    seen: dict = {}

    def measuring(path, **kwargs):  # noqa: ANN001, ANN003, ANN202
        seen.update(kwargs)
        return {"environment": {"device": "cpu"}, "workload": "inference", "measurements": []}

    monkeypatch.setattr(advisor.harness.measurement, "measure_model", measuring)
    model = tmp_path / "m.pt2"
    model.write_bytes(b"stand-in: never loaded")
    context = {"stage": "prototype", "target": "cpu"}
    spec = spec_of(artifact_path=str(model), device="cpu", backends=["eager", "inductor"])
    run_stages(spec.model_copy(update={"context": parse_context(context)}), lambda event: None)
    assert seen["plan_context"] == parse_context(context) and seen["inspection"] == inspected.value
    seen.clear()
    run_stages(spec, lambda event: None)  # no context (an older server): every variant is measured
    assert seen["plan_context"] is None


@pytest.mark.parametrize(
    ("backends", "measure", "prepared"),
    [
        (["eager"], True, (False, False)),  # eager only: no header copy, no CPU-feature probe (~3 s of every such job)
        (["eager", "onnxruntime"], True, (False, True)),  # the ONNX exporter's registry instead
        (["eager", "inductor"], True, (True, False)),
        (
            ["eager", "tests.support.backends_for_tests:WrongNumbersBackend"],
            True,
            (True, False),
        ),  # a plugin backend may use Inductor
        (["eager", "inductor", "onnxruntime"], False, (False, False)),  # an inspect job: inspection never compiles
    ],
)
def test_the_zygote_prepares_for_inductor_or_onnx_export_only_when_a_variant_may_use_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backends: list[str], measure: bool, prepared: tuple[bool, bool]
) -> None:
    from advisor.harness.pipeline import AnalysisRequest, run_analysis

    class Started(Exception):
        pass

    seen: list[tuple[bool, bool]] = []

    def recording(device: str, readable: list | tuple = (), *, inductor: bool = True, onnx: bool = False) -> Zygote:
        seen.append((inductor, onnx))
        raise Started

    monkeypatch.setattr(advisor.harness.measurement, "measurement_zygote", recording)
    model = tmp_path / "m.pt2"
    model.write_bytes(b"stand-in: never loaded")
    with pytest.raises(Started):
        run_analysis(AnalysisRequest(model=str(model), device="cpu", backends=backends, measure=measure))
    assert seen == [prepared]
