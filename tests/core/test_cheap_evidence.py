"""The inspection rules out the ONNX Runtime options before they start (advisor.core.decision.cheap_evidence): a
graph calling a custom op the ONNX exporter cannot take is not exported for seconds only to fail; the row says
"skipped" and why, and the decision reads it as not measured, not as a failure of the option. Torch-free; the
premise (which ops the exporter takes) is tests/harness/test_onnx_custom_ops.py's."""

from __future__ import annotations

from typing import Any

import pytest

from advisor.core import catalogue
from advisor.core.decision.cheap_evidence import onnx_untranslatable_ops, skip_reason
from advisor.core.decision.engine import decide
from advisor.core.report import render
from tests.support.fixtures_decide import inspection, measurement, op, run

PROTOTYPE = {"stage": "prototype", "target": "cpu"}
OPAQUE = "mylib.scale.default"


def custom(name: str = OPAQUE, onnx: Any = "none") -> dict[str, Any]:
    entry = op(name, inductor="fallback", torchair="none")
    entry["coverage"]["onnx"] = onnx
    return entry


def with_custom(*ops: dict[str, Any]) -> dict[str, Any]:
    return inspection(custom_ops=list(ops))


@pytest.mark.parametrize("mode", ["default", catalogue.ORT_INT8_MODE])
def test_an_opaque_custom_op_rules_out_both_onnx_runtime_options(mode: str) -> None:
    reason = skip_reason(with_custom(custom()), "onnxruntime", mode)
    assert reason is not None and reason.startswith("not measured: the graph calls mylib.scale.default, a custom op")
    assert "no translation" in reason and "decompose" in reason and "torch.onnx.export would fail" in reason
    assert f"-b onnxruntime:{mode}" in reason, "how to measure it anyway"


@pytest.mark.parametrize(("backend", "mode"), [("eager", "default"), ("inductor", "default"), ("openvino", "int8")])
def test_the_options_that_do_not_export_to_onnx_are_never_ruled_out(backend: str, mode: str) -> None:
    assert skip_reason(with_custom(custom()), backend, mode) is None


@pytest.mark.parametrize(
    "coverage",
    [
        {"onnx": "decomposed"},  # a CompositeImplicitAutograd kernel: the export inlines it
        {"onnx": "translated"},  # quantized_decomposed::, torchvision:: ops: the exporter's registry has them
        {},  # an inspection from before the field, a stubbed op, no exporter where it was inspected: unknown
    ],
)
def test_an_op_the_exporter_takes_or_that_was_not_judged_rules_nothing_out(coverage: dict) -> None:
    entry = op(OPAQUE, inductor="fallback")
    entry["coverage"].update(coverage)
    assert skip_reason(with_custom(entry), "onnxruntime", "default") is None
    assert skip_reason(inspection(), "onnxruntime", "default") is None, "no custom ops"
    assert skip_reason(None, "onnxruntime", "default") is None, "no inspection"


def test_every_opaque_op_is_named_once_and_a_long_list_is_counted() -> None:
    ops = [custom(f"mylib.op{i}.default") for i in range(9)] + [custom("mylib.op0.default"), custom(onnx="decomposed")]
    assert len(onnx_untranslatable_ops(with_custom(*ops))) == 9
    reason = skip_reason(with_custom(*ops), "onnxruntime", "default")
    assert reason is not None and "custom ops the ONNX exporter" in reason and "and 5 more" in reason


HOSTILE: list[Any] = (
    [
        "custom_ops",
        [1, 2],
        {"custom_ops": {"name": OPAQUE, "coverage": {"onnx": "none"}}},
        {"custom_ops": "none"},
        {"custom_ops": [None, 7, "x", [OPAQUE], {"name": OPAQUE}, {"name": OPAQUE, "coverage": "none"}]},
    ]
    + [
        {"custom_ops": [{"name": OPAQUE, "coverage": {"onnx": value}}]}
        for value in ("NONE", "none ", ["none"], {"none": True}, 0, None, True, "x" * 100_000)
    ]
    + [
        {"custom_ops": [{"name": name, "coverage": {"onnx": "none"}}]}
        for name in (
            None,
            7,
            ["mylib", "scale"],
            "",
            "scale",  # no namespace
            "aten.add.Tensor",  # a built-in op is not a custom op, whatever the child says
            "prims.add.default",
            "higher_order.cond",
            "mylib.scale.default\n## injected heading",
            "[click](http://example.com).x",
            "mylib." + "x" * 10_000 + ".default",
            "a.b.c.d",
        )
    ]
)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_garbled_inspection_neither_raises_nor_rules_anything_out(hostile: Any) -> None:
    """The inspection is JSON from a sandboxed child that ran the user's model: any shape, any size."""
    assert onnx_untranslatable_ops(hostile) == []
    assert skip_reason(hostile, "onnxruntime", "default") is None


def test_an_oversized_op_list_is_read_only_up_to_the_inspections_bound() -> None:
    """Past MAX_OPS entries (what the result model accepts) nothing is read: a child cannot make the parent walk
    an unbounded list, and an opaque op hidden after a flood of garbage rules nothing out."""
    flood = [{"name": "mylib.junk.default", "coverage": {"onnx": "translated"}}] * 200_000 + [custom()]
    assert skip_reason({"custom_ops": flood}, "onnxruntime", "default") is None


def test_the_skipped_row_reads_as_not_measured_in_the_decision_and_the_report() -> None:
    insp = with_custom(custom())
    reason = skip_reason(insp, "onnxruntime", "default")
    assert reason is not None
    rows = run(
        measurement("eager", median_ms=10.0, device="cpu"),
        measurement("inductor", median_ms=5.0, eager_ms=10.0, compile_s=1.0, device="cpu"),
        measurement("onnxruntime", status="skipped", reason=reason, device="cpu"),
        device="cpu",
    )
    recommendation = decide(PROTOTYPE, insp, rows)
    assert (recommendation["backend"], recommendation["mode"]) == ("inductor", "default")
    step = next(s for s in recommendation["path"] if s["rule"] == "plan_skipped_variants")
    assert step["evidence"]["skipped"] == {"onnxruntime:default": reason}
    assert recommendation["why_not"]["onnxruntime:default"] == reason, "its own reason, not an error status"
    analysis = {"context": PROTOTYPE, "inspection": insp, "measurements": rows, "recommendation": recommendation}
    text = " ".join(render(analysis, "text").split())
    assert "skipped (see why not)" in render(analysis, "markdown"), "its row in the measurements table"
    assert "onnxruntime:default: not measured: the graph calls mylib.scale.default, a custom op" in text
    assert "mylib.scale.default (Inductor: fallback, TorchAir: none, ONNX export: none)" in text


def test_the_result_model_bounds_the_field_and_reads_an_inspection_without_it() -> None:
    """What a worker posts is validated (advisor.core.results): the field is a bounded label; an inspection stored
    before it existed still validates, its ops' ONNX export unknown (so nothing is ruled out: measured)."""
    from pydantic import ValidationError

    from advisor.core.results import Inspection

    assert Inspection.model_validate(with_custom(custom())).custom_ops[0].coverage.onnx == "none"
    older = Inspection.model_validate(with_custom(op(OPAQUE, inductor="fallback")))
    assert older.custom_ops[0].coverage.onnx is None
    with pytest.raises(ValidationError):
        Inspection.model_validate(with_custom(custom(onnx="none" * 1_000)))
