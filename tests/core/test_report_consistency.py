"""The report agrees with itself (issue 27, item 6): a skipped variant's plan text names the recommendation the
report makes, and TorchScript graph-break locations name the user's source line or say they are generated code."""

from __future__ import annotations

import inspect

import pytest
import torch

from advisor.core.decision.engine import decide
from advisor.core.decision.plan_pruning import skip_reason
from advisor.core.report import render
from tests.support.fixtures_decide import measurement, run

PROTOTYPE = {"stage": "prototype", "target": "cpu"}


def _prototype_run_where_a_later_backend_wins() -> tuple[dict, str]:
    """eager, Inductor default (beats eager: max-autotune is skipped naming inductor:default), then ONNX Runtime,
    measured after the skip, compiling and running faster: the recommendation becomes ONNX Runtime."""
    eager = measurement("eager", median_ms=10.0, device="cpu")
    default = measurement("inductor", median_ms=5.0, eager_ms=10.0, compile_s=20.0, device="cpu")
    reason = skip_reason(PROTOTYPE, None, run(eager, default, device="cpu"), "inductor", "max-autotune")
    assert reason is not None and "(inductor:default)" in reason
    skipped = measurement("inductor", mode="max-autotune", status="skipped", reason=reason, device="cpu")
    ort = measurement("onnxruntime", median_ms=2.0, eager_ms=10.0, compile_s=3.0, device="cpu")
    return run(eager, default, skipped, ort, device="cpu"), reason


def test_the_skip_text_names_the_recommendation_the_report_makes() -> None:
    final, stored = _prototype_run_where_a_later_backend_wins()
    recommendation = decide(PROTOTYPE, None, final)
    assert (recommendation["backend"], recommendation["mode"]) == ("onnxruntime", "default")
    why = recommendation["why_not"]["inductor:max-autotune"]
    assert "(onnxruntime:default)" in why and "(inductor:default)" not in why
    step = next(s for s in recommendation["path"] if s["rule"] == "plan_skipped_variants")
    assert step["evidence"]["skipped"] == {"inductor:max-autotune": why}
    analysis = {"model_name": "mobilenet.pt2", "context": PROTOTYPE, "inspection": None, "measurements": final}
    analysis["recommendation"] = recommendation
    for fmt in ("markdown", "text"):
        report = " ".join(render(analysis, fmt).split())
        assert "could not change the recommendation (inductor:default)" not in report, fmt
        assert "could not change the recommendation (onnxruntime:default)" in report, fmt


def test_a_skip_the_final_numbers_no_longer_support_says_so() -> None:
    """In production (steady state wins) a 1000x max-autotune would beat the final pick: the stale skip must not
    claim it could not change the recommendation."""
    final, _ = _prototype_run_where_a_later_backend_wins()
    production = {"stage": "production", "target": "cpu", "model_changes": "frozen"}
    recommendation = decide(production, None, final)
    why = recommendation["why_not"]["inductor:max-autotune"]
    assert "could not change the recommendation" not in why
    assert "not measured" in why and recommendation["backend"] in why and "inductor:default" in why


class DataDependent(torch.nn.Module):
    """torch.nonzero has a data-dependent output shape: Dynamo breaks the graph there."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        idx = torch.nonzero(y > 0)  # the break
        return y.sum() + idx.shape[0]


BREAK_LINE = f"{__name__.rsplit('.', 1)[-1]}.py:{inspect.getsourcelines(DataDependent.forward)[1] + 2} in forward"


def _torchscript(tmp_path, how: str) -> str:
    x = torch.randn(4, 8)
    module = DataDependent().eval()
    scripted = torch.jit.trace(module, (x,)) if how == "trace" else torch.jit.script(module)
    torch.jit.save(scripted, str(tmp_path / "m.pt"))
    torch.save((x,), tmp_path / "inputs.pt")
    return str(tmp_path / "m.pt")


@pytest.mark.parametrize("how", ["trace", "script"])
def test_torchscript_graph_breaks_name_the_source_line_torchscript_kept(tmp_path, how: str) -> None:
    from advisor.harness.graph_breaks import find_graph_breaks
    from advisor.harness.loading import load_model

    loaded = load_model(_torchscript(tmp_path, how), inputs_file=str(tmp_path / "inputs.pt"))
    breaks = find_graph_breaks(loaded.module, loaded.example_inputs, script_module=loaded.script_module)
    [location] = [r["location"] for r in breaks["reasons"]]
    assert location.startswith(BREAK_LINE) and "aten.nonzero" in location, location
    # without the TorchScript module the location says it is generated code instead of posing as a file
    [bare] = [r["location"] for r in find_graph_breaks(loaded.module, loaded.example_inputs)["reasons"]]
    assert bare.startswith("generated code (<eval_with_key>") and "aten.nonzero" in bare, bare


def test_an_exported_program_graph_break_names_the_line_export_recorded(tmp_path) -> None:
    from advisor.harness.inspection import inspect_model

    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(DataDependent().eval(), (torch.randn(4, 8),)), str(path))
    [location] = [r["location"] for r in inspect_model(str(path))["graph_breaks"]["reasons"]]
    assert location.startswith(BREAK_LINE), location
