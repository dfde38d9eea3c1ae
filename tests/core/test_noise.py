"""Noise-aware verdicts on synthetic runs: a wide CI is not "faster", drift and load make a run noisy, confidence
follows both, every noisy row is named, noisy runs are never cache hits, and why-not texts come from the rows."""

from __future__ import annotations

from typing import Any

import pytest

from advisor.core import noise
from advisor.core.decision.engine import decide
from tests.support.fixtures_decide import inspection, latency, measurement, run

PRODUCTION = {"stage": "production", "expected_calls_per_compile": 10**6, "target": "cpu"}


def with_speedup_ci(row: dict[str, Any], low: float, high: float) -> dict[str, Any]:
    return {**row, "speedup_ci": [low, high]}


def step(rec: dict[str, Any], rule: str) -> dict[str, Any]:
    return next(s for s in rec["path"] if s["rule"] == rule)


def caveat_text(rec: dict[str, Any]) -> str:
    return " ".join(c["issue"] for c in rec["caveats"])


def test_a_speedup_whose_ci_spans_more_than_the_set_ratio_is_unresolved_and_never_high_confidence() -> None:
    # the ResNet seen under load: 100x with a 95% CI of 40.6-178.9x. Its own latency interval lies below eager's, so it
    # is faster than eager (issue 27: a noisy interval must not erase a clearly faster option), at low confidence
    wide = with_speedup_ci(measurement("inductor", median_ms=0.1, eager_ms=10.0, device="cpu"), 40.6, 178.9)
    rows = run(measurement("eager", median_ms=10.0, device="cpu"), wide, device="cpu")
    rec = decide(PRODUCTION, inspection(), rows)
    assert rec["backend"] == "inductor" and rec["confidence"] == "low"
    assert step(rec, "compiled_vs_eager_side_by_side")["evidence"]["options"]["inductor:default"]["verdict"] == (
        "faster"
    )
    assert "40.6-179x" in step(rec, "wide_ci_is_unresolved")["outcome"]
    assert "too wide an interval to rank it against other options" in rec["summary"]
    assert "tied" not in rec["summary"]  # an unresolved option is not a tie: its CI does not overlap eager's
    assert "inductor:default" in caveat_text(rec)


def test_a_ci_within_the_ratio_still_counts_as_faster() -> None:
    rows = run(
        measurement("eager", median_ms=10.0, device="cpu"),
        with_speedup_ci(measurement("inductor", median_ms=5.0, eager_ms=10.0, device="cpu"), 1.8, 2.6),
        device="cpu",
    )
    rec = decide(PRODUCTION, inspection(), rows)
    assert rec["backend"] == "inductor"
    assert rec["confidence"] == "medium"  # hi/lo 1.44: resolved, but too wide for "high"


def test_tight_quiet_run_is_high_confidence_and_not_noisy() -> None:
    rows = run(
        measurement("eager", median_ms=10.0, device="cpu"),
        measurement("inductor", median_ms=5.0, eager_ms=10.2, device="cpu"),
        device="cpu",
    )
    assert not noise.is_noisy(rows)
    rec = decide(PRODUCTION, inspection(), rows)
    assert (rec["backend"], rec["confidence"]) == ("inductor", "high")
    assert "noisy" not in caveat_text(rec).lower()


def test_eager_drift_across_processes_marks_the_whole_run_noisy_and_confidence_low() -> None:
    # the example MLP under load: eager 0.53 ms in its own process, 23.6 ms next to ONNX Runtime ("75x")
    rows = run(
        measurement("eager", median_ms=0.53, device="cpu"),
        measurement("onnxruntime", median_ms=0.3125, compile_s=0.5, eager_ms=23.6, device="cpu"),
        device="cpu",
    )
    quality = noise.assess(rows)
    assert quality["noisy"] and quality["whole_run"] and quality["eager_drift"] == pytest.approx(23.6 / 0.53)
    assert "eager's median moved 44.53x" in quality["reasons"][0]
    assert noise.eager_outliers(rows) == ["onnxruntime:default"]
    rec = decide(PRODUCTION, inspection(), rows)
    assert rec["confidence"] == "low"
    assert "The whole run was noisy" in caveat_text(rec) and "0.53 ms" in caveat_text(rec)
    assert "noisy" in rec["summary"]


def test_bracket_disagreement_and_spread_name_every_noisy_row() -> None:
    drifting = measurement("inductor", median_ms=5.0, eager_ms=10.0, device="cpu")
    drifting["eager_latency"] = {**drifting["eager_latency"], "drift": 0.4}
    spread = measurement("onnxruntime", median_ms=6.0, eager_ms=10.0, device="cpu", verdict="noisy")
    rows = run(measurement("eager", median_ms=10.0, device="cpu"), drifting, spread, device="cpu")
    quality = noise.assess(rows)
    assert quality["noisy"] and not quality["whole_run"]
    assert set(quality["noisy_rows"]) == {"inductor:default", "onnxruntime:default"}
    assert "interleaved blocks disagree" in quality["noisy_rows"]["inductor:default"]
    rec = decide(PRODUCTION, inspection(), rows)
    assert rec["confidence"] == "medium"  # noisy rows: never high; the machine itself was steady
    text = caveat_text(rec)
    assert "inductor:default" in text and "onnxruntime:default" in text


