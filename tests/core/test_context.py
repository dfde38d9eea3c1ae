"""Deployment context: defaults, field-by-field errors, help texts; importable without torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from advisor.core.context import ContextError, DeploymentContext, context_field_help, parse_context


def test_empty_context_gets_documented_defaults() -> None:
    context = parse_context({})
    assert context.stage == "production"
    assert context.target == "npu"
    assert context.fleet == "single"
    assert context.workload == "inference"
    assert context.optimizer == "sgd"
    assert context.expected_calls_per_compile is None
    assert context.ships_compile_cache is False
    assert context.shape_ranges == []


def test_full_context_round_trips() -> None:
    data = {
        "stage": "edge",
        "model_changes": "frozen",
        "workload": "training",
        "optimizer": "adamw",
        "target": "cpu",
        "fleet": "mixed",
        "expected_calls_per_compile": 5000,
        "latency_target_ms": 12.5,
        "memory_budget_mb": 512,
        "needs_offline_export": True,
        "resource_constrained": True,
        "ships_compile_cache": True,
        "shape_ranges": [{"input": "x", "dim": 0, "min": 1, "max": 64}],
        "shape_sweep": [{"x": [1, 64]}, {"x": [64, 64]}],
        "decode_tokens": 64,
        "shape_traffic": [{"shapes": {"x": [1, 64]}, "weight": 7}, {"shapes": {"x": [3, 64]}, "weight": 1}],
        "max_graphs": 4,
        "accuracy_tolerance": {
            "atol": 1e-3,
            "rtol": 1e-3,
            "quantized": {"min_cosine": 0.98, "min_top1_agreement": 0.8},
        },
    }
    context = parse_context(data)
    assert context.model_dump() == data


def test_every_problem_is_reported_with_its_field() -> None:
    with pytest.raises(ContextError) as info:
        parse_context(
            {
                "stage": "staging",
                "expected_calls_per_compile": 0,
                "latency_target_ms": -1,
                "colour": "blue",
                "optimizer": "lion",
                "shape_ranges": [{"input": "x", "dim": 0, "min": 8, "max": 2}],
            }
        )
    errors = {e["field"]: e["message"] for e in info.value.errors}
    assert set(errors) == {
        "stage",
        "expected_calls_per_compile",
        "latency_target_ms",
        "colour",
        "optimizer",
        "shape_ranges.0",
    }
    assert errors["colour"] == "unknown field"
    assert "prototype" in errors["stage"] and "edge" in errors["stage"]
    assert "min (8) is larger than max (2)" in errors["shape_ranges.0"]
    assert "stage" in str(info.value)


def test_non_object_is_a_context_error() -> None:
    with pytest.raises(ContextError) as info:
        parse_context(["production"])  # type: ignore[arg-type]
    assert info.value.errors[0]["message"].startswith("expected a JSON object")


def test_every_field_has_help_text() -> None:
    helps = context_field_help()
    assert set(helps) == set(DeploymentContext.model_fields)
    assert all(len(text) > 20 for text in helps.values())


def test_call_unit_follows_the_workload() -> None:
    assert parse_context({}).call_unit == "calls"
    assert parse_context({"workload": "training"}).call_unit == "steps"


def test_decision_modules_import_without_torch() -> None:
    code = (
        "import sys\n"
        "import advisor.core.context, advisor.core.decision.engine, advisor.core.report\n"
        "from advisor.core.decision.engine import decide\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from tests.support.fixtures_decide import blog_run, npu_op_inspection\n"
        "rec = decide({}, npu_op_inspection(), blog_run())\n"
        "assert rec['snippet']\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
