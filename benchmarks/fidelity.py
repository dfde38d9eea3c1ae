"""Fidelity of the measurement harness: does it agree with torch.utils.benchmark, and what does it cost?

For the MLP, the CNN and the tiny BERT of tests/support/models.py:

1. In ONE sandboxed child (same process, same inputs, same compiled callable): the harness's adaptive,
   interleaved timing of eager and Inductor, then `Timer.blocked_autorange(min_run_time=1)` and
   `Timer.adaptive_autorange()` for each. Reports median ratios (target within +-3 %) and the wall time
   each needed.
2. The whole `measure_model(path, backends=["inductor:default"])` with default settings: its wall time
   divided by (compile time cold + warm + timed windows) = the harness's overhead (target <= 1.3).

Run: `.venv/bin/python benchmarks/fidelity.py [--models mlp,cnn,bert] [--json out.json]`. Takes a few
minutes of CPU (three cold Inductor compiles twice). Numbers are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Not benchmarks/ itself: its sibling scripts (queue.py, ...) would shadow standard-library modules.
_HERE = REPO / "benchmarks"
sys.path[:] = [str(REPO), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]

MODELS = ("mlp", "cnn", "bert")


def compare_in_one_process(model_path: str, repeats: int = 11, bracket_s: float = 0.25) -> dict:
    """Sandbox target: harness timing vs torch.utils.benchmark on the same callables, in this process.

    This VM's throughput drifts by 10-15 % from one half-second to the next (even single-threaded, at load
    < 1), so two methods run at different moments disagree by that much whatever their bias. Each repeat is
    therefore bracketed A-B-A: `blocked_autorange(min_run_time=bracket_s)` of eager then Inductor, one
    harness window (both, interleaved, default `TimingPolicy`), then Inductor then eager again. The paired
    ratio of a repeat is the harness median over the mean of the two brackets, which cancels drift that is
    linear over the ~2 s of a repeat; the median of `repeats` paired ratios and its 95 % CI estimate the
    harness's bias. The unpaired ratio (median harness / median Timer over all repeats) is reported too.
    """
    import os
    import statistics

    import torch
    import torch.utils.benchmark as tb

    from advisor.core.stats import ci_relative_half_width, median_ci, summarize
    from advisor.harness.devices import open_device
    from advisor.harness.loading import load_model
    from advisor.harness.measurement.timing import TimingPolicy, time_side_by_side

    dev = open_device("cpu")
    torch.manual_seed(0)
    loaded = load_model(model_path)
    module, inputs = loaded.module, tuple(loaded.example_inputs)
    policy = TimingPolicy()
    per_repeat: list[dict] = []
    with torch.no_grad():
        compiled = torch.compile(module)
        compiled(*inputs)
        callables = {"eager": module, "inductor": compiled}
        timers = {
            name: tb.Timer(stmt="f(*x)", globals={"f": fn, "x": inputs}, num_threads=torch.get_num_threads())
            for name, fn in callables.items()
        }

        def blocked(name: str) -> float:
            return timers[name].blocked_autorange(min_run_time=bracket_s).median * 1e3

        for _ in range(repeats):
            before = {name: blocked(name) for name in ("eager", "inductor")}
            window = time_side_by_side({"eager": module, "backend": compiled}, inputs, dev, policy, lambda n: None)
            samples, calls_per_sample, harness_s = window.samples, window.calls_per_sample, window.seconds
            after = {name: blocked(name) for name in ("inductor", "eager")}
            entry: dict = {"harness_wall_s": harness_s}
            for name, key in (("eager", "eager"), ("inductor", "backend")):
                stats = summarize(samples[key], calls_per_sample=calls_per_sample[key])
                bracket = (before[name] + after[name]) / 2
                entry[name] = {
                    "harness_median_ms": stats["median_ms"],
                    "harness_n": stats["n"],
                    "calls_per_sample": calls_per_sample[key],
                    "harness_ci_half_width": ci_relative_half_width(samples[key]),
                    "blocked_median_ms": bracket,
                    "paired_ratio": stats["median_ms"] / bracket,
                }
            per_repeat.append(entry)
        result: dict = {"repeats": per_repeat, "ci_target": policy.ci_target, "loadavg": os.getloadavg()}
        for name, timer in timers.items():
            started = time.perf_counter()
            adaptive = timer.adaptive_autorange()
            paired = [r[name]["paired_ratio"] for r in per_repeat]
            result[name] = {
                "harness_median_ms": statistics.median(r[name]["harness_median_ms"] for r in per_repeat),
                "blocked_median_ms": statistics.median(r[name]["blocked_median_ms"] for r in per_repeat),
                "paired_ratios": paired,
                "paired_ratio": statistics.median(paired),
                "paired_ratio_ci": list(median_ci(sorted(paired))),
                "harness_n": statistics.median(r[name]["harness_n"] for r in per_repeat),
                "calls_per_sample": statistics.median(r[name]["calls_per_sample"] for r in per_repeat),
                "harness_ci_half_width": statistics.median(r[name]["harness_ci_half_width"] for r in per_repeat),
                "adaptive_median_ms": adaptive.median * 1e3,
                "adaptive_wall_s": time.perf_counter() - started,
            }
        result["harness_wall_s"] = statistics.median(r["harness_wall_s"] for r in per_repeat)
    return result


def measure_overhead(model_path: str) -> dict:
    """Whole `measure_model` wall time vs the time it spends compiling and in timed windows."""
    from advisor.harness.measurement import measure_model

    timed: dict[str, float] = {}

    def on_progress(event: dict) -> None:
        if event.get("stage") == "done" and event.get("timed_s"):
            timed[f"{event['backend']}:{event['mode']}"] = event["timed_s"]

    started = time.perf_counter()
    run = measure_model(model_path, backends=["inductor:default"], progress=on_progress)
    wall_s = time.perf_counter() - started
    compile_s = sum((r.get("compile_s_cold") or 0) + (r.get("compile_s_warm") or 0) for r in run["measurements"])
    rows = {f"{r['backend']}:{r['mode']}": r for r in run["measurements"]}
    inductor = rows["inductor:default"]
    return {
        "wall_s": wall_s,
        "compile_s": compile_s,
        "timed_s": sum(timed.values()),
        "overhead_ratio": wall_s / (compile_s + sum(timed.values())),
        "status": inductor["status"],
        "compile_s_cold": inductor["compile_s_cold"],
        "compile_s_warm": inductor["compile_s_warm"],
        "speedup": inductor["speedup_vs_eager"],
        "speedup_ci": inductor["speedup_ci"],
        "inductor_median_ms": (inductor["latency"] or {}).get("median_ms"),
        "eager_median_ms": (inductor["eager_latency"] or {}).get("median_ms"),
    }


def export_model(name: str, directory: Path) -> str:
    from tests.support import models

    factory = {"mlp": models.mlp, "cnn": models.cnn, "bert": models.tiny_bert}[name]
    module, inputs = factory()
    return models.export_to(directory / f"{name}.pt2", module, inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument("--repeats", type=int, default=11, help="A-B-A bracketed harness windows per model")
    parser.add_argument("--no-overhead", action="store_true", help="skip the whole-measure overhead part")
    args = parser.parse_args()
    from advisor.harness.sandbox import run_in_sandbox

    results = {}
    with tempfile.TemporaryDirectory(prefix="advisor-fidelity-") as tmp:
        for name in args.models.split(","):
            path = export_model(name, Path(tmp))
            print(f"[{name}] harness vs torch.utils.benchmark in one process ...", file=sys.stderr)
            same = run_in_sandbox(
                "benchmarks.fidelity:compare_in_one_process",
                {"model_path": path, "repeats": args.repeats},
                timeout_s=900,
                memory_limit_mb=16384,
                stage=f"fidelity {name}",
            )
            if same.status != "ok":
                raise SystemExit(f"{name}: {same.status}: {same.reason}\n{same.stderr_tail}")
            results[name] = {"same_process": same.value, "overhead": None}
            if not args.no_overhead:
                print(f"[{name}] whole measure_model overhead ...", file=sys.stderr)
                results[name]["overhead"] = measure_overhead(path)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(markdown(results))


def markdown(results: dict) -> str:
    lines = [
        "| model | variant | harness median ms (samples x calls, CI half-width) | blocked_autorange median ms "
        "(brackets) | paired ratio [95 % CI] (min-max of repeats) | unpaired ratio | harness wall s | "
        "adaptive_autorange wall s (median ms) | load avg |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        same = res["same_process"]
        for variant in ("eager", "inductor"):
            v = same[variant]
            low, high = v["paired_ratio_ci"]
            lines.append(
                f"| {name} | {variant} | {v['harness_median_ms']:.4g} ({v['harness_n']:.0f} x "
                f"{v['calls_per_sample']:.0f}, ±{v['harness_ci_half_width'] * 100:.1f} %) | "
                f"{v['blocked_median_ms']:.4g} | {v['paired_ratio']:.3f} [{low:.3f}-{high:.3f}] "
                f"({min(v['paired_ratios']):.2f}-{max(v['paired_ratios']):.2f}) | "
                f"{v['harness_median_ms'] / v['blocked_median_ms']:.3f} | {same['harness_wall_s']:.2f} | "
                f"{v['adaptive_wall_s']:.2f} ({v['adaptive_median_ms']:.4g}) | {same['loadavg'][0]:.1f} |"
            )
    lines += [
        "",
        "| model | measure wall s | compile s (cold + warm) | timed windows s | overhead ratio | "
        "Inductor speedup [CI] |",
        "|---|---|---|---|---|---|",
    ]
    for name, res in results.items():
        o = res["overhead"]
        if o is None:
            continue
        ci = o["speedup_ci"] or [float("nan")] * 2
        speedup = f"{o['speedup']:.2f}x [{ci[0]:.2f}-{ci[1]:.2f}]" if o["speedup"] else o["status"]
        lines.append(
            f"| {name} | {o['wall_s']:.1f} | {o['compile_s']:.1f} ({o['compile_s_cold'] or 0:.1f} + "
            f"{o['compile_s_warm'] or 0:.1f}) | {o['timed_s']:.1f} | {o['overhead_ratio']:.2f} | {speedup} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
