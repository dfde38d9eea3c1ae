"""Training vs inference throughput per model: eager and Inductor, timed side by side (advisor.harness.measurement).

`.venv/bin/python benchmarks/training.py [--optimizer sgd|adamw]` exports the test MLP and the tiny BERT
(tests/support/models.py), measures each for inference and for training with `inductor:default` (eager is timed
interleaved in the Inductor child, and alone in the baseline child), and prints Markdown rows for
benchmarks/RESULTS.md. Samples/s come from the medians; "side by side" means the eager figure is the
one timed in the same process as Inductor.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
# this folder has a queue.py: keep it off the path so the standard library's queue is found
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]


def _row(model: str, workload: str, run: dict, batch: int) -> str:
    rows = {r["backend"]: r for r in run["measurements"]}
    eager, inductor = rows["eager"], rows["inductor"]
    if inductor["status"] != "ok":
        return f"| {model} | {workload} | {inductor['status']}: {inductor['reason']} |"
    side_eager = batch * 1e3 / inductor["eager_latency"]["median_ms"]
    low, high = inductor["speedup_ci"] or (None, None)
    ci = f" [{low:.2f}-{high:.2f}]" if low is not None else ""
    accuracy = "pass" if inductor["accuracy"]["passed"] else "FAIL"
    warm = inductor["compile_s_warm"]
    return (
        f"| {model} | {workload} | {side_eager:,.0f} | {inductor['throughput']['samples_per_s']:,.0f} | "
        f"{inductor['speedup_vs_eager']:.2f}x{ci} | {inductor['compile_s_cold']:.1f} / "
        f"{'-' if warm is None else f'{warm:.1f}'} s | {eager['peak_memory_mb']:.0f} / "
        f"{inductor['peak_memory_mb']:.0f} | {accuracy} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--optimizer", default="sgd", choices=("sgd", "adamw"))
    args = parser.parse_args()

    from advisor.harness.measurement import measure_model
    from tests.support.models import export_to, mlp, tiny_bert

    print(
        "| model | workload | eager samples/s (side by side) | Inductor samples/s | Inductor vs eager [95% CI] "
        "| Inductor compile cold / warm | peak MiB eager / Inductor | accuracy |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in (("MLP (batch 4)", mlp), ("tiny BERT (2x16 tokens)", tiny_bert)):
            model, inputs = build()
            path = export_to(Path(tmp) / "model.pt2", model, inputs)
            for workload in ("inference", "training"):
                started = time.perf_counter()
                run = measure_model(
                    path, backends=["inductor:default"], workload=workload, optimizer=args.optimizer, timeout_s=900
                )
                print(
                    _row(name, workload, run, inputs[0].shape[0]),
                    f"<!-- {time.perf_counter() - started:.0f} s -->",
                    flush=True,
                )


if __name__ == "__main__":
    main()
