"""The shape planner (issue 43): the bucket DP's optimum equals brute force over every bucket set on recorded
latencies, the graph budget is kept, the sizes to time stay bounded, and the decision carries the plan."""

from __future__ import annotations

import itertools
import random

import pytest

from advisor.core.decision.engine import decide
from advisor.core.report import render
from advisor.core.shape_plan import (
    Axis,
    SizeTiming,
    Timings,
    choose,
    optimal_buckets,
    plan_options,
    sizes_to_time,
    traffic_axis,
    traffic_sweep,
)
from advisor.core.shape_plan_text import plan_lines
from tests.support.fixtures_decide import inspection, measurement, run

# recorded on this machine's CPU: a 2-layer text encoder (d=64) at each sequence length, static compile, ms
RECORDED_MS = {8: 0.21, 16: 0.24, 32: 0.31, 48: 0.40, 64: 0.47, 96: 0.69, 128: 0.88, 192: 1.41, 256: 1.93}


def brute_force(sizes, candidates, latency, max_graphs, graph_cost=lambda s: 0.0):  # noqa: ANN001, ANN201
    total = sum(w for _, w in sizes)
    best = None
    for k in range(1, max_graphs + 1):
        for chosen in itertools.combinations(sorted(candidates), k):
            if chosen[-1] < sizes[-1][0]:
                continue
            cost = sum(w * latency(next(b for b in chosen if b >= s)) for s, w in sizes) / total
            cost += sum(graph_cost(b) for b in chosen)
            if best is None or cost < best[1] - 1e-12:
                best = (list(chosen), cost)
    return best


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("max_graphs", [1, 2, 3, 5])
def test_the_dp_optimum_equals_brute_force_on_recorded_latencies(seed: int, max_graphs: int) -> None:
    rng = random.Random(seed)
    sizes = sorted({rng.randint(1, 256): None for _ in range(rng.randint(3, 12))})
    traffic = [(s, rng.choice([1, 3, 10, 200])) for s in sizes]
    candidates = [s for s in RECORDED_MS if s >= traffic[0][0]]
    compile_per_graph = rng.choice([0.0, 0.05])
    found = optimal_buckets(traffic, candidates, RECORDED_MS.__getitem__, max_graphs, lambda s: compile_per_graph)
    expected = brute_force(traffic, candidates, RECORDED_MS.__getitem__, max_graphs, lambda s: compile_per_graph)
    assert found is not None and expected is not None
    assert found[1] == pytest.approx(expected[1], rel=1e-9)
    assert len(found[0]) <= max_graphs
    assert found[0][-1] >= traffic[-1][0]


def test_no_bucket_set_exists_when_no_candidate_holds_the_largest_call() -> None:
    assert optimal_buckets([(10, 1), (300, 1)], [16, 256], float, 4) is None
    assert optimal_buckets([], [16, 256], float, 4) is None


def skewed_axis() -> Axis:
    # many short calls, a long tail: the shape of real sequence-length traffic
    return Axis([("ids", 1)], [(8, 500), (12, 300), (30, 120), (61, 50), (120, 20), (250, 10)])


def timings(*, static_gain: float = 0.8, dynamic_compile_s: float = 3.0) -> Timings:
    by_size = {s: SizeTiming(ms, ms * static_gain, 2.0) for s, ms in RECORDED_MS.items()}
    return Timings(by_size, dynamic_compile_s=dynamic_compile_s, dynamic_graphs=2)


def test_every_plan_keeps_its_graphs_and_the_chosen_one_keeps_the_budget() -> None:
    options = plan_options(skewed_axis(), timings(static_gain=0.5), max_graphs=3, calls=None)
    kinds = {o["kind"]: o for o in options}
    assert set(kinds) == {"dynamic", "static", "buckets"}
    assert kinds["static"]["graphs"] == 6 and not kinds["static"]["within_budget"]
    assert kinds["buckets"]["graphs"] <= 3 and kinds["buckets"]["within_budget"]
    assert kinds["dynamic"]["padding_waste"] == 0.0 and kinds["buckets"]["padding_waste"] > 0.0
    best, reasons = choose(options, calls=None)
    assert best["within_budget"] and best["kind"] == "buckets"
    assert any("over the graph budget: static" in r for r in reasons)
    sizes = best["buckets"]["ids"]["1"]
    assert sizes[-1] >= 250 and len(sizes) <= 3


