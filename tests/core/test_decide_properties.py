"""Property-based tests of the decision engine over random contexts, inspections and measurement runs."""

from __future__ import annotations

import copy
import random
import re
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from advisor.core.decision.engine import decide
from advisor.harness.backends.torchair_options import COMPILER_CONFIG_OPTIONS
from tests.support.fixtures_decide import inspection, measurement, op, run

VARIANTS = [
    ("eager", "default"),
    ("inductor", "default"),
    ("inductor", "max-autotune"),
    ("torchair", "max-autotune"),
    ("torchair", "npugraph_ex"),
    ("onnxruntime", "default"),
]
STATUSES = ["ok"] * 15 + ["fail_accuracy", "compile_error", "timeout", "unavailable", "oom"]
# The fields a popular blog invents; spelt by concatenation so a grep for them finds only real misuse.
BLOG_FIELDS = tuple("config." + name for name in ("memory.", "cache.", "dynamic_shape.", "optimization." + "level"))


def mostly_none(strategy: st.SearchStrategy) -> st.SearchStrategy:
    """None three times out of four: limits that exclude everything make vacuous examples."""
    return st.one_of(st.none(), st.none(), st.none(), strategy)


contexts = st.fixed_dictionaries(
    {
        "stage": st.sampled_from(["prototype", "production", "edge"]),
        "model_changes": st.sampled_from(["frequent", "occasional", "frozen"]),
        "target": st.sampled_from(["npu", "cpu"]),
        "fleet": st.sampled_from(["single", "mixed"]),
        "expected_calls_per_compile": st.none() | st.integers(1, 10**7),
        "latency_target_ms": mostly_none(st.floats(1.0, 60.0)),
        "memory_budget_mb": mostly_none(st.floats(50.0, 500.0)),
        "needs_offline_export": st.booleans(),
        "ships_compile_cache": st.booleans(),
    }
)


@st.composite
def measurement_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    chosen = draw(st.lists(st.sampled_from(VARIANTS), min_size=1, max_size=len(VARIANTS), unique=True))
    rows = []
    for backend, mode in chosen:
        status = draw(st.sampled_from(STATUSES))
        rows.append(
            measurement(
                backend,
                mode=mode,
                status=status,
                reason=None if status == "ok" else f"synthetic {status}",
                median_ms=draw(st.floats(0.5, 50.0)),
                spread=draw(st.floats(0.0, 0.3)),
                compile_s=draw(st.floats(0.0, 60.0)),
                warm_s=draw(st.none() | st.floats(0.0, 10.0)),
                memory_mb=draw(st.floats(10.0, 800.0)),
                verdict=draw(st.sampled_from(["valid", "noisy"])),
                eager_ms=draw(st.none() | st.floats(0.5, 50.0)),  # timed side by side, or not
            )
        )
    return rows


@st.composite
def inspections(draw: st.DrawFn) -> dict[str, Any] | None:
    if draw(st.booleans()) and draw(st.booleans()):
        return None
    custom = []
    if draw(st.booleans()):
        custom.append(
            op(
                "npu.npu_rms_norm.default",
                inductor=draw(st.sampled_from(["fallback", "untraceable"])),
                torchair=draw(st.sampled_from(["supported", "partial", "stub", "none"])),
                fake=draw(st.booleans()),
            )
        )
    ops = [op("aten.linear.default"), op("aten.amax.default", torchair=draw(st.sampled_from(["supported", "stub"])))]
    if draw(st.booleans()):  # coverage only known on an NPU
        ops.append(op("aten.scaled_dot_product_attention.default", torchair="none", unknown=True))
    breaks = [{"reason": "Tensor.item()", "location": None}] if draw(st.booleans()) else []
    return inspection(ops=ops, custom_ops=custom, graph_breaks=breaks)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[dict, dict | None, dict | None]:
    context = draw(contexts)
    measured_on = draw(st.sampled_from([context["target"], "test-double"]))
    rows = draw(measurement_rows()) if draw(st.integers(0, 5)) else None
    device = context["target"] if draw(st.integers(0, 9)) else "cuda"
    return context, draw(inspections()), None if rows is None else run(*rows, device=device, measured_on=measured_on)


