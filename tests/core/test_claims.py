"""One rule for "faster" (issue 44 item 1, issue 46 item 1): an option is called faster or slower than another only when
the 95% interval of their ratio excludes 1; the leader is ranked against the runner-up by their pairwise ratio, "high"
confidence only when it beats it beyond the noise; and - over generated and recorded rows - no sentence of the
engine or the reports claims an order its interval does not support, and the pick never has a worse estimate than
another qualified option unless a stated rule says why."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.core import claims
from advisor.core.decision.candidates import compare, measured_options
from advisor.core.decision.engine import decide
from advisor.core.report import render
from tests.core.test_decide_properties import scenarios
from tests.support.fixtures_decide import inspection, latency, measurement, run

PRODUCTION = {"stage": "production", "expected_calls_per_compile": 10**6, "target": "cpu"}
EDGE = {"stage": "edge", "target": "cpu", "resource_constrained": True, "needs_offline_export": True}

# "[95% CI 1.02-1.17x]", "(95% CI 1.90-2.10x: ...", "a 95% CI of 40.6-179x"
_INTERVAL = re.compile(r"95% CI (?:of )?(\d+(?:\.\d+)?(?:e[+-]?\d+)?)-(\d+(?:\.\d+)?(?:e[+-]?\d+)?|inf)x")
_VERDICT = re.compile(
    r"95% CI (\d+(?:\.\d+)?)-(\d+(?:\.\d+)?|inf)x\]?: (faster beyond the noise|slower beyond the noise|within noise)"
)
_TABLE_CELL = re.compile(r"\d+\.\d+x \[(\d+\.\d+)-(\d+\.\d+|inf)\] (faster|slower|within noise)")
_CLAIM = re.compile(
    r"(?<!not )(?<!no )\b(?:(?:runs|ran) (?:faster|slower)|(?:faster|slower) than|leads beyond the noise)"
)
_NEUTRAL = re.compile(r"within (?:the )?(?:measured )?noise|equally fast")
# an order said of point estimates with no interval in its clause: "is the fastest", "ran 1.33x to 2.50x faster",
# "beats", "quicker" (the shape-sweep sentences once read so); the one rule says a missing interval claims no order
_UNBACKED = re.compile(
    r"(?<!not )(?<!no )\b(?:is the fastest|(?:ran|runs) [\d.]+x(?: to [\d.]+x)? (?:faster|slower)|beats|quicker)\b"
)
_CLAUSE = re.compile(r"; |\. (?=[A-Z])|\?\** |\n")


def _interval(low: str, high: str) -> tuple[float, float]:
    return float(low), float("inf") if high == "inf" else float(high)


def violations(text: str) -> list[str]:
    """Every place in `text` where a quoted interval and the order said beside it disagree."""
    found = []
    for match in _VERDICT.finditer(text):
        said = {"faster beyond the noise": "faster", "slower beyond the noise": "slower"}.get(match[3], "within noise")
        if claims.order(_interval(match[1], match[2])) != said:
            found.append(match[0])
    for match in _TABLE_CELL.finditer(text):
        if claims.order(_interval(match[1], match[2])) != match[3]:
            found.append(match[0])
    for clause in _CLAUSE.split(text):
        intervals = _INTERVAL.findall(clause)
        if not intervals and _UNBACKED.search(clause):
            found.append(clause)
        if len(intervals) != 1:
            continue
        order = claims.order(_interval(*intervals[0]))
        if _CLAIM.search(clause) and order == claims.WITHIN_NOISE:
            found.append(clause)
        elif not _CLAIM.search(clause) and _NEUTRAL.search(clause) and order != claims.WITHIN_NOISE:
            found.append(clause)
    return found


def texts_of(context: dict[str, Any], insp: dict | None, measurements: dict | None) -> tuple[dict[str, Any], str]:
    rec = decide(context, insp, measurements)
    analysis = {"model_name": "m.pt2", "context": context, "inspection": insp, "measurements": measurements}
    analysis["recommendation"] = rec
    parts = [rec["summary"], *rec["why_not"].values(), *(s["outcome"] for s in rec["path"])]
    parts += [c["issue"] for c in rec["caveats"]]
    parts += [render(analysis, "text"), render(analysis, "markdown")]
    return rec, "\n".join(parts)


# ------------------------------------------------------------------------------------------- the rule itself
def test_order_reads_only_the_interval() -> None:
    assert claims.order((1.02, 1.17)) == claims.FASTER
    assert claims.order((15.41, 77.01)) == claims.FASTER  # wide, but entirely above 1
    assert claims.order((0.27, 4.68)) == claims.WITHIN_NOISE
    assert claims.order((1.0, 1.14)) == claims.WITHIN_NOISE  # touching 1 is not beyond it
    assert claims.order((0.5, 0.9)) == claims.SLOWER
    assert claims.order(None) == claims.WITHIN_NOISE and claims.order([]) == claims.WITHIN_NOISE
    for junk in ("12", ["a", "b"], [True, 2.0], [float("nan"), 0.5], {"low": 2}, [2.0, 3.0, 4.0]):
        assert claims.order(junk) in (claims.WITHIN_NOISE, claims.SLOWER)  # never raises, never "faster" from junk
    assert claims.order([float("nan"), 0.5]) == claims.SLOWER and claims.order([1.5, None]) == claims.FASTER
    assert claims.speedup_verdict([15.41, 77.01]) == "faster than eager"
    assert claims.speedup_verdict([0.99, 1.13]) == "within noise of eager"
    assert claims.fmt_bound(1.003) == "1.003" and claims.fmt_bound(0.9999) == "0.9999"
    assert claims.fmt_bound(1.0) == "1.00" and claims.fmt_bound(2.5) == "2.50"
    assert claims.fmt_bound("<b>") == "?" and claims.fmt_bound(float("inf")) == "inf"  # type: ignore[arg-type]
    phrase = claims.ratio_phrase("a", "b", 1.96, (0.27, 4.68))
    assert phrase == "a ran 1.96x as fast as b [95% CI 0.27-4.68x]: within noise" and not violations(phrase)
    assert violations("a runs faster (a ran 1.96x as fast as b [95% CI 0.27-4.68x]: within noise)")
    assert violations("b [95% CI 15.41-77.01x]: within noise")


# ------------------------------------------------------------------------------------------- recorded rows
def distilbert_run() -> dict[str, Any]:
    """Issue 46's DistilBERT: max-autotune 1.05x [1.003-1.14] beyond eager's noise, ONNX Runtime 1.08x [0.99-1.13]
    not - ONNX Runtime the better estimate, nothing comparing the two."""
    eager = measurement("eager", median_ms=40.0, device="cpu")
    rows = [eager]
    for backend, mode, speedup, (low, high) in (
        ("inductor", "max-autotune", 1.05, (1.003, 1.14)),
        ("onnxruntime", "default", 1.08, (0.99, 1.13)),
    ):
        row = measurement(backend, mode=mode, median_ms=40.0 / speedup, eager_ms=40.0, compile_s=30.0, device="cpu")
        row.update(speedup_vs_eager=speedup, speedup_ci=[low, high])
        rows.append(row)
    return run(*rows, device="cpu")


def test_an_option_within_noise_of_eager_is_still_ranked_against_the_one_beyond_it() -> None:
    rows = distilbert_run()
    rec, text = texts_of(PRODUCTION, inspection(), rows)
    assert (rec["backend"], rec["mode"]) == ("onnxruntime", "default")  # the better estimate, not max-autotune
    assert rec["confidence"] != "high"
    assert "onnxruntime:default ran 1.03x as fast as inductor:max-autotune" in text
    assert (
        "within noise" in rec["why_not"]["inductor:max-autotune"]
        or "inconclusive" in (rec["why_not"]["inductor:max-autotune"])
    )
    assert not violations(text), violations(text)


def test_high_confidence_needs_the_leader_beyond_the_runner_up() -> None:
    def rows(onnx_ms: float) -> dict[str, Any]:
        return run(
            measurement("eager", median_ms=10.0, device="cpu"),
            measurement("inductor", median_ms=5.0, eager_ms=10.0, spread=0.01, compile_s=3.0, device="cpu"),
            measurement("onnxruntime", median_ms=onnx_ms, eager_ms=10.0, spread=0.01, compile_s=3.0, device="cpu"),
            device="cpu",
        )

    clear = decide(PRODUCTION, inspection(), rows(4.0))  # 1.25x [1.22-1.28]: beyond the noise
    assert (clear["backend"], clear["confidence"]) == ("onnxruntime", "high")
    close = decide(PRODUCTION, inspection(), rows(4.98))  # 1.004x: within noise
    assert close["confidence"] != "high"
    assert "within" in " ".join(s["outcome"] for s in close["path"])


def test_a_wide_interval_entirely_above_one_is_faster_and_the_badge_says_so() -> None:
    wide = measurement("inductor", median_ms=1.0, eager_ms=35.68, device="cpu")
    wide.update(speedup_vs_eager=35.68, speedup_ci=[15.41, 77.01])
    rows = run(measurement("eager", median_ms=35.68, device="cpu"), wide, device="cpu")
    rec, text = texts_of(PRODUCTION, inspection(), rows)
    assert rec["backend"] == "inductor"
    assert "too noisy to count as faster" not in text and "too wide to call it faster" not in text
    assert "faster than eager" in text and not violations(text)
    options = {o.label: o for o in measured_options(rows)}
    comparison = compare(options["eager:default"], options["inductor:default"])
    assert comparison is not None and claims.order(comparison.interval) == claims.FASTER


def test_two_int8_exports_within_noise_are_not_called_faster() -> None:
    """Issue 44's ResNet-18 at the edge: ONNX Runtime int8 "runs faster ... 1.96x [0.27-4.68x]"."""
    eager = measurement("eager", median_ms=20.0, device="cpu")
    ort = measurement("onnxruntime", mode="int8", median_ms=5.0, eager_ms=20.0, spread=0.4, device="cpu")
    ov = measurement("openvino", mode="int8", median_ms=9.8, eager_ms=20.0, spread=0.4, device="cpu")
    floating = measurement("onnxruntime", median_ms=10.0, eager_ms=20.0, device="cpu")
    for row, size in ((ort, 3_000_000), (ov, 3_100_000), (floating, 11_000_000)):
        row["serialized_bytes"] = size
    for row in (ort, ov):
        row["accuracy"]["quantized"] = {"cosine": 0.999, "top1_agreement": 1.0, "top1_rows": 4, "max_abs_err": 0.2}
    rows = run(eager, floating, ort, ov, device="cpu")
    rec, text = texts_of(EDGE, inspection(), rows)
    why = rec["why_not"]["openvino:int8"]
    assert "runs faster" not in why and "within the noise" in why, why
    assert not violations(text), violations(text)


