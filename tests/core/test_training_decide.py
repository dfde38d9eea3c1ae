"""Scenario: the same model deployed for inference and for training; the training figures drive a training decision.

Torch-free: synthetic MeasurementRuns (advisor.core.results shapes) of one model, once per workload.
"""

from __future__ import annotations

from typing import Any

import pytest

from advisor.core.decision.break_even import format_calls
from advisor.core.decision.engine import decide
from advisor.core.report import render
from tests.support.fixtures_decide import inspection, measurement, run

CONTEXT = {"stage": "production", "target": "npu", "expected_calls_per_compile": 5_000}


def as_training(measurement_run: dict[str, Any]) -> dict[str, Any]:
    return {
        **measurement_run,
        "workload": "training",
        "measurements": [dict(row, workload="training") for row in measurement_run["measurements"]],
    }


def inference_run(torchair_memory_mb: float = 300.0) -> dict[str, Any]:
    """Per call: eager 20 ms; Inductor 12.4 ms after a 3.2 s compile; TorchAir 8.2 ms after 28.7 s."""
    return run(
        measurement("eager", median_ms=20.0, memory_mb=200.0),
        measurement("inductor", median_ms=12.4, compile_s=3.2, eager_ms=20.0, memory_mb=250.0),
        measurement(
            "torchair", mode="max-autotune", median_ms=8.2, compile_s=28.7, eager_ms=20.0, memory_mb=torchair_memory_mb
        ),
    )


def training_run(torchair_memory_mb: float = 450.0) -> dict[str, Any]:
    """Per step: eager 60 ms; Inductor 40 ms after a 20 s joint-graph compile; TorchAir 20 ms after 80 s.
    Gradients and optimizer state make every training peak larger than the inference one."""
    return as_training(
        run(
            measurement("eager", median_ms=60.0, memory_mb=400.0),
            measurement("inductor", median_ms=40.0, compile_s=20.0, eager_ms=60.0, memory_mb=420.0),
            measurement(
                "torchair",
                mode="max-autotune",
                median_ms=20.0,
                compile_s=80.0,
                eager_ms=60.0,
                memory_mb=torchair_memory_mb,
            ),
        )
    )


def test_same_model_breaks_even_in_calls_for_inference_and_in_steps_for_training():
    served = decide({**CONTEXT, "workload": "inference"}, inspection(), inference_run())
    trained = decide({**CONTEXT, "workload": "training"}, inspection(), training_run())

    # inference: TorchAir's 25.5 s of extra compile pays off after 25.5 s / 4.2 ms = ~6,071 calls > 5,000
    calls = (28.7 - 3.2) / ((12.4 - 8.2) / 1e3)
    assert served["backend"] == "inductor"
    assert served["break_even"]["unit"] == "calls"
    assert served["break_even"]["n_star"] == pytest.approx(calls, rel=0.01)
    assert f"{format_calls(served['break_even']['n_star'])} calls per compile" in served["summary"]
    assert "ms per call" in served["summary"] and "step" not in served["summary"]
    assert "calls per compile; you expect 5,000" in served["why_not"]["torchair:max-autotune"]

    # training: 60 s of extra compile at 20 ms saved per step = 3,000 steps < 5,000 steps per compile
    steps = (80.0 - 20.0) / ((40.0 - 20.0) / 1e3)
    assert (trained["backend"], trained["mode"]) == ("torchair", "max-autotune")
    assert trained["break_even"]["unit"] == "steps"
    assert trained["break_even"]["n_star"] == pytest.approx(steps, rel=0.01)
    assert f"{format_calls(trained['break_even']['n_star'])} steps per compile" in trained["summary"]
    assert "ms per step" in trained["summary"] and " calls" not in trained["summary"]
    assert "torchair:max-autotune ran 2.00x as fast as inductor:default" in trained["why_not"]["inductor:default"]
    assert any("read as steps per compile" in c["issue"] for c in trained["caveats"])
    assert not any("not supported yet" in c["issue"] for c in trained["caveats"])


def test_memory_budget_is_applied_to_the_training_peak():
    budget = {**CONTEXT, "memory_budget_mb": 500.0}
    served = decide({**budget, "workload": "inference"}, inspection(), inference_run(torchair_memory_mb=300.0))
    trained = decide({**budget, "workload": "training"}, inspection(), training_run(torchair_memory_mb=700.0))
    assert "memory" not in served["why_not"].get("torchair:max-autotune", "")
    reason = trained["why_not"]["torchair:max-autotune"]
    assert "training peak" in reason and "700 MiB > 500 MiB" in reason
    assert trained["backend"] == "inductor"


def test_inference_numbers_do_not_drive_a_training_decision():
    rec = decide({**CONTEXT, "workload": "training"}, inspection(), inference_run())
    assert rec["measured"] is False
    assert any("measurements are of inference, not training" in c["issue"] for c in rec["caveats"])


def test_report_labels_a_training_run_per_step():
    context = {**CONTEXT, "workload": "training"}
    measurements = training_run()
    analysis = {
        "model_name": "bert",
        "context": context,
        "inspection": inspection(),
        "measurements": measurements,
        "recommendation": decide(context, inspection(), measurements),
    }
    markdown = render(analysis, "markdown")
    assert "## Measurements per training step" in markdown
    assert "step median [95% CI]" in markdown and "grad accuracy" in markdown
    assert "steps per compile" in markdown
    text = render(analysis, "text")
    assert "training step" in text and "step median" in text


def test_dashboard_detail_labels_a_training_analysis_in_steps():
    from app.web.detail_view import detail_view

    context = {**CONTEXT, "workload": "training"}
    measurements = training_run()
    recommendation = decide(context, inspection(), measurements)
    analysis = {
        "id": 1,
        "status": "done",
        "model_name": "bert",
        "context": context,
        "inspection": inspection(),
        "measurements": measurements,
        "recommendation": recommendation,
    }
    view = detail_view(analysis)
    assert view.training and view.unit == "step"
    assert "vs number of steps" in view.charts["break_even"]
    served = detail_view({**analysis, "context": {**CONTEXT, "workload": "inference"}, "measurements": inference_run()})
    assert not served.training and served.unit == "call"
