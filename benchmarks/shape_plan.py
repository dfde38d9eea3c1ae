"""The shape planner against exhaustive timing (issue 43).

`.venv/bin/python benchmarks/shape_plan.py [--models encoder,gpt2] [--max-graphs 4] [--calls 3000]` builds a small
text encoder (2 transformer layers, d=64) and a GPT-2 with GPT-2 small's widths (`transformers.GPT2Config()`:
n_embd 768, 12 heads) cut to 2 layers, draws a skewed sequence-length traffic (log-normal, most calls short, a
long tail; rounded up to multiples of 16, as a tokenizer padding to a multiple gives), and in one process per model:

- exhaustive: every distinct size timed under `torch.compile(dynamic=False)` (one static graph each, compile
  time per graph) and under one `torch.compile(dynamic=True)` graph; the best plan is the best of dynamic, static
  per size (if within the budget) and the brute-force best bucket set over every size, each scored on these
  timings;
- planned: only the sizes `advisor.core.shape_plan.sizes_to_time` picks (at most 8) are given to the planner
  (their timings from the same exhaustive table, so noise between runs is not counted as the planner's), as an
  analysis does; its chosen plan is then scored on every size's timings (its true expected latency per call).
  Timing only those sizes is run again on its own for its cost. Each timing runs in a fresh process with an empty
  Inductor cache directory, so every compile starts from scratch.

Every latency is the median of 7 blocks of 5 calls, static graphs first, then the dynamic one (Dynamo reset
between: the two would share its cache), all in one process.
Prints a Markdown table for benchmarks/RESULTS.md: distinct sizes, sizes timed by the plan, the chosen and the
exhaustive best plan with their expected latencies, the regret, and the compile+timing seconds each approach
spent (the analysis time the plan adds is its sizes' share).

`--analyze [--repeats 2] [--backends eager,inductor:default,onnxruntime]`: the analysis time the plan adds, end to
end. The model is exported (`torch.export`, the sequence dim dynamic up to the traffic's longest) and the whole
`npu-advisor analyze MODEL.pt2 --local --target cpu --backends ...` runs with and without `--shape-traffic` (the
same traffic as JSON Lines, `--max-graphs`), alternately, `--repeats` times each; the table gives the median wall
seconds of each, the difference and ratio, which options the analysis timed at the plan's sizes and the plan.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]

os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"  # every compile from scratch: the plan's cost is not a cache hit
os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"

import torch  # noqa: E402

from advisor.core.shape_plan import (  # noqa: E402
    Axis,
    SizeTiming,
    Timings,
    choose,
    optimal_buckets,
    plan_options,
    sizes_to_time,
)

ROUNDS = 7  # blocks per size
BLOCK = 5  # calls per block


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(1000, 64)
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embed(ids)).mean(1)


class Gpt2(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2Model

        self.model = GPT2Model(GPT2Config(n_layer=2))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).last_hidden_state


MODELS = {"encoder": (Encoder, 192), "gpt2": (Gpt2, 192)}
ROUND_TO = 16  # tokenizers padding to a multiple


def traffic(calls: int, longest: int, seed: int = 0) -> list[tuple[int, int]]:
    """(size, calls) of a skewed length distribution: log-normal around 24 tokens, rounded up to ROUND_TO."""
    rng = random.Random(seed)
    counts: dict[int, int] = {}
    for _ in range(calls):
        length = min(longest, max(ROUND_TO, int(rng.lognormvariate(3.2, 0.8))))
        size = -(-length // ROUND_TO) * ROUND_TO
        counts[size] = counts.get(size, 0) + 1
    return sorted(counts.items())


def time_sizes(model: torch.nn.Module, sizes: list[int]) -> tuple[dict[int, SizeTiming], float, float]:
    """Static (one graph per size) and dynamic (one graph) timings at `sizes`; the dynamic compile's seconds and
    the wall seconds all of it took. Two phases, Dynamo reset before each (a static and a dynamic graph of the same
    forward would share Dynamo's cache)."""
    started = time.perf_counter()
    static_ms, compiles = {}, {}
    torch._dynamo.reset()
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, assume_static_by_default=True, recompile_limit=64):
        static = torch.compile(model, dynamic=False)
        for size in sizes:
            compiles[size], static_ms[size] = _timed(static, size)
    torch._dynamo.reset()
    dynamic = torch.compile(model, dynamic=True)
    dynamic_compile, _ = _timed(dynamic, sizes[0])
    timings = {}
    for size in sizes:
        _, dynamic_ms = _timed(dynamic, size)
        timings[size] = SizeTiming(dynamic_ms, static_ms[size], compiles[size])
    torch._dynamo.reset()
    return timings, dynamic_compile, time.perf_counter() - started