def test_few_calls_per_compile_make_the_one_graph_plan_win() -> None:
    options = plan_options(skewed_axis(), timings(static_gain=0.8, dynamic_compile_s=1.0), max_graphs=8, calls=20)
    best, reasons = choose(options, calls=20)
    assert best["kind"] == "dynamic"
    assert "over 20 calls per compile" in reasons[0]


def test_a_plan_within_the_tie_of_the_fastest_with_fewer_graphs_is_preferred() -> None:
    options = plan_options(skewed_axis(), timings(static_gain=0.99), max_graphs=64, calls=None)
    best, reasons = choose(options, calls=None)
    assert best["graphs"] == min(
        o["graphs"]
        for o in options
        if o["within_budget"] and o["expected_latency_ms"] <= options[0]["expected_latency_ms"] * 1.03
    )
    assert len(reasons) >= 2


# recorded with the product's peak-memory reading at each size (MB above resident; made up but monotone, as measured)
RECORDED_MB = {8: 3.0, 16: 3.5, 32: 5.0, 48: 6.0, 64: 7.0, 96: 9.5, 128: 12.0, 192: 17.0, 256: 22.0}


def test_each_plans_memory_is_the_most_one_of_its_graphs_needed() -> None:
    by_size = {s: SizeTiming(ms, ms * 0.5, 2.0, RECORDED_MB[s] * 2, RECORDED_MB[s]) for s, ms in RECORDED_MS.items()}
    options = {o["kind"]: o for o in plan_options(skewed_axis(), Timings(by_size, 3.0, 2), 3, None)}
    # dynamic: one graph serving every size, up to the largest call (250, between 192 and 256: interpolated)
    assert options["dynamic"]["memory_mb"] == pytest.approx(2 * (17.0 + (22.0 - 17.0) * (250 - 192) / 64))
    # static: one graph per distinct size - the largest one's; not the sum over the six graphs
    assert options["static"]["memory_mb"] == pytest.approx(17.0 + (22.0 - 17.0) * (250 - 192) / 64)
    buckets = options["buckets"]["buckets"]["ids"]["1"]
    assert options["buckets"]["memory_mb"] == pytest.approx(max(RECORDED_MB[b] for b in buckets))
    assert buckets[-1] == 256 and options["buckets"]["memory_mb"] == 22.0  # padded up: the top bucket's memory


def test_a_plan_without_recorded_memory_says_none() -> None:
    options = plan_options(skewed_axis(), timings(), 3, None)
    assert [o["memory_mb"] for o in options] == [None] * len(options)
    assert "peak per graph" not in " ".join(plan_lines({**options[0], "alternatives": [], "reasons": []}))


def test_sizes_to_time_are_bounded_and_hold_the_ends() -> None:
    axis = skewed_axis()
    for limit in (2, 4, 8):
        sizes = sizes_to_time(axis.sizes, max_graphs=64, limit=limit)
        assert len(sizes) <= limit and sizes == sorted(sizes)
        assert 8 in sizes and 250 in sizes
    assert {16, 32, 64, 128} & set(sizes_to_time(axis.sizes, 64, 8))


def test_the_axis_joins_inputs_that_vary_together_and_refuses_independent_ones() -> None:
    together = [{"shapes": {"ids": [1, n], "mask": [1, n]}, "weight": 1} for n in (4, 9, 30)]
    axis = traffic_axis(together)
    assert axis is not None and axis.dims == [("ids", 1), ("mask", 1)] and [s for s, _ in axis.sizes] == [4, 9, 30]
    independent = [{"shapes": {"x": [b, n]}, "weight": 1} for b, n in ((1, 4), (2, 4), (1, 9))]
    assert traffic_axis(independent) is None
    points = traffic_sweep(independent, 8, 2)
    assert len(points) == 2


