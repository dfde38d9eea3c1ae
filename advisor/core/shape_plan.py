"""A plan for the shapes a deployment serves: one dynamic graph, one static graph per distinct size, or buckets
(each call padded up to the smallest bucket that holds it), chosen from the traffic under a graph budget.

The traffic (the context's `shape_traffic`) varies along one axis: the (input, dim) pairs whose sizes change
together (`input_ids` and `attention_mask` of one sequence length). The latencies come from the measured sweep at
a bounded set of sizes (`sizes_to_time`: the traffic's smallest and largest, the budget's optimum under a linear
latency guess, powers of two, the heaviest sizes); a size between two measured ones is interpolated linearly and the
plan says so. Buckets are only placed at measured sizes. `optimal_buckets` is a dynamic programme over the sorted
sizes: exact for its objective (expected latency per call, plus each graph's compile amortised over the context's
calls per compile when known). Pure and torch-free.

Memory: each plan's `memory_mb` is the most memory any one of its graphs needed beyond what was resident - the
highest measured first call (its compile at that size, and the call) over the sizes the plan serves, interpolated
like the latencies (`plan_memory_mb`). The maximum, not the sum over graphs: the measured figure is transient (the
compiler's and the call's working memory, freed before the next graph compiles), and the graphs of one plan are
compiled and called one at a time. What a graph keeps resident after it - its code, on a GPU a CUDA-graph pool that
is not shared - is not in it, so a plan of many captured graphs holds more than this; the plan says so. On the CPU
the figure is host memory (the process's RSS high-water mark), on cuda/npu the device allocator's peak.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

DEFAULT_GRAPHS = {"npu": 64, "cuda": 8, "cpu": 8}  # npugraph_ex capture_limit; Dynamo's recompile_limit
TIE = 0.03  # options whose cost differs by less than this share are tied: the one with fewer graphs wins
PRIOR_BUCKETS = 3  # buckets of the budget's optimum under a linear latency guess, timed before anything is known


def default_max_graphs(target: str) -> int:
    """The graph budget when the context gives none: what the target's graph mode holds before it falls back."""
    return DEFAULT_GRAPHS.get(target, 8)


class Axis(NamedTuple):
    dims: list[tuple[str, int]]  # the (input, dim) pairs that vary together
    sizes: list[tuple[int, int]]  # (size, calls) per distinct size, sorted by size


def traffic_axis(entries: list[dict[str, Any]]) -> Axis | None:
    """The one axis the traffic varies along, or None when nothing varies or several dims vary independently."""
    if not entries:
        return None
    first = entries[0]["shapes"]
    pairs = [(name, dim) for name, shape in first.items() for dim in range(len(shape))]
    varying = [p for p in pairs if len({entry["shapes"][p[0]][p[1]] for entry in entries}) > 1]
    if not varying:
        return None
    weights: dict[int, int] = {}
    for entry in entries:
        sizes = {entry["shapes"][name][dim] for name, dim in varying}
        if len(sizes) != 1:
            return None
        size = sizes.pop()
        weights[size] = weights.get(size, 0) + int(entry.get("weight", 1))
    return Axis(varying, sorted(weights.items()))


def optimal_buckets(
    sizes: list[tuple[int, int]],
    candidates: list[int],
    latency_ms: Callable[[int], float],
    max_graphs: int,
    graph_cost_ms: Callable[[int], float] = lambda size: 0.0,
) -> tuple[list[int], float] | None:
    """The bucket set (at most `max_graphs` of `candidates`) minimising the expected cost per call: each call of
    `sizes` ((size, calls)) served by the smallest bucket holding it at `latency_ms(bucket)`, plus each bucket's
    `graph_cost_ms` (its compile amortised per call). Returns (buckets ascending, cost per call) or None when no
    candidate holds the largest size. O(candidates² x max_graphs)."""
    total = sum(weight for _, weight in sizes)
    if not sizes or total <= 0:
        return None
    buckets = sorted({c for c in candidates if c >= sizes[0][0]})
    if not buckets or buckets[-1] < sizes[-1][0]:
        return None

    def served(low: int, high: int) -> float:  # share of calls with low < size <= high
        return sum(w for s, w in sizes if low < s <= high) / total

    best: dict[tuple[int, int], tuple[float, int | None]] = {}  # (bucket index, graphs) -> (cost, previous index)
    for j, top in enumerate(buckets):
        best[j, 1] = (served(0, top) * latency_ms(top) + graph_cost_ms(top), None)
        for k in range(2, max_graphs + 1):
            options = [
                (best[i, k - 1][0] + served(buckets[i], top) * latency_ms(top) + graph_cost_ms(top), i)
                for i in range(j)
                if (i, k - 1) in best
            ]
            if options:
                best[j, k] = min(options)
    ends = [(cost, j, k) for (j, k), (cost, _) in best.items() if buckets[j] >= sizes[-1][0]]
    cost, j, k = min(ends)
    chosen: list[int] = []
    at: int | None = j
    while at is not None:
        chosen.append(buckets[at])
        at = best[at, k][1]
        k -= 1
    return sorted(chosen), cost


