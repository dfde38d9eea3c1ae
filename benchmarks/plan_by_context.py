"""Time-to-recommendation of a prototype analysis vs a production analysis of the same model (issue 15, item 3).

`.venv/bin/python benchmarks/plan_by_context.py [--model bert-base|tiny-bert] [--seq 128]` builds BERT-base from
its `transformers` config (default sizes, random init), exports it the way the transformers docs show
(`torch.export.export(model, args=(), kwargs={"input_ids": ..., "attention_mask": ...})`), and runs the whole
analysis (`advisor.harness.pipeline.run_analysis`, as `npu-advisor analyze` and the worker do) twice, one after
the other on the same machine: with a prototype context and with a production one, target cpu, every backend.
The prototype plan leaves out what cannot change its answer (advisor.core.decision.plan_pruning). Prints the wall
time of each, their ratio, the variants each measured or skipped, both recommendations, and the load average
before and after, as Markdown for benchmarks/RESULTS.md.
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

CONTEXTS = {
    "prototype": {"stage": "prototype", "target": "cpu"},
    "production": {"stage": "production", "target": "cpu", "model_changes": "frozen"},
}


def export_bert(path: Path, *, base: bool, seq: int, batch: int = 1) -> str:
    import torch
    import transformers

    config = (
        transformers.BertConfig()
        if base
        else transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    program = torch.export.export(model, args=(), kwargs={"input_ids": ids, "attention_mask": mask})
    torch.export.save(program, str(path))
    return str(path)


def analyse(path: str, context: dict) -> tuple[float, dict]:
    from advisor.core.context import parse_context
    from advisor.harness.pipeline import AnalysisRequest, run_analysis

    started = time.perf_counter()
    outcome = run_analysis(AnalysisRequest(model=path, device="cpu"), context=parse_context(context))
    wall = time.perf_counter() - started
    if outcome.failure is not None:
        raise SystemExit(f"analysis failed: {outcome.failure}")
    return wall, {"measurements": outcome.measurements, "recommendation": outcome.recommendation}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="bert-base", choices=("bert-base", "tiny-bert"))
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = export_bert(Path(tmp) / "bert.pt2", base=args.model == "bert-base", seq=args.seq)
        size_mb = os.path.getsize(path) / 2**20
        load_before = os.getloadavg()
        results = {name: analyse(path, context) for name, context in CONTEXTS.items()}
        load_after = os.getloadavg()
    print(f"model: {args.model} (batch 1, seq {args.seq}, {size_mb:.0f} MiB .pt2), device cpu, {os.cpu_count()} cores")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}\n")
    print("| context | wall s | measured | skipped | recommendation |")
    print("|---|---|---|---|---|")
    for name, (wall, result) in results.items():
        rows = result["measurements"]["measurements"]
        measured = [f"{r['backend']}:{r['mode']}" for r in rows if r["status"] not in ("skipped", "unavailable")]
        skipped = [f"{r['backend']}:{r['mode']}" for r in rows if r["status"] == "skipped"]
        rec = result["recommendation"]
        print(
            f"| {name} | {wall:.0f} | {', '.join(measured)} | {', '.join(skipped) or '-'} | "
            f"{rec['backend']}:{rec['mode']} ({rec['confidence']}) |"
        )
    ratio = results["prototype"][0] / results["production"][0]
    print(f"\nprototype / production wall time: {ratio:.2f} (target <= 0.50)")
    for name, (_, result) in results.items():
        print(f"\n{name}: {result['recommendation']['summary']}")


if __name__ == "__main__":
    main()
