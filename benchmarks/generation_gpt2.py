"""GPT-2 generation on this machine's CPU, through the advisor itself (issue 16, item 5).

`.venv/bin/python benchmarks/generation_gpt2.py [--size small|tiny] [--prompt 64] [--cache 128] [--tokens 32]`
builds a random-init GPT-2 from its `transformers` config (`small`: the default GPT2Config, 124 M parameters),
exports it with a static KV cache as a generation archive (prefill + decode programs,
advisor.harness.examples.export_gpt2_generation) and runs the whole analysis (`run_analysis`, as `npu-advisor
analyze` and the worker do) with `workload: generation`, target cpu, eager and Inductor (default and
max-autotune). Prints, per option, the prefill (time to first token) and decode-step (time per output token)
medians and their side-by-side speedups with CIs, each phase's compile, tokens/s, whether the greedy tokens match
eager's, the recommendation with its per-phase step, and the load average before and after, as Markdown for
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]

SIZES = {"small": {}, "tiny": {"n_layer": 2, "n_head": 4, "n_embd": 128, "vocab_size": 1000, "n_positions": 256}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--cache", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()

    from advisor.core.context import parse_context
    from advisor.harness.examples import export_gpt2_generation
    from advisor.harness.pipeline import AnalysisRequest, run_analysis

    context = parse_context(
        {"stage": "production", "target": "cpu", "workload": "generation", "decode_tokens": args.tokens}
    )
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        path = export_gpt2_generation(Path(tmp) / "gpt2.pt2", SIZES[args.size], args.prompt, args.cache)
        export_s = time.perf_counter() - started
        load_before = os.getloadavg()
        started = time.perf_counter()
        request = AnalysisRequest(
            model=str(path),
            device="cpu",
            backends=["eager", "inductor"],
            workload="generation",
            decode_tokens=args.tokens,
        )
        outcome = run_analysis(request, context=context)
        wall = time.perf_counter() - started
        load_after = os.getloadavg()
    if outcome.failure is not None:
        raise SystemExit(f"analysis failed: {outcome.failure}")
    print(
        f"GPT-2 {args.size} (random init), prompt {args.prompt} tokens, static cache {args.cache}, "
        f"{args.tokens} greedy tokens; export {export_s:.0f} s, analysis {wall:.0f} s; "
        f"load average 1/5/15 min before {_load(load_before)}, after {_load(load_after)}\n"
    )
    print(
        "| option | status | prefill median | prefill vs eager [95% CI] | prefill compile | decode step median |"
        " decode vs eager [95% CI] | decode compile | tokens/s | greedy tokens |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in outcome.measurements["measurements"]:
        g = row.get("generation") or {}
        cells = [f"{row['backend']}:{row['mode']}", row["status"]]
        for name in ("prefill", "decode"):
            phase = g.get(name) or {}
            latency = phase.get("latency") or {}
            cells += [
                f"{latency['median_ms']:.2f} ms" if latency else "-",
                _speedup(phase),
                f"{phase['compile_s']:.1f} s" if phase.get("compile_s") else "-",
            ]
        cells.append(f"{g['tokens_per_s']:.1f}" if g.get("tokens_per_s") else "-")
        cells.append("match eager" if g.get("tokens_match") else f"differ at {g.get('first_mismatch')}" if g else "-")
        print("| " + " | ".join(cells) + " |")
    recommendation = outcome.recommendation
    print(f"\nRecommendation: {recommendation['backend']}:{recommendation['mode']} ({recommendation['confidence']}).")
    for step in recommendation["path"]:
        if step["rule"] in ("generation_phases", "compile_repaid_against_eager", "compiled_vs_eager"):
            print(f"- {step['question']} {step['outcome']}")
    if recommendation.get("layered"):
        print(
            "- layered: " + "; ".join(f"{k}: {v['backend']}:{v['mode']}" for k, v in recommendation["layered"].items())
        )


def _speedup(phase: dict) -> str:
    ratio, interval = phase.get("speedup_vs_eager"), phase.get("speedup_ci")
    if ratio is None:
        return "-"
    return f"{ratio:.2f}x [{interval[0]:.2f}-{interval[1]:.2f}]" if interval else f"{ratio:.2f}x"


def _load(values: tuple[float, float, float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