# ------------------------------------------------------------------------------------------- properties
@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_no_sentence_claims_an_order_its_interval_does_not_support(scenario: tuple) -> None:
    _, text = texts_of(*scenario)
    assert not violations(text), violations(text)


@st.composite
def swept_scenarios(draw: st.DrawFn) -> tuple[dict, dict | None, dict | None]:
    """The scenarios above with a shape sweep on every timed row (a speedup per shape and, sometimes, a static
    compile's): the sweep sentences then join the engine's and the reports' texts."""
    context, insp, measurements = draw(scenarios())
    labels = ["x=1x64", "x=8x64", "x=64x64"]
    for row in (measurements or {}).get("measurements") or []:
        if row["status"] != "ok":
            continue
        points = []
        for label in labels:
            eager_ms, ms = draw(st.floats(0.5, 50.0)), draw(st.floats(0.5, 50.0))
            point = {"label": label, "median_ms": ms, "eager_median_ms": eager_ms, "speedup": eager_ms / ms}
            if row["backend"] == "inductor" and draw(st.booleans()):
                static_ms = ms / draw(st.floats(1.0, 3.0))
                point["static"] = {"median_ms": static_ms, "speedup": eager_ms / static_ms, "compile_s": 2.0}
            points.append(point)
        row["sweep"] = points
    return context, insp, measurements