def row_for(rec: dict[str, Any], measurements: dict | None) -> dict[str, Any] | None:
    if measurements is None or rec.get("backend") is None:
        return None
    mode = "max-autotune" if rec["mode"] == "dynamo_export" else rec["mode"]
    return next((r for r in measurements["measurements"] if (r["backend"], r["mode"]) == (rec["backend"], mode)), None)


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_row_order(scenario: tuple, rnd: random.Random) -> None:
    context, insp, measurements = scenario
    first = decide(context, insp, measurements)
    assert decide(copy.deepcopy(context), copy.deepcopy(insp), copy.deepcopy(measurements)) == first
    if measurements:
        shuffled = copy.deepcopy(measurements)
        rnd.shuffle(shuffled["measurements"])
        assert decide(context, insp, shuffled) == first


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_never_recommends_an_excluded_backend(scenario: tuple) -> None:
    context, insp, measurements = scenario
    rec = decide(context, insp, measurements)
    if rec["backend"] is None:
        assert rec["why_not"] or not rec["measured"]
        return
    label = f"{rec['backend']}:{rec['mode']}"
    assert label not in rec["why_not"]
    assert label not in rec["path"][1]["evidence"]["excluded"]
    row = row_for(rec, measurements)
    if rec["measured"] and row is not None:
        assert row["status"] == "ok" and row["accuracy"]["passed"]
        if context["latency_target_ms"] is not None:
            assert row["latency"]["p99_ms"] <= context["latency_target_ms"]
        if context["memory_budget_mb"] is not None:
            assert row["peak_memory_mb"] <= context["memory_budget_mb"]
    if rec["backend"] == "torchair":
        assert context["target"] == "npu"


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.floats(0.05, 0.99))
def test_making_the_recommended_backend_faster_keeps_it_recommended(scenario: tuple, factor: float) -> None:
    context, insp, measurements = scenario
    rec = decide(context, insp, measurements)
    row = row_for(rec, measurements)
    if row is None or row.get("latency") is None:
        event("recommendation without a measured latency")
        return
    event(f"recommended {rec['backend']}:{rec['mode']}")
    faster = copy.deepcopy(measurements)
    for r in faster["measurements"]:
        if (r["backend"], r["mode"]) == (row["backend"], row["mode"]):
            r["latency"] = {k: (v * factor if k.endswith("_ms") else v) for k, v in r["latency"].items()}
            if r["backend"] == "eager":  # eager's side-by-side timing is itself
                r["eager_latency"] = r["latency"]
            elif r["speedup_vs_eager"] is not None:  # same eager timing next to it, so a higher speedup
                r["speedup_vs_eager"] /= factor
                r["speedup_ci"] = [bound / factor for bound in r["speedup_ci"]]
    again = decide(context, insp, faster)
    assert (again["backend"], again["mode"]) == (rec["backend"], rec["mode"])


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_snippets_use_only_real_torchair_config_fields(scenario: tuple) -> None:
    rec = decide(*scenario)
    snippet = rec["snippet"]
    for field in re.findall(r"\bconfig\.([A-Za-z_][\w.]*)\s*=", snippet):
        assert field in COMPILER_CONFIG_OPTIONS, f"config.{field} is not a real CompilerConfig option"
    text = snippet + " ".join(c["fix"] for c in rec["caveats"])
    assert not any(bad in text for bad in BLOG_FIELDS)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_a_compiled_option_not_faster_than_eager_side_by_side_never_wins_over_eager(scenario: tuple) -> None:
    context, insp, measurements = scenario
    rec = decide(context, insp, measurements)
    row = row_for(rec, measurements)
    if row is None or rec["backend"] == "eager" or rec["mode"] == "dynamo_export" or not row.get("speedup_ci"):
        return
    if context["stage"] == "edge" or context["needs_offline_export"]:
        return  # the export path is chosen for the export, not for speed
    if "eager:default" in rec["path"][1]["evidence"]["qualified"]:
        event("compiled option recommended over a qualified eager")
        if row["speedup_ci"][0] > 1.0:
            return
        # only as the better estimate of a ranking the noise left open (issue 27): said so, at low confidence
        open_ranking = [
            s for s in rec["path"] if s["rule"] == "leading_options_paired" and s["outcome"].startswith("Inconclusive")
        ]
        assert open_ranking and rec["confidence"] == "low", (
            "a slower or tied compiled option was recommended over eager"
        )
        assert row["speedup_vs_eager"] > 1.0 and "Inconclusive between" in rec["summary"]
