"""Options named by what they are (issue 44 item 2): a torch.compile backend, an export runtime or an exported int8 IR,
the same name from the catalogue in the headline, the `ranked:` line, the summary and the report - never "torch.compile
with OpenVINO (int8)" for an IR converted with openvino.convert_model and quantized with NNCF."""

from __future__ import annotations

import pytest

from advisor.core import catalogue
from advisor.core.decision.engine import decide
from advisor.core.early_answer import ranked_line
from advisor.core.report import headline, render
from tests.support.fixtures_decide import inspection, measurement, run

EDGE = {"stage": "edge", "target": "cpu", "resource_constrained": True, "needs_offline_export": True}
IR = "OpenVINO int8 IR (openvino.convert_model + NNCF) + OpenVINO runtime"


@pytest.mark.parametrize(
    ("backend", "mode", "name"),
    [
        ("eager", "default", "eager PyTorch (no compilation)"),
        ("inductor", "default", "torch.compile with Inductor"),
        ("inductor", "max-autotune", "torch.compile with Inductor, mode max-autotune"),
        ("openvino", "default", "torch.compile with OpenVINO"),
        ("openvino", "int8", IR),
        ("onnxruntime", "default", "ONNX export + ONNX Runtime"),
        ("onnxruntime", "int8", "int8 ONNX export (onnxruntime.quantization) + ONNX Runtime"),
        ("torchair", "dynamo_export", catalogue.EXPORT_DISPLAY_NAME),
        ("torchair", None, "TorchAir, mode max-autotune"),
        ("<b>mine</b>", "fast", "<b>mine</b>, mode fast"),  # unknown: its own name, escaped by whoever renders it
        (None, None, "unknown"),
    ],
)
def test_every_option_has_one_name(backend: str | None, mode: str | None, name: str) -> None:
    assert catalogue.option_display(backend, mode) == name


def test_every_int8_option_names_its_toolchain_not_a_compile_mode() -> None:
    for info in catalogue.BACKENDS.values():
        for mode in info.quantized_modes:
            name = catalogue.option_display(info.name, mode)
            assert "int8" in name and f"({mode})" not in name and f"mode {mode}" not in name, name


def test_an_exported_openvino_int8_ir_is_named_the_same_everywhere() -> None:
    eager = measurement("eager", median_ms=20.0, device="cpu")
    ov = measurement("openvino", mode="int8", median_ms=5.0, eager_ms=20.0, device="cpu")
    ov["serialized_bytes"] = 3_000_000
    ov["accuracy"]["quantized"] = {"cosine": 0.999, "top1_agreement": 1.0, "top1_rows": 4}
    rows = run(eager, ov, device="cpu")
    rec = decide(EDGE, inspection(), rows)
    assert (rec["backend"], rec["mode"]) == ("openvino", "int8")
    assert headline(rec, EDGE) == f"Use {IR} on CPU"
    assert rec["summary"].startswith(f"Use {IR} on CPU.")
    assert ranked_line(rec, EDGE, rows).startswith(f"ranked: Use {IR} on CPU (confidence ")
    analysis = {"model_name": "m.pt2", "context": EDGE, "inspection": inspection(), "measurements": rows}
    report = render({**analysis, "recommendation": rec}, "markdown")
    assert f"**Use {IR} on CPU**" in report and "torch.compile with OpenVINO" not in report
    assert "convert_model" in rec["snippet"] and "torch.compile" not in rec["snippet"]