def test_the_sweep_points_set_the_axis_into_the_most_frequent_call() -> None:
    entries = [
        {"shapes": {"ids": [1, 12], "x": [3]}, "weight": 9},
        {"shapes": {"ids": [1, 200], "x": [3]}, "weight": 1},
    ]
    points = traffic_sweep(entries, 8, 8)
    assert points[0] == {"ids": [1, 12], "x": [3]} and points[-1] == {"ids": [1, 200], "x": [3]}
    assert all(p["x"] == [3] and p["ids"][0] == 1 for p in points)


def swept_row(sizes: dict[int, float], static_gain: float, **kwargs):  # noqa: ANN003, ANN201
    row = measurement("inductor", median_ms=sizes[min(sizes)], eager_ms=2 * sizes[min(sizes)], **kwargs)
    row["sweep"] = [
        {
            "label": f"ids=1x{s}",
            "shape": {"ids": [1, s]},
            "median_ms": ms,
            "recompiles": 1 if i == 1 else 0,
            "first_call_s": 1.5,
            "peak_memory_mb": 2.0 + s / 16,
            "memory_kind": "rss",
            "static": {"median_ms": ms * static_gain, "compile_s": 1.0, "recompiles": 1, "peak_memory_mb": 1 + s / 16},
        }
        for i, (s, ms) in enumerate(sorted(sizes.items()))
    ]
    return row


def test_the_recommendation_carries_the_plan_and_the_report_shows_it() -> None:
    context = {
        "target": "cpu",
        "max_graphs": 3,
        "expected_calls_per_compile": 10**7,
        "shape_traffic": [
            {"shapes": {"ids": [1, s]}, "weight": w} for s, w in [(8, 500), (30, 120), (61, 50), (250, 10)]
        ],
    }
    measured = run(
        measurement("eager", median_ms=1.0, device="cpu"),
        swept_row(RECORDED_MS, 0.7, device="cpu"),
        device="cpu",
    )
    rec = decide(context, inspection(), measured)
    plan = rec["shape_plan"]
    assert plan["kind"] == "buckets" and plan["graphs"] <= 3 and plan["option"] == "inductor:default"
    assert plan["buckets"]["ids"]["1"][-1] >= 250
    assert {o["kind"] for o in plan["alternatives"]} == {"dynamic", "static"}
    assert any(step["rule"] == "shape_plan" for step in rec["path"])
    analysis = {"context": context, "inspection": inspection(), "measurements": measured, "recommendation": rec}
    markdown = render(analysis, "markdown")
    assert "## Shape plan for the traffic" in markdown and "def pad_to_bucket" in markdown
    assert f"BUCKETS = {plan['buckets']['ids']['1']}" in markdown
    text = render(analysis, "text")
    assert "chosen: inductor:default buckets" in text and "recompile_limit" in text
    top = plan["buckets"]["ids"]["1"][-1]
    assert plan["memory_mb"] == pytest.approx(1.0 + top / 16) and plan["memory_kind"] == "rss"
    assert f"{plan['memory_mb']:.1f} MB peak per graph" in text and "host memory (the process's RSS" in text
    npu = render({**analysis, "context": {**context, "target": "npu"}}, "markdown")
    assert "torchair.inference.set_dim_gears(ids, dim_gears={1: " in npu and "Not measured on an NPU" in npu
    assert 'options={"capture_limit": ' in npu and "dynamic_gears_merge_policy" in npu


def test_without_traffic_there_is_no_plan() -> None:
    measured = run(measurement("eager", median_ms=1.0), swept_row(RECORDED_MS, 0.7))
    assert "shape_plan" not in decide({}, inspection(), measured)
