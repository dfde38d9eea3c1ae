"""The ONNX exporter's once-per-process setup (advisor.harness.backends.ort.prepare_exporter) is made by the zygote
of a job that measures ONNX Runtime, and only there: its exporting children inherit it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.job_zygote import run_in_job_zygote

pytest.importorskip("onnxscript", reason="the ONNX exporter (the export extra: onnx, onnxscript) is not installed")
pytestmark = pytest.mark.own_sandbox  # a zygote of its own, prepared as a job's


@pytest.mark.parametrize("exports_onnx", [True, False])
def test_a_zygote_sets_up_the_onnx_exporter_only_for_a_job_that_exports(exports_onnx: bool, tmp_path: Path) -> None:
    target = str(tmp_path / "model.onnx") if exports_onnx else None
    seen = run_in_job_zygote(
        {"device": "cpu", "exports_onnx": exports_onnx},
        "tests.support.sandbox_probes:onnx_exporter_setup",
        {"export_to": target},
    )
    assert seen.status == "ok", seen
    assert seen.value["torchlib"] is exports_onnx
    assert seen.value["threads"] == 1, "a zygote forks from one thread"
    if exports_onnx:
        assert seen.value["exported"]
