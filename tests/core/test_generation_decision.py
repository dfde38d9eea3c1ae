"""The decision for a generation workload: decode decides, prefill may want another option (layered by phase).
Synthetic rows (made-up numbers), torch-free."""

from __future__ import annotations

from typing import Any

from advisor.core.decision import decide
from advisor.core.report import render_text
from tests.support.fixtures_decide import measurement, run

CONTEXT = {"stage": "production", "target": "cpu", "workload": "generation", "expected_calls_per_compile": 10**8}


def phase(speedup: float, low: float, high: float, compile_s: float = 0.0) -> dict[str, Any]:
    median = 10.0 / speedup
    return {
        "latency": {"n": 100, "median_ms": median, "ci_low_ms": median * 0.98, "ci_high_ms": median * 1.02},
        "speedup_vs_eager": speedup,
        "speedup_ci": [low, high],
        "compile_s": compile_s,
    }


def generation_row(backend: str, prefill: dict, decode: dict, eager_ms: float) -> dict[str, Any]:
    row = measurement(backend, median_ms=decode["latency"]["median_ms"], eager_ms=eager_ms, device="cpu")
    row["workload"] = "generation"
    row["generation"] = {"prompt_tokens": 16, "decode_tokens": 32, "prefill": prefill, "decode": decode}
    return row


def generation_run(prefill_speedup: tuple[float, float, float]) -> dict[str, Any]:
    eager = generation_row("eager", phase(1.0, 1.0, 1.0), phase(1.0, 1.0, 1.0), 10.0)
    inductor = generation_row("inductor", phase(*prefill_speedup, compile_s=20.0), phase(2.0, 1.9, 2.1, 15.0), 10.0)
    measured = run(eager, inductor, device="cpu")
    measured["workload"] = "generation"
    return measured


def test_eager_prefill_and_compiled_decode_is_a_recommendation_layered_by_phase():
    recommendation = decide(CONTEXT, None, generation_run((0.75, 0.7, 0.8)))  # compiled prefill is slower
    assert (recommendation["backend"], recommendation["mode"]) == ("inductor", "default")
    [step] = [s for s in recommendation["path"] if s["rule"] == "generation_phases"]
    assert step["outcome"].startswith("No: prefill with eager:default")
    assert step["evidence"]["by_option"]["inductor:default"] == {"prefill": 0.75, "decode": 2.0}
    layered = recommendation["layered"]
    assert [(p, layered[p]["backend"]) for p in layered] == [("prefill", "eager"), ("decode", "inductor")]
    snippet = recommendation["snippet"]
    assert snippet.index("# prefill program") < snippet.index("# decode program") and "torch.compile" in snippet
    text = render_text(
        {
            "model_name": "gpt2",
            "context": CONTEXT,
            "measurements": generation_run((0.75, 0.7, 0.8)),
            "recommendation": recommendation,
        }
    )
    assert "  - prefill (cpu): eager:default - prefill (time to first token)" in text
    assert "  - decode (cpu): inductor:default - decode (time per output token)" in text
    assert "- inductor:default: prefill 13.3 ms, 0.75x vs eager, compile 20 s; decode 5 ms, 2.00x vs eager" in text


def test_one_option_for_both_phases_when_it_is_faster_for_both():
    recommendation = decide(CONTEXT, None, generation_run((1.5, 1.4, 1.6)))
    [step] = [s for s in recommendation["path"] if s["rule"] == "generation_phases"]
    assert (
        step["outcome"] == "Yes: inductor:default is the choice for both phases." and recommendation["layered"] is None
    )


def test_an_unresolved_prefill_speedup_keeps_one_option_for_both_phases():
    recommendation = decide(CONTEXT, None, generation_run((1.3, 0.9, 1.7)))  # CI spans 1: neither is faster
    assert recommendation["layered"] is None
    [step] = [s for s in recommendation["path"] if s["rule"] == "generation_phases"]
    assert step["outcome"] == "Yes: inductor:default is the choice for both phases."


def test_a_prefill_difference_within_the_noise_keeps_one_option_for_both_phases():
    measured = generation_run((1.5, 1.4, 1.6))
    autotune = generation_row("inductor", phase(1.55, 1.45, 1.65, 30.0), phase(2.4, 2.3, 2.5, 40.0), 10.0)
    autotune["mode"] = "max-autotune"
    measured["measurements"][1]["generation"]["prefill"] = phase(1.6, 1.5, 1.7, 20.0)  # default: faster prefill
    measured["measurements"].append(autotune)
    recommendation = decide(CONTEXT, None, measured)
    assert recommendation["mode"] == "max-autotune" and recommendation["layered"] is None  # 1.45-1.65 vs 1.5-1.7
