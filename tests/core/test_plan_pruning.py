"""A plan that follows the context (advisor.core.decision.plan_pruning): a variant is left out only when no result
of its own could change the recommendation, and the skip is visible in the decision. Torch-free."""

from __future__ import annotations

import pytest

from advisor.core.decision.engine import decide
from advisor.core.decision.plan_pruning import best_case_row, skip_reason
from tests.support.fixtures_decide import measurement, run

PROTOTYPE = {"stage": "prototype", "target": "cpu"}
PRODUCTION = {"stage": "production", "target": "cpu", "model_changes": "frozen"}


def measured_so_far(inductor_ms: float = 5.0, *, inductor_compile_s: float = 20.0) -> dict:
    """eager at 10 ms, then Inductor's default mode timed side by side with it."""
    return run(
        measurement("eager", median_ms=10.0, device="cpu"),
        measurement("inductor", median_ms=inductor_ms, eager_ms=10.0, compile_s=inductor_compile_s, device="cpu"),
        device="cpu",
    )


def test_a_prototype_skips_max_autotune_once_default_beats_eager() -> None:
    reason = skip_reason(PROTOTYPE, None, measured_so_far(), "inductor", "max-autotune")
    assert reason is not None
    assert "inductor:default" in reason and "prototype" in reason and "20 s" in reason


def test_a_production_model_measures_max_autotune() -> None:
    """Steady state wins there: a faster max-autotune would be recommended, so it must be measured."""
    assert skip_reason(PRODUCTION, None, measured_so_far(), "inductor", "max-autotune") is None


def test_a_prototype_measures_max_autotune_when_default_does_not_beat_eager() -> None:
    """Then max-autotune is the only compiled option that could beat eager: its result can change the answer."""
    assert skip_reason(PROTOTYPE, None, measured_so_far(inductor_ms=10.0), "inductor", "max-autotune") is None


def test_with_expected_calls_the_break_even_decides_whether_it_can_matter() -> None:
    """Many calls per compile: even a small saving per call pays back a slightly longer compile, so measure it.
    (The engine's break-even is what is consulted, not a rule of thumb.)"""
    many_calls = {**PROTOTYPE, "expected_calls_per_compile": 10_000_000}
    assert skip_reason(many_calls, None, measured_so_far(), "inductor", "max-autotune") is None


def test_a_backend_of_its_own_is_always_measured() -> None:
    """Nothing measured bounds ONNX Runtime's compile time, so a fast result of it could win any context."""
    assert skip_reason(PROTOTYPE, None, measured_so_far(), "onnxruntime", "default") is None
    assert skip_reason(PROTOTYPE, None, measured_so_far(), "inductor", "default") is None


def test_nothing_is_skipped_when_the_floor_failed_or_the_numbers_are_off_target() -> None:
    failed = run(
        measurement("eager", median_ms=10.0, device="cpu"),
        measurement("inductor", status="compile_error", reason="boom", device="cpu"),
        device="cpu",
    )
    assert skip_reason(PROTOTYPE, None, failed, "inductor", "max-autotune") is None
    npu_target = {**PROTOTYPE, "target": "npu"}  # measured on cpu: the engine will not use these numbers
    assert skip_reason(npu_target, None, measured_so_far(), "inductor", "max-autotune") is None


def test_the_best_case_compiles_longer_than_its_floor_and_runs_far_faster() -> None:
    floor = measured_so_far()["measurements"][1]
    best = best_case_row(floor, "max-autotune")
    assert best["mode"] == "max-autotune" and best["status"] == "ok"
    assert best["compile_s_cold"] > floor["compile_s_cold"]
    assert best["latency"]["median_ms"] < floor["latency"]["median_ms"] / 100
    assert best["peak_memory_mb"] is None and best["accuracy"]["passed"]
    assert floor["mode"] == "default", "the floor row itself is left untouched"


@pytest.mark.parametrize("context", [PROTOTYPE, {**PROTOTYPE, "stage": "production", "model_changes": "frequent"}])
def test_a_skipped_row_is_a_step_of_the_decision_and_a_why_not(context: dict) -> None:
    so_far = measured_so_far()
    reason = skip_reason(context, None, so_far, "inductor", "max-autotune")
    assert reason is not None
    skipped = measurement("inductor", mode="max-autotune", status="skipped", reason=reason, device="cpu")
    final = run(*so_far["measurements"], skipped, device="cpu")
    recommendation = decide(context, None, final)
    assert (recommendation["backend"], recommendation["mode"]) == ("inductor", "default")
    step = next(s for s in recommendation["path"] if s["rule"] == "plan_skipped_variants")
    assert step["evidence"]["skipped"] == {"inductor:max-autotune": reason}
    assert recommendation["why_not"]["inductor:max-autotune"] == reason


def test_a_compile_that_the_expected_calls_cannot_repay_loses_to_eager() -> None:
    """Faster than eager, but 1,000 calls save 5 s against a 20 s compile: eager, with the reason and the point
    where the compile would pay back."""
    context = {**PRODUCTION, "expected_calls_per_compile": 1_000}
    recommendation = decide(context, None, measured_so_far())
    assert recommendation["backend"] == "eager"
    step = next(s for s in recommendation["path"] if s["rule"] == "compile_repaid_against_eager")
    assert step["evidence"]["n_star_against_eager"] == pytest.approx(4_000)
    assert "4,000" in recommendation["why_not"]["inductor:default"]
    enough = decide({**context, "expected_calls_per_compile": 4_001}, None, measured_so_far())
    assert enough["backend"] == "inductor"
