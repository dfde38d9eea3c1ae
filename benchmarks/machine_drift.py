"""How much does this machine's speed drift from one half-second to the next?

Runs the same work back to back for `--seconds` and prints the median per-call time of every half-second
bucket, relative to the median over all buckets: a pure-Python loop (no torch, no memory traffic) and the
eager CNN of tests/support/models.py (one thread). If the buckets move by more than a few percent, two timing methods
run at different moments cannot agree to +-3 % on one try, whatever their bias: compare them paired
(benchmarks/fidelity.py brackets each harness window A-B-A) or over many repeats.

Run: `.venv/bin/python benchmarks/machine_drift.py [--seconds 10]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_HERE = REPO / "benchmarks"
sys.path[:] = [str(REPO), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]

BUCKET_S = 0.5


def bucket_medians(call: Callable[[], object], calls_per_block: int, seconds: float) -> list[float]:
    """Median per-call seconds of the blocks that started in each BUCKET_S bucket."""
    buckets: dict[int, list[float]] = {}
    started = time.perf_counter()
    while (now := time.perf_counter()) - started < seconds:
        for _ in range(calls_per_block):
            call()
        buckets.setdefault(int((now - started) / BUCKET_S), []).append((time.perf_counter() - now) / calls_per_block)
    return [statistics.median(times) for _, times in sorted(buckets.items())]


def python_loop() -> int:
    total = 0
    for i in range(2000):
        total += i * i
    return total


def describe(name: str, medians: list[float]) -> str:
    overall = statistics.median(medians)
    relative = sorted(m / overall for m in medians)
    p10, p90 = relative[len(relative) // 10], relative[-1 - len(relative) // 10]
    return (
        f"| {name} | {overall * 1e6:.1f} | {len(medians)} | {relative[0]:.2f}-{relative[-1]:.2f} | "
        f"{p10:.2f}-{p90:.2f} | {' '.join(f'{r:.2f}' for r in (m / overall for m in medians))} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    import torch

    from tests.support import models

    torch.set_num_threads(1)
    module, inputs = models.cnn()
    module.eval()
    rows = [describe("python loop", bucket_medians(python_loop, 20, args.seconds))]
    with torch.no_grad():
        for _ in range(50):
            module(*inputs)
        rows.append(describe("cnn eager, 1 thread", bucket_medians(lambda: module(*inputs), 50, args.seconds)))
    print("| work | median µs per call | buckets | min-max of bucket / median | p10-p90 | every bucket |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
