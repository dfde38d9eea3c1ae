"""Racing on a real model (issue 46 item 2): a first window racing a leader it cannot reach stops at its floor of
samples instead of timing to its policy, and its row stays in the results with its numbers and the reason. Which
rows a round leaves out is tests/harness/test_measure_noise.py's; the rule itself tests/core/test_racing.py's."""

from __future__ import annotations

import pytest

from advisor.core import noise
from advisor.core.decision import racing
from advisor.core.decision.engine import decide
from advisor.harness.measurement import measure_model
from advisor.harness.measurement import run as measurement_run
from advisor.harness.measurement.timing import TimingPolicy

pytestmark = pytest.mark.slow

# a window this policy times in full takes at least 1 s and 200 samples a side: racing stops well before
LONG = TimingPolicy(
    min_iters=200, min_time_s=1.0, max_time_s=2.0, ci_target=0.001, warmup_iters=2, warm_cache=False, profile=False
)
PRODUCTION = {"stage": "production", "model_changes": "frozen", "target": "cpu"}


def test_an_option_clearly_behind_stops_being_timed_and_says_why(mlp_file: str, monkeypatch) -> None:
    # the leader's interval starts at 1e6x eager: no real option reaches it, so every raced window is clearly behind
    out_of_reach = racing.RaceBound("inductor:max-autotune", 1e6)
    monkeypatch.setattr(measurement_run.racing, "race_bound", lambda run, context: out_of_reach)
    run = measure_model(
        mlp_file, backends=["onnxruntime"], device="cpu", timing=LONG, plan_context=PRODUCTION, remeasure=False
    )
    eager, onnx = run["measurements"]
    assert onnx["status"] in ("ok", "fail_accuracy"), onnx
    assert "eliminated" not in eager  # the baseline is never raced
    floor = min(LONG.min_iters, LONG.loaded_min_iters)
    # stopped once both sides had their floor of samples: the slower side (eager, on a loaded node, where the fast
    # side's blocks pile up samples while eager reaches its floor) stays far below the policy's 200
    assert floor <= onnx["latency"]["n"], onnx["latency"]
    assert min(onnx["latency"]["n"], onnx["eager_latency"]["n"]) < LONG.min_iters, (
        onnx["latency"],
        onnx["eager_latency"],
    )
    assert onnx["eliminated"].startswith(
        racing.ACCURACY_FAILED if onnx["status"] == "fail_accuracy" else "clearly behind inductor:max-autotune"
    )
    assert run["quality"]["eliminated"] == {"onnxruntime:default": onnx["eliminated"]}
    assert onnx["speedup_ci"] and onnx["latency"]["median_ms"] > 0  # its numbers stay in the results
    assert decide(PRODUCTION, None, run)["backend"] is not None


def test_a_context_where_compile_time_may_decide_times_every_window_in_full(mlp_file: str, monkeypatch) -> None:
    everything_stops = racing.RaceBound("x:y", 1e6, "z:w", 1e-6)  # every window would be both behind and ahead
    monkeypatch.setattr(measurement_run.racing, "race_bound", lambda run, context: everything_stops)
    prototype = {"stage": "prototype", "target": "cpu"}
    run = measure_model(
        mlp_file, backends=["onnxruntime"], device="cpu", timing=LONG, plan_context=prototype, remeasure=False
    )
    onnx = run["measurements"][1]
    assert onnx["status"] in ("ok", "fail_accuracy") and "eliminated" not in onnx, onnx
    assert "eliminated" not in run["quality"] and "stopped_ahead" not in onnx


def test_an_option_clearly_ahead_stops_its_window_unless_its_timings_are_too_loose_to_rank_on(
    mlp_file: str, monkeypatch
) -> None:
    # every other option so far reached 1e-6x eager at most: any accurate option is ahead of it
    field = racing.RaceBound("eager:default", 1.0, "inductor:default", 1e-6)
    monkeypatch.setattr(measurement_run.racing, "race_bound", lambda run, context: field)
    run = measure_model(
        mlp_file, backends=["onnxruntime"], device="cpu", timing=LONG, plan_context=PRODUCTION, remeasure=False
    )
    onnx = run["measurements"][1]
    assert onnx["status"] in ("ok", "fail_accuracy") and "eliminated" not in onnx, onnx
    if onnx.get("stopped_ahead"):
        assert onnx["stopped_ahead"].startswith("clearly ahead:") and "inductor:default" in onnx["stopped_ahead"]
        assert min(onnx["latency"]["n"], onnx["eager_latency"]["n"]) < LONG.min_iters
        assert not noise.row_noise(onnx), onnx  # stopping early never leaves the row noisy
        low, high = onnx["speedup_ci"]
        assert high / low <= noise.HIGH_CONFIDENCE_MAX_CI_RATIO
    else:  # a loaded node: its window ran on because its samples were too spread to rank on
        assert (
            onnx["status"] == "fail_accuracy"
            or noise.row_noise(onnx)
            or (onnx["speedup_ci"][1] / onnx["speedup_ci"][0] > noise.HIGH_CONFIDENCE_MAX_CI_RATIO)
        ), onnx
