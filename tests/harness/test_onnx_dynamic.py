"""ONNX Runtime at every shape the model is timed at (issue 27, item 3): the ONNX file keeps the ExportedProgram's
dynamic dims as ONNX dynamic axes, and a backend error is kept whole (bounded) in the row and the report."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from advisor.harness.measurement import TimingPolicy, measure_model  # noqa: E402
from tests.support.models import export_dynamic_batch, mlp  # noqa: E402

FAST = TimingPolicy(min_iters=10, min_time_s=0.05, max_time_s=0.3, warmup_iters=2, warm_cache=False, dynamic_sizes=2)


def test_onnx_runtime_is_timed_at_two_batch_sizes_of_a_dynamic_batch_export(tmp_path):
    model_file = export_dynamic_batch(tmp_path / "mlp.pt2", *mlp(), max_batch=64)  # example batch 4
    spec = {"points": [{"x": [16, 64]}, {"x": [32, 64]}]}
    run = measure_model(
        model_file, backends=["onnxruntime"], timing=FAST, timeout_s=300, remeasure=False, shape_sweep=spec
    )
    row = next(r for r in run["measurements"] if r["backend"] == "onnxruntime")
    assert row["status"] == "ok", row["reason"]
    assert [p["shape"]["x"][0] for p in row["dynamic"]] == [8, 16]  # the dynamic sizes (2x, 4x the example)
    assert all(p["median_ms"] > 0 for p in row["dynamic"])
    points = row["sweep"]
    assert [p["label"] for p in points] == ["x=16x64", "x=32x64"]
    assert all("error" not in p and p["median_ms"] > 0 for p in points), points


ORT_ERROR = (
    "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: x for the following indices\n"
    " index: 0 Got: 4 Expected: 2\n"
    " Please fix either the inputs/outputs or the model."
)


def test_a_backend_error_is_kept_whole_and_bounded_in_the_row_and_the_report():
    from advisor.core.decision import decide
    from advisor.core.report import render
    from advisor.harness.measurement.errors import stage_error
    from tests.support.fixtures_decide import measurement, run

    error = stage_error(RuntimeError(ORT_ERROR), "warm-up of backend")
    assert error.status == "runtime_error" and "index: 0 Got: 4 Expected: 2" in error.reason
    assert "Please fix either" in error.reason
    long = stage_error(RuntimeError("y" * 20_000), "compilation").reason
    assert len(long) <= 4100 and "more characters]" in long

    row = measurement("onnxruntime", status="runtime_error", reason=error.reason, device="cpu")
    measured = run(measurement("eager", device="cpu"), row, device="cpu")
    context = {"target": "cpu"}
    analysis = {"model_name": "m.pt2", "context": context, "inspection": None, "measurements": measured}
    analysis["recommendation"] = decide(context, None, measured)
    for fmt in ("markdown", "text"):
        report = " ".join(render(analysis, fmt).split())  # the text report wraps long cells
        assert "index: 0 Got: 4 Expected: 2" in report, fmt