def sizes_to_time(sizes: list[tuple[int, int]], max_graphs: int, limit: int) -> list[int]:
    """At most `limit` sizes worth timing for a plan: the smallest and largest, the budget's optimum under a linear
    latency guess, then powers of two within the traffic's range and the heaviest sizes, alternately."""
    low, high = sizes[0][0], sizes[-1][0]
    prior = optimal_buckets(sizes, [s for s, _ in sizes], float, min(max_graphs, PRIOR_BUCKETS))
    chosen = [low, high, *(prior[0] if prior else [])]
    powers = [2**p for p in range(math.ceil(math.log2(low)), math.floor(math.log2(high)) + 1)]
    heavy = [s for s, _ in sorted(sizes, key=lambda item: (-item[1], item[0]))]
    for pair in zip(powers + [None] * len(heavy), heavy + [None] * len(powers), strict=False):
        chosen.extend(s for s in pair if s is not None)
    return sorted(list(dict.fromkeys(chosen))[:limit])


def interpolate(points: dict[int, float], size: int) -> float:
    """Latency at `size` from the measured `points`: linear between the nearest two, proportional past the ends."""
    if size in points:
        return points[size]
    known = sorted(points)
    below = [s for s in known if s < size]
    above = [s for s in known if s > size]
    if below and above:
        a, b = below[-1], above[0]
        return points[a] + (points[b] - points[a]) * (size - a) / (b - a)
    if below:
        return points[below[-1]] * size / below[-1]
    return points[above[0]]


class SizeTiming(NamedTuple):
    """What was measured at one size of the axis (None where it was not)."""

    dynamic_ms: float | None
    static_ms: float | None
    static_compile_s: float | None
    dynamic_mb: float | None = None  # the first call's peak memory above what was resident (see the module doc)
    static_mb: float | None = None


class Timings(NamedTuple):
    by_size: dict[int, SizeTiming]
    dynamic_compile_s: float  # every graph the dynamic option compiled, together
    dynamic_graphs: int


def plan_options(axis: Axis, timings: Timings, max_graphs: int, calls: int | None) -> list[dict[str, Any]]:
    """Every candidate plan with its expected latency per call over the traffic, spread, padding waste, graphs,
    compile time and memory; best first (see `rank_key`). Empty when neither a dynamic nor a static timing exists."""
    dynamic = _series(timings, "dynamic_ms")
    static = _series(timings, "static_ms")
    compiles = _series(timings, "static_compile_s")
    options = []
    if dynamic:
        served = {size: size for size, _ in axis.sizes}
        graphs = max(1, timings.dynamic_graphs)
        option = _option("dynamic", axis, served, dynamic, graphs, timings.dynamic_compile_s, max_graphs)
        options.append({**option, "memory_mb": plan_memory_mb(_series(timings, "dynamic_mb"), served)})
    if static:
        per_size = {size: size for size, _ in axis.sizes}
        compile_s = sum(interpolate(compiles, size) for size in per_size) if compiles else 0.0
        memory = _series(timings, "static_mb")
        per_graph = _option("static", axis, per_size, static, len(per_size), compile_s, max_graphs)
        for option in (per_graph, _bucket_option(axis, static, compiles, max_graphs, calls)):
            if option is not None:
                options.append({**option, "memory_mb": plan_memory_mb(memory, _served(axis, option))})
    return sorted(options, key=lambda option: rank_key(option, calls))


def plan_memory_mb(memory: dict[int, float], served: dict[int, int]) -> float | None:
    """The most memory one graph of a plan needed beyond what was resident: the highest of `memory` (measured per
    size) over the sizes the plan's graphs serve (`served`: traffic size -> the size its graph was made for),
    interpolated between measured sizes; None when nothing was measured (see the module doc: max, not sum)."""
    if not memory:
        return None
    return max(interpolate(memory, size) for size in set(served.values()))


def _served(axis: Axis, option: dict[str, Any]) -> dict[int, int]:
    """Traffic size -> the size its graph was made for, from a static or bucket option's sizes."""
    sizes = next((list(dims.values())[0] for dims in option["buckets"].values()), [])
    return {size: next((b for b in sizes if b >= size), size) for size, _ in axis.sizes}


def _series(timings: Timings, field: str) -> dict[int, float]:
    return {size: getattr(t, field) for size, t in timings.by_size.items() if getattr(t, field) is not None}