@settings(max_examples=100, deadline=None)
@given(swept_scenarios())
def test_no_shape_sweep_sentence_claims_an_order_without_an_interval(scenario: tuple) -> None:
    rec, text = texts_of(*scenario)
    assert not violations(text), violations(text)


def test_the_recorded_sweep_sentence_names_estimates_not_an_order() -> None:
    """The sentence that said "inductor:default is the fastest at every swept shape (...)" and "ran 1.33x to 2.50x
    faster than automatic dynamic shapes" from point estimates without an interval."""
    from advisor.core.shape_sweep import where_the_answer_changes
    from tests.web.test_sweep_page import swept_run

    text = where_the_answer_changes(swept_run(static_ms=(0.5, 3.0)), "inductor:default", {"inductor:default"})
    assert text is not None and not violations(text), text
    assert claims.NO_INTERVAL in text and "faster" not in text
    assert violations("inductor:default is the fastest at every swept shape (x=1x64: inductor:default (1.20x))")
    assert violations("A static compile ran 1.33x to 2.50x faster than automatic dynamic shapes at these shapes")
    assert claims.lead_words((1.2, 1.5)) == "is the fastest" and claims.lead_words(None) == "has the highest estimate"


_STATED_RULES = (
    "within noise",
    "within the noise",
    "within the measured noise",
    "inconclusive",
    "not faster than eager",
    "compile",
    "offline export",
    "not shipped",
    "not weighed",
    "selection tree",
    "not ranked",
    "unresolved",
)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_the_pick_never_has_a_worse_estimate_than_another_option_without_a_stated_rule(scenario: tuple) -> None:
    context, insp, measurements = scenario
    rec = decide(context, insp, measurements)
    if not rec["measured"] or rec["backend"] is None or measurements is None:
        return
    options = {o.label: o for o in measured_options(measurements)}
    qualified = rec["path"][1]["evidence"]["qualified"]
    mode = "max-autotune" if rec["mode"] == "dynamo_export" else rec["mode"]
    chosen = options.get(f"{rec['backend']}:{mode}")
    if chosen is None or chosen.latency_ms is None:
        return
    for label in qualified:
        other = options[label]
        if other is chosen or other.latency_ms is None or other.latency_ms >= chosen.latency_ms:
            continue
        why = rec["why_not"][label]
        assert not why.startswith("slower than"), why
        assert any(rule in why for rule in _STATED_RULES), why


def test_latency_helper_keeps_its_interval() -> None:  # the fixtures the properties rest on
    stats = latency(10.0, 0.1)
    assert (stats["ci_low_ms"], stats["ci_high_ms"]) == (9.0, 11.0)
