"""The premise of advisor.core.decision.cheap_evidence, with the installed torch, and the rule in a real measurement.

`torch.onnx.export(dynamo=True)` (the ONNX Runtime options' export) fails on a custom op it has neither a
translation nor a decomposition for, and exports one with a CompositeImplicitAutograd kernel; the inspection records
which (OpCoverage.onnx), and a measurement for a context then skips the ONNX Runtime options of a graph with an
opaque op before any export, while a variant asked for by its mode is still measured and fails with the exporter's
own error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from advisor.core.decision import cheap_evidence
from advisor.harness import coverage
from advisor.harness.inspection import inspect_model
from advisor.harness.measurement import measure_model
from advisor.harness.measurement.timing import TimingPolicy
from tests.support import models

pytestmark = pytest.mark.slow

FAST = TimingPolicy(min_iters=10, min_time_s=0.05, max_time_s=0.3, warmup_iters=2, warm_cache=False, dynamic_sizes=0)
PROTOTYPE = {"stage": "prototype", "target": "cpu"}


@torch.library.custom_op("advisor_cheap::opaque_scale", mutates_args=())
def opaque_scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@opaque_scale.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


_LIB = torch.library.Library("advisor_cheap", "FRAGMENT")  # noqa: TOR901 - test-only registration
_LIB.define("composite_scale(Tensor x) -> Tensor")
_LIB.impl("composite_scale", lambda x: x.sin() * 2, "CompositeImplicitAutograd")


class CallsOp(torch.nn.Module):
    def __init__(self, op_name: str) -> None:
        super().__init__()
        self.op_name = op_name
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return getattr(torch.ops.advisor_cheap, self.op_name)(self.proj(x))


class CallsMkldnnLinear(torch.nn.Module):
    """A graph with an opaque op every CPU torch process knows (torch's own mkldnn::), so the measuring child,
    which has none of the test's registrations, runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.proj.weight, self.proj.bias, "relu", [None], "")


def _export_onnx(module: torch.nn.Module) -> None:
    with torch.no_grad():
        torch.onnx.export(module.eval(), (torch.randn(2, 8),), dynamo=True)


def test_an_opaque_custom_op_fails_the_onnx_export_and_is_recorded_as_such(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="(?i)convert"):
        _export_onnx(CallsOp("opaque_scale"))
    assert coverage.onnx_export_status(torch.ops.advisor_cheap.opaque_scale.default) == "none"
    path = models.export_to(tmp_path / "opaque.pt2", CallsOp("opaque_scale").eval(), (torch.randn(2, 8),))
    inspection = inspect_model(path)
    (custom,) = inspection["custom_ops"]
    assert custom["name"] == "advisor_cheap.opaque_scale.default" and custom["coverage"]["onnx"] == "none"
    reason = cheap_evidence.skip_reason(inspection, "onnxruntime", "default")
    assert reason is not None and "advisor_cheap.opaque_scale.default" in reason


def test_a_custom_op_that_decomposes_exports_and_is_not_ruled_out(tmp_path: Path) -> None:
    _export_onnx(CallsOp("composite_scale"))  # the exporter inlines its CompositeImplicitAutograd kernel
    path = models.export_to(tmp_path / "composite.pt2", CallsOp("composite_scale").eval(), (torch.randn(2, 8),))
    inspection = inspect_model(path)
    (custom,) = inspection["custom_ops"]  # torch.export keeps it in the saved graph: a custom op there
    assert custom["name"] == "advisor_cheap.composite_scale.default"
    assert custom["coverage"]["onnx"] == "decomposed"
    assert cheap_evidence.skip_reason(inspection, "onnxruntime", "default") is None


def test_a_custom_op_the_exporter_translates_is_recorded_as_translated() -> None:
    """quantized_decomposed:: is outside aten/prims (a PT2E model's custom op) and the exporter has it."""
    import torch.ao.quantization.fx._decomposed  # noqa: F401 - registers quantized_decomposed::

    assert coverage.onnx_export_status(torch.ops.quantized_decomposed.quantize_per_tensor.default) == "translated"


def test_the_inspections_table_of_translated_custom_ops_is_the_installed_exporters() -> None:
    """The inspection reads a table (importing the exporter's registry costs ~2 s per inspection); with another
    torch or onnxscript this fails until `python -m advisor.harness.coverage --write-onnx-table` rewrites it."""
    live = coverage.live_onnx_translated_ops()
    assert live is not None, "the installed exporter's registry could not be read"
    assert coverage._onnx_translated_ops() == live
    assert "quantized_decomposed.quantize_per_tensor.default" in live and "aten.relu.default" not in live


@pytest.fixture(scope="module")
def mkldnn_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch has no mkldnn:: ops")
    torch.manual_seed(0)
    module = CallsMkldnnLinear().eval()
    path = models.export_to(tmp_path_factory.mktemp("mkldnn") / "mkldnn.pt2", module, (torch.randn(4, 8),))
    inspection = inspect_model(path)
    assert [op["coverage"].get("onnx") for op in inspection["custom_ops"]] == ["none"]
    return path, inspection


def test_a_measurement_skips_onnx_runtime_for_an_opaque_op_before_any_export(mkldnn_model: tuple[str, dict]) -> None:
    path, inspection = mkldnn_model
    events: list[dict] = []
    run = measure_model(
        path,
        backends=["eager", "onnxruntime"],
        timing=FAST,
        plan_context=PROTOTYPE,
        inspection=inspection,
        progress=events.append,
        remeasure=False,
    )
    eager, ort = run["measurements"]
    assert eager["status"] == "ok", eager["reason"]
    assert (ort["backend"], ort["mode"], ort["status"]) == ("onnxruntime", "default", "skipped")
    assert ort["reason"].startswith("not measured: the graph calls mkldnn._linear_pointwise.default, a custom op")
    assert ort["compile_s_cold"] is None and ort["latency"] is None
    assert [e.get("stage") for e in events if e.get("backend") == "onnxruntime"] == ["skipped"], "no export began"


def test_an_option_asked_for_by_its_mode_is_measured_and_fails_with_the_exporters_error(
    mkldnn_model: tuple[str, dict],
) -> None:
    path, inspection = mkldnn_model
    run = measure_model(
        path,
        backends=["onnxruntime:default"],
        timing=FAST,
        plan_context=PROTOTYPE,
        inspection=inspection,
        remeasure=False,
    )
    ort = run["measurements"][1]
    assert ort["status"] not in ("ok", "skipped"), "the premise: its export fails"
    assert "not measured" not in (ort["reason"] or "")