def _bucket_option(
    axis: Axis, static: dict[int, float], compiles: dict[int, float], max_graphs: int, calls: int | None
) -> dict[str, Any] | None:
    def graph_cost(size: int) -> float:
        return interpolate(compiles, size) * 1000.0 / calls if calls and compiles else 0.0

    found = optimal_buckets(axis.sizes, list(static), static.__getitem__, max_graphs, graph_cost)
    if found is None:
        return None
    buckets = found[0]
    served = {size: next(b for b in buckets if b >= size) for size, _ in axis.sizes}
    compile_s = sum(interpolate(compiles, b) for b in buckets) if compiles else 0.0
    return _option("buckets", axis, served, static, len(buckets), compile_s, max_graphs)


def _option(
    kind: str,
    axis: Axis,
    served: dict[int, int],
    latency: dict[int, float],
    graphs: int,
    compile_s: float,
    max_graphs: int,
) -> dict[str, Any]:
    """One plan's figures: each traffic size served at size `served[size]` (its bucket, or itself)."""
    total = sum(weight for _, weight in axis.sizes)
    per_call = [(interpolate(latency, served[size]), weight) for size, weight in axis.sizes]
    mean = sum(ms * w for ms, w in per_call) / total
    spread = math.sqrt(sum(w * (ms - mean) ** 2 for ms, w in per_call) / total)
    padded = sum(served[size] * w for size, w in axis.sizes)
    sizes = sorted(set(served.values()))
    return {
        "kind": kind,
        "buckets": {} if kind == "dynamic" else _buckets(axis, sizes),
        "graphs": graphs,
        "within_budget": graphs <= max_graphs,
        "expected_latency_ms": mean,
        "latency_spread_ms": spread,
        "worst_latency_ms": max(ms for ms, _ in per_call),
        "padding_waste": 1.0 - sum(size * w for size, w in axis.sizes) / padded,
        "compile_s": compile_s,
        "interpolated": sorted({served[size] for size, _ in axis.sizes} - set(latency)),
    }


def _buckets(axis: Axis, sizes: list[int]) -> dict[str, dict[str, list[int]]]:
    buckets: dict[str, dict[str, list[int]]] = {}
    for name, dim in axis.dims:
        buckets.setdefault(name, {})[str(dim)] = sizes
    return buckets


def rank_key(option: dict[str, Any], calls: int | None) -> tuple:
    """How plans are ranked: within the budget first; then the cost per call (the expected latency plus, when the
    context's calls per compile are known, the compile amortised over them)."""
    return (not option["within_budget"], cost_per_call_ms(option, calls), option["graphs"])


def cost_per_call_ms(option: dict[str, Any], calls: int | None) -> float:
    amortised = option["compile_s"] * 1000.0 / calls if calls else 0.0
    return option["expected_latency_ms"] + amortised


def choose(options: list[dict[str, Any]], calls: int | None) -> tuple[dict[str, Any], list[str]]:
    """The plan to recommend among ranked `options` (within the budget ones first) and why: the cheapest, unless
    one with fewer graphs is within TIE of it (fewer graphs: less compile, less memory, fewer fallbacks)."""
    fitting = [o for o in options if o["within_budget"]] or options
    best = fitting[0]
    cheapest = cost_per_call_ms(best, calls)
    simpler = [
        o for o in fitting if o["graphs"] < best["graphs"] and cost_per_call_ms(o, calls) <= cheapest * (1 + TIE)
    ]
    reasons = [_cost_reason(best, calls)]
    if simpler:
        pick = min(simpler, key=lambda o: (o["graphs"], cost_per_call_ms(o, calls)))
        reasons.append(
            f"{pick['kind']} ({pick['graphs']} graph(s)) is within {TIE:.0%} of {best['kind']} "
            f"({best['graphs']} graphs): fewer graphs compile faster and hold less memory"
        )
        best = pick
    over = [o["kind"] for o in options if not o["within_budget"]]
    if over:
        reasons.append(f"over the graph budget: {', '.join(over)}")
    return best, reasons


def _cost_reason(option: dict[str, Any], calls: int | None) -> str:
    text = f"{option['kind']}: {option['expected_latency_ms']:.3f} ms per call expected over the traffic"
    if calls:
        text += f", {cost_per_call_ms(option, calls):.3f} ms with its {option['compile_s']:.1f} s of compile spread "
        text += f"over {calls:,} calls per compile"
    return text


def traffic_sweep(entries: list[dict[str, Any]], max_graphs: int, limit: int) -> list[dict[str, list[int]]]:
    """The shapes to time for the traffic, at most `limit`: along its axis, `sizes_to_time` set into the most
    frequent call's shapes; without one axis, the most frequent distinct shapes."""
    ordered = sorted(entries, key=lambda entry: -int(entry.get("weight", 1)))
    axis = traffic_axis(entries)
    if axis is None:
        return [dict(entry["shapes"]) for entry in ordered[:limit]]
    base = ordered[0]["shapes"]
    points = []
    for size in sizes_to_time(axis.sizes, max_graphs, limit):
        point = {name: list(shape) for name, shape in base.items()}
        for name, dim in axis.dims:
            point[name][dim] = size
        points.append(point)
    return points
