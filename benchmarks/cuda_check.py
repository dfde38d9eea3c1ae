"""The one prepared GPU check: measure one model on CUDA with device-event timing.

Run it on a node with a CUDA GPU (a session lent the GPU machine runs exactly this script):

    .venv/bin/python benchmarks/cuda_check.py --out "$OUT"

It exports the tiny CNN example, then measures eager, Inductor (default) and Inductor
reduce-overhead (CUDA graphs) with the normal harness (`advisor.harness.measurement.measure_model`, one
sandboxed child per variant, CUDA events for timing, eager interleaved side by side), and writes
`cuda_check.json` (the full MeasurementRun) and `cuda_check.md` (a table for benchmarks/RESULTS.md).
`--seed-table` instead regenerates the seed table's rows (benchmarks/seed_table.py: ResNet-50 latency, BERT-base
training throughput, memory, first compile) on the GPU, into `seed_table_cuda.{json,md}`.
Without a usable CUDA device it says so and exits 3; the test suite never needs it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BACKENDS = ["inductor:default", "inductor:reduce-overhead"]


def markdown_table(run: dict) -> str:
    env = run["environment"]
    lines = [
        f"CUDA check, {time.strftime('%Y-%m-%d')}: {env.get('device_name', '?')}, "
        f"torch {env.get('torch_version', '?')}, measured_on={env.get('measured_on', '?')}, timing by CUDA events.",
        "",
        "| backend:mode | status | compile cold / warm s | median ms [95% CI] | p99 ms | speedup vs eager [CI] |",
        "|---|---|---|---|---|---|",
    ]
    for row in run["measurements"]:
        latency = row.get("latency") or {}
        ci = row.get("speedup_ci") or [None, None]
        cells = [
            f"{row['backend']}:{row['mode']}",
            row["status"] + (f" ({row.get('reason')})" if row["status"] != "ok" else ""),
            f"{_fmt(row.get('compile_s_cold'))} / {_fmt(row.get('compile_s_warm'))}",
            f"{_fmt(latency.get('median_ms'), 3)} "
            f"[{_fmt(latency.get('ci_low_ms'), 3)}–{_fmt(latency.get('ci_high_ms'), 3)}]",
            _fmt(latency.get("p99_ms"), 3),
            f"{_fmt(row.get('speedup_vs_eager'))}x [{_fmt(ci[0])}–{_fmt(ci[1])}]",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "test-output", help="where to write the results")
    parser.add_argument("--model", default="cnn", help="example model: mlp or cnn")
    parser.add_argument(
        "--seed-table",
        action="store_true",
        help="instead: the seed table's rows (benchmarks/seed_table.py) on this GPU, ResNet-50 and BERT-base",
    )
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("no usable CUDA device (torch.cuda.is_available() is False): run this on a GPU node", file=sys.stderr)
        return 3
    if args.seed_table:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        import seed_table

        args.out.mkdir(parents=True, exist_ok=True)
        table = seed_table.main(["--device", "cuda", "--json", str(args.out / "seed_table_cuda.json")])
        (args.out / "seed_table_cuda.md").write_text(table)
        return 0

    from advisor.harness.examples import export_example
    from advisor.harness.measurement import measure_model

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = export_example(args.model, Path(tmp) / f"{args.model}.pt2")
        run = measure_model(
            str(model),
            backends=BACKENDS,
            device="cuda",
            progress=lambda event: print(json.dumps(event), file=sys.stderr),
        )
    (args.out / "cuda_check.json").write_text(json.dumps(run, indent=2))
    table = markdown_table(run)
    (args.out / "cuda_check.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