def _timed(fn: torch.nn.Module, size: int) -> tuple[float, float]:
    """(the first call's seconds less the steady median, the median ms of ROUNDS blocks of BLOCK calls)."""
    ids = torch.randint(0, 1000, (1, size))
    with torch.no_grad():
        begin = time.perf_counter()
        fn(ids)
        first = time.perf_counter() - begin
        samples = []
        for _ in range(ROUNDS):
            begin = time.perf_counter()
            for _ in range(BLOCK):
                fn(ids)
            samples.append((time.perf_counter() - begin) / BLOCK * 1000)
    median = statistics.median(samples)
    return max(0.0, first - median / 1000), median


def time_in_child(name: str, sizes: list[int], threads: int) -> tuple[dict[int, SizeTiming], float, float]:
    """`time_sizes` in a fresh process with an empty Inductor cache directory: every compile from scratch."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        command = [sys.executable, __file__, "--child", name, "--sizes", ",".join(map(str, sizes))]
        command += ["--threads", str(threads)]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    data = json.loads(done.stdout.strip().splitlines()[-1])
    timings = {int(size): SizeTiming(*values) for size, values in data["timings"].items()}
    return timings, data["dynamic_compile_s"], data["seconds"]


def child(name: str, sizes: list[int]) -> None:
    torch.manual_seed(0)
    timings, dynamic_compile, seconds = time_sizes(MODELS[name][0]().eval(), sizes)
    data = {"timings": {s: list(t) for s, t in timings.items()}, "dynamic_compile_s": dynamic_compile}
    print(json.dumps({**data, "seconds": seconds}))


def true_cost(option: dict, axis: Axis, exact: dict[int, SizeTiming]) -> float:
    """A plan's expected latency per call on the exhaustive timings."""
    total = sum(w for _, w in axis.sizes)
    if option["kind"] == "dynamic":
        return sum(exact[s].dynamic_ms * w for s, w in axis.sizes) / total
    sizes = next(iter(next(iter(option["buckets"].values())).values()))
    return sum(exact[next(b for b in sizes if b >= s)].static_ms * w for s, w in axis.sizes) / total


def brute_force(axis: Axis, exact: dict[int, SizeTiming], max_graphs: int) -> tuple[list[int], float]:
    total = sum(w for _, w in axis.sizes)
    sizes = sorted(exact)
    best: tuple[list[int], float] | None = None
    for k in range(1, max_graphs + 1):
        for chosen in itertools.combinations(sizes, k):
            if chosen[-1] < axis.sizes[-1][0]:
                continue
            cost = sum(exact[next(b for b in chosen if b >= s)].static_ms * w for s, w in axis.sizes) / total
            if best is None or cost < best[1]:
                best = (list(chosen), cost)
    assert best is not None
    return best


def run(name: str, max_graphs: int, calls: int, threads: int) -> str:
    axis = Axis([("ids", 1)], traffic(calls, MODELS[name][1]))
    every = [s for s, _ in axis.sizes]
    exact, dyn_compile, exhaustive_s = time_in_child(name, every, threads)
    total = sum(w for _, w in axis.sizes)
    best = {"dynamic": sum(exact[s].dynamic_ms * w for s, w in axis.sizes) / total}
    if len(every) <= max_graphs:
        best["static"] = sum(exact[s].static_ms * w for s, w in axis.sizes) / total
    buckets, cost = brute_force(axis, exact, max_graphs)
    best[f"buckets {buckets}"] = cost
    best_kind = min(best, key=best.__getitem__)
    picked = sizes_to_time(axis.sizes, max_graphs, 8)
    # the plan sees only its sizes' timings, taken from the same table it is scored on (timing noise between two
    # runs is not the planner's); what timing only those sizes costs is measured on its own
    measured = {size: exact[size] for size in picked}
    _, _, planned_s = time_in_child(name, picked, threads)
    plan, _ = choose(plan_options(axis, Timings(measured, dyn_compile, 2), max_graphs, None), None)
    chosen = plan["kind"] + (f" {plan['buckets']['ids']['1']}" if plan["kind"] != "dynamic" else "")
    true = true_cost(plan, axis, exact)
    dp = optimal_buckets(axis.sizes, every, lambda s: exact[s].static_ms, max_graphs)
    assert dp is not None and abs(dp[1] - cost) < 1e-9, "the DP's optimum is brute force's"
    return (
        f"| {name} | {len(every)} ({every[0]}..{every[-1]}) | {picked} | {chosen}: {true:.3f} ms "
        f"(predicted {plan['expected_latency_ms']:.3f}) | {best_kind}: {best[best_kind]:.3f} ms | "
        f"{true / best[best_kind] - 1:+.1%} | {planned_s:.0f} s vs {exhaustive_s:.0f} s |"
    )