@pytest.mark.parametrize(
    ("start", "end", "noisy"),
    [
        pytest.param(0.5, 1.8, False, id="quiet: the end reading is this run's own process"),
        pytest.param(5.0, 1.0, True, id="loaded before the run"),
        pytest.param(0.3, 4.5, True, id="loaded at the end beyond the run itself"),
    ],
)
def test_load_average_per_core_at_start_and_end(start: float, end: float, noisy: bool) -> None:
    rows = run(
        measurement("eager", median_ms=10.0, device="cpu"),
        measurement("inductor", median_ms=5.0, eager_ms=10.0, device="cpu"),
        device="cpu",
    )
    load = {"start": {"load": start, "cores": 2}, "end": {"load": end, "cores": 2}}
    quality = noise.assess(rows, load=load)
    assert quality["noisy"] is noisy and quality["whole_run"] is noisy
    rows["quality"] = quality
    assert noise.is_noisy(rows) is noisy  # the stored load counts when the run is judged again
    assert (decide(PRODUCTION, inspection(), rows)["confidence"] == "low") is noisy


def test_is_noisy_for_the_dedupe() -> None:
    clean = run(measurement("eager", median_ms=10.0, device="cpu"), device="cpu")
    assert noise.is_noisy(None) is False and noise.is_noisy(clean) is False
    marked = {**clean, "quality": {"noisy": True, "reasons": ["worker said so"]}}
    assert noise.is_noisy(marked) is True  # a worker's verdict stands
    assert noise.is_noisy({"measurements": [{"backend": "eager", "status": "ok", "latency": {"median_ms": "fast"}}]})
    assert noise.is_noisy("not a run") is True  # unreadable: measure again


def test_why_not_on_the_export_path_comes_from_the_measured_rows() -> None:
    rows = run(
        measurement("eager", median_ms=1.0, device="cpu"),
        measurement("inductor", median_ms=0.5, eager_ms=1.0, device="cpu"),
        measurement("onnxruntime", median_ms=0.4, eager_ms=1.0, device="cpu"),
        device="cpu",
    )
    rec = decide({"stage": "edge", "target": "cpu"}, inspection(), rows)
    assert rec["backend"] == "onnxruntime"
    for label in ("eager:default", "inductor:default"):
        why = rec["why_not"][label]
        assert "not measured" not in why and "offline export" in why, why
    assert "onnxruntime:default ran 2.50x as fast as eager:default" in rec["why_not"]["eager:default"]
    assert "onnxruntime:default ran 1.25x as fast as inductor:default" in rec["why_not"]["inductor:default"]


def test_unmeasured_options_still_say_not_measured() -> None:
    rec = decide({"stage": "production", "target": "npu"}, inspection(), None)
    assert all("not measured" in why for why in rec["why_not"].values())


def test_latency_helper_has_no_drift_by_default() -> None:
    assert "drift" not in latency(1.0)  # rows of older workers: no bracket evidence, nothing invented
    assert noise.row_noise(measurement("eager", median_ms=1.0)) == []


def test_report_marks_the_noisy_run_and_the_unresolved_row() -> None:
    from advisor.core.report import render

    wide = with_speedup_ci(measurement("inductor", median_ms=0.1, eager_ms=23.6, device="cpu"), 40.6, 178.9)
    rows = run(measurement("eager", median_ms=0.53, device="cpu"), wide, device="cpu")
    analysis = {
        "model_name": "m.pt2",
        "context": PRODUCTION,
        "inspection": inspection(),
        "measurements": rows,
        "recommendation": decide(PRODUCTION, inspection(), rows),
    }
    md = render(analysis, "markdown")
    assert "confidence low | measured on cpu | NOISY run (see the caveats)" in md
    assert "236.00x [40.60-178.90] faster, unresolved |" in md  # wide, yet entirely above 1x: faster
    assert "The whole run was noisy" in md and "not measured" not in md


def test_shared_reasons_name_the_load_before_the_run_and_the_busiest_timed_window() -> None:
    rows = run(
        measurement("eager", median_ms=10.0, device="cpu"),
        measurement("inductor", median_ms=5.0, eager_ms=10.0, device="cpu"),
        measurement("onnxruntime", median_ms=6.0, eager_ms=10.0, device="cpu"),
        device="cpu",
    )
    rows["environment"].update(torch_threads=4, load={"before": {"load": 3.0, "cores": 4}})
    rows["measurements"][0]["timing_load"] = {"start": {"load": 5.0, "cores": 4}, "end": None}
    rows["measurements"][1]["timing_load"] = {"start": {"load": 8.0, "cores": 4}, "end": {"load": 8.0, "cores": 4}}
    rows["measurements"][2]["timing_load"] = {"start": {"load": None, "cores": 4}, "end": {"load": 9.0, "cores": 0}}
    assert noise.shared_reasons(rows) == [
        "load average 3.00 on 4 core(s) before the run (0.75 per core)",
        # the first of equal readings counts; the child's own 4 threads are discounted; unreadable ones are skipped
        "load average 8.00 on 4 core(s) at the start of inductor:default's timed window, 1.00 per core besides the "
        "measuring child's own 4 thread(s)",
    ]
    # own threads beyond the cores count as one per core; a quiet node, and a run without readings, say nothing
    rows["environment"].update(torch_threads=16, load={"before": {"load": 2.8, "cores": 4}})
    assert noise.shared_reasons(rows) == [
        "load average 8.00 on 4 core(s) at the start of inductor:default's timed window, 1.00 per core besides the "
        "measuring child's own 4 thread(s)"
    ]
    rows["measurements"][1]["timing_load"] = None
    assert noise.shared_reasons(rows) == []
    assert noise.shared_reasons(None) == [] and noise.shared_reasons({"environment": None}) == []
