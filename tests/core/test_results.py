"""Typed results (advisor.core.results), the one definition of the results' shapes: what the engine and the
harness write is what the models declare, read back unchanged; lenient readers of stored analyses from older
versions, strict at the worker boundary. Torch-free but for the harness test."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from advisor.core.decision.engine import decide
from advisor.core.report import render
from advisor.core.results import (
    CompletedResults,
    Inspection,
    MeasurementRow,
    MeasurementRun,
    Recommendation,
    read,
)
from tests.support.fixtures_decide import blog_run, inspection, npu_op_inspection
from tests.support.older_results import OLDER_ANALYSIS


def _undeclared(value: Any, where: str = "") -> list[str]:
    """Every field of a validated result, at any depth, that its model does not declare (kept as an extra)."""
    if isinstance(value, BaseModel):
        found = [f"{where}.{key}" for key in value.model_extra or {}]
        for name in type(value).model_fields:
            found += _undeclared(getattr(value, name), f"{where}.{name}")
        return found
    if isinstance(value, list):
        return [field for i, item in enumerate(value) for field in _undeclared(item, f"{where}[{i}]")]
    if isinstance(value, dict):
        return [field for key, item in value.items() for field in _undeclared(item, f"{where}[{key}]")]
    return []


@pytest.mark.parametrize(
    "context",
    [
        {"target": "npu", "stage": "production"},
        {"target": "cpu", "stage": "prototype", "fleet": "mixed"},
        {"target": "npu", "stage": "edge"},
    ],
)
def test_the_engine_writes_what_the_recommendation_model_declares(context: dict[str, Any]) -> None:
    for inspected, run in ((inspection(), blog_run()), (npu_op_inspection(), None)):
        decided = decide(context, inspected, run)
        typed = Recommendation.model_validate(decided)
        assert _undeclared(typed) == []
        assert typed.model_dump(exclude_unset=True) == decided  # read back as written


def test_the_harness_writes_what_the_inspection_and_run_models_declare(mlp_file: str) -> None:
    pytest.importorskip("torch")
    from advisor.harness.inspection import inspect_model
    from advisor.harness.measurement import TimingPolicy, measure_model

    inspected = inspect_model(mlp_file)
    fast = TimingPolicy(min_iters=10, min_time_s=0.05, max_time_s=0.3, warmup_iters=2, warm_cache=False)
    # eager (timed, with its accuracy and environment) and a row that could not run here (the empty row)
    run = measure_model(mlp_file, backends=["torchair:max-autotune"], timing=fast, timeout_s=120)
    assert [row["status"] for row in run["measurements"]] == ["ok", "unavailable"]
    for model, written in ((Inspection, inspected), (MeasurementRun, run)):
        typed = model.model_validate(written)
        assert _undeclared(typed) == []
        assert typed.model_dump(exclude_unset=True) == json.loads(json.dumps(written))


def test_an_older_analysis_reads_without_loss() -> None:
    for part, model in (
        ("inspection", Inspection),
        ("measurements", MeasurementRun),
        ("recommendation", Recommendation),
    ):
        typed = read(model, OLDER_ANALYSIS[part])
        assert typed is not None
        assert typed.model_dump(exclude_unset=True) == OLDER_ANALYSIS[part]  # unknown fields kept, nothing added
    run = read(MeasurementRun, OLDER_ANALYSIS["measurements"])
    assert run.workload is None and run.measurements[0].latency.drift is None  # newer fields: None
    assert run.environment.gpu_clock_mhz is None and "gpu_clock_mhz" in run.environment.model_fields_set


@pytest.mark.parametrize("fmt", ["text", "markdown", "json"])
def test_an_older_analysis_renders_its_report(fmt: str) -> None:
    report = render(json.loads(json.dumps(OLDER_ANALYSIS)), fmt)
    if fmt == "json":
        assert json.loads(report)["recommendation"]["break_even"] == {"against": "eager", "calls": 4200}
        return
    for expected in (
        "Use torch.compile with Inductor, mode max-autotune on CPU",
        "confidence high",
        "engine ?",  # no engine version recorded then
        "unavailable: no NPU on this node",
        "npu.npu_rms_norm.default (Inductor: fallback, TorchAir: supported)",
        "Dynamic dims: x[0] 1..64",
        "host=old-host",
    ):
        assert expected in report, expected
    assert "Break-even" not in report  # the first break-even shape does not say which options it compares
    if fmt == "markdown":
        row = "| inductor:max-autotune | ok | 14 s / 3.5 s | 2 ms [1.92-2.08] | 2.6 ms | 2.00x [1.90-2.10] faster |"
        assert row in report


def test_read_drops_what_does_not_validate_instead_of_failing() -> None:
    stored = {
        "workload": "inference",
        "measurements": [
            {"backend": "eager", "speedup_ci": [1.0, "fast"], "latency": {"median_ms": "n/a"}},
            "not a row",
            {"backend": "inductor", "status": "ok"},
        ],
    }
    run = read(MeasurementRun, stored)
    assert [row.backend for row in run.measurements] == ["eager", "inductor"]
    assert run.measurements[0].speedup_ci is None and run.measurements[0].latency.median_ms is None
    assert read(Inspection, None) is None and read(Inspection, ["not", "an", "object"]) is None
    assert stored["measurements"][1] == "not a row"  # the stored object is not modified


def test_the_worker_boundary_still_refuses_wrong_types() -> None:
    with pytest.raises(ValidationError) as refused:
        CompletedResults.model_validate({"measurements": {"measurements": [{"backend": "b" * 65}]}})
    assert refused.value.errors()[0]["loc"] == ("measurements", "measurements", 0, "backend")
    # a breakdown whose share is not a fraction, or whose op name is a megabyte, is refused with its place named
    for entry in ({"name": "aten::mm", "share": 3.0}, {"name": "x" * 1_000_000, "share": 0.5}):
        row = {"backend": "eager", "time_breakdown": {"entries": [entry]}}
        with pytest.raises(ValidationError) as refused:
            CompletedResults.model_validate({"measurements": {"measurements": [row]}})
        assert refused.value.errors()[0]["loc"][:5] == ("measurements", "measurements", 0, "time_breakdown", "entries")


def test_row_label_is_the_options_spelling() -> None:
    assert MeasurementRow(backend="inductor").label == "inductor:default"
    assert MeasurementRow(backend="torchair", mode="max-autotune").label == "torchair:max-autotune"