ANALYZE_BACKENDS = "eager,inductor:default,onnxruntime"  # three options: the plan's sizes are timed for two


def export_model(name: str, folder: Path) -> Path:
    """MODELS[name] exported with its sequence dim dynamic (2 up to the traffic's longest), as an analysis takes it."""
    torch.manual_seed(0)
    model, longest = MODELS[name][0]().eval(), MODELS[name][1]
    seq = torch.export.Dim("seq", min=2, max=longest)
    ids = torch.randint(0, 1000, (1, 32))
    path = folder / f"{name}.pt2"
    torch.export.save(torch.export.export(model, (ids,), dynamic_shapes={"ids": {1: seq}}), path)
    return path


def analyze_once(model: Path, backends: str, out: Path, traffic_args: list[str]) -> tuple[float, dict]:
    """One `npu-advisor analyze --local` (with `traffic_args` or none): its wall seconds and its JSON analysis."""
    cli = Path(sys.executable).with_name("npu-advisor")
    command = [str(cli), "analyze", str(model), "--local", "--target", "cpu", "--backends", backends]
    command += ["--format", "json", "--out", str(out), *traffic_args]
    begin = time.perf_counter()
    subprocess.run(command, capture_output=True, text=True, check=True)
    return time.perf_counter() - begin, json.loads(out.read_text())


def analyze_row(name: str, max_graphs: int, calls: int, repeats: int, backends: str) -> str:
    """The model analysed with and without its traffic, alternately: the medians, and what the plan run timed."""
    with tempfile.TemporaryDirectory() as folder:
        model = export_model(name, Path(folder))
        lines = [json.dumps({"ids": [1, size], "count": n}) for size, n in traffic(calls, MODELS[name][1])]
        traffic_file = Path(folder) / "traffic.jsonl"
        traffic_file.write_text("\n".join(lines) + "\n")
        with_args = ["--shape-traffic", str(traffic_file), "--max-graphs", str(max_graphs)]
        plain, planned, analysis = [], [], {}
        for _ in range(repeats):
            plain.append(analyze_once(model, backends, Path(folder) / "plain.json", [])[0])
            seconds, analysis = analyze_once(model, backends, Path(folder) / "planned.json", with_args)
            planned.append(seconds)
    rows = ((analysis.get("measurements") or {}).get("measurements")) or []
    swept = [f"{r['backend']}:{r['mode']}" for r in rows if r.get("sweep")]
    plan = (analysis.get("recommendation") or {}).get("shape_plan") or {}
    sizes = next((list(d.values())[0] for d in (plan.get("buckets") or {}).values()), [])
    chosen = f"{plan.get('option')} {plan.get('kind')} {sizes or ''}".strip()
    a, b = statistics.median(plain), statistics.median(planned)
    return (
        f"| {name} | {len(rows)} | {', '.join(f'{x:.0f}' for x in plain)} (median {a:.0f}) | "
        f"{', '.join(f'{x:.0f}' for x in planned)} (median {b:.0f}) | {b - a:+.0f} s ({b / a:.2f}x) | "
        f"{', '.join(swept)} | {chosen}: {plan.get('expected_latency_ms', float('nan')):.3f} ms |"
    )


def analyze_main(args: argparse.Namespace) -> None:
    print(f"torch {torch.__version__}, backends {args.backends}, budget {args.max_graphs} graphs, {args.repeats} runs")
    print()
    print(
        "| model | options | analyze --local, s | with --shape-traffic, s | added (ratio of medians) "
        "| timed at the plan's sizes | plan |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        print(analyze_row(name, args.max_graphs, args.calls, args.repeats, args.backends), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="encoder,gpt2")
    parser.add_argument("--max-graphs", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: leave the other cores alone)")
    parser.add_argument("--analyze", action="store_true", help="time the whole analyze with and without traffic")
    parser.add_argument("--repeats", type=int, default=2, help="--analyze: runs of each, alternately")
    parser.add_argument("--backends", default=ANALYZE_BACKENDS, help="--analyze: the options measured")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        child(args.child, [int(s) for s in args.sizes.split(",")])
        return
    if args.analyze:
        analyze_main(args)
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, budget {args.max_graphs} graphs")
    print()
    print(
        "| model | distinct sizes | sizes the plan timed | plan chosen: true expected latency | exhaustive best "
        "| regret | compile + timing: plan vs exhaustive |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        print(run(name, args.max_graphs, args.calls, args.threads), flush=True)


if __name__ == "__main__":
    main()
