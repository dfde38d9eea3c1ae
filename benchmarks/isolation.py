"""What the bubblewrap sandbox costs: `analyze --local` wall time with and without isolation, side by side.

For each example model (advisor/harness/examples.py) runs `npu-advisor analyze MODEL --local --target cpu` with
ADVISOR_ISOLATION=bubblewrap and =none alternately (A-B-B-A per pair, so drift hits both sides alike), then
prints per model the median wall time of each and the median of the paired ratios isolated/plain. Target: <= 1.05.

Run: `.venv/bin/python benchmarks/isolation.py [--repeats 3] [--backends eager,inductor]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from advisor.cli import app; app()"]


def analyze_wall_s(model: Path, isolation: str, backends: str) -> float:
    env = os.environ | {"ADVISOR_ISOLATION": isolation}
    command = [
        *CLI,
        "analyze",
        str(model),
        "--local",
        "--target",
        "cpu",
        "--stage",
        "production",
        "--backends",
        backends,
        "--format",
        "json",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"analyze failed ({isolation}): {done.stderr[-2000:]}")
    return wall_s


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3, help="A-B-B-A pairs per model")
    parser.add_argument("--backends", default="eager,inductor")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from advisor.harness.examples import export_example
    from advisor.harness.isolation import probe_bubblewrap

    sandbox = probe_bubblewrap()
    print(
        f"bubblewrap {sandbox.version}; load average {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores; "
        f"backends {args.backends}; {args.repeats} A-B-B-A pairs per model"
    )
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'model':6} {'plain s':>8} {'isolated s':>10} {'ratio (median of pairs)':>24} {'pair ratios'}")
        for name in ("mlp", "cnn"):  # the small inference examples (gpt2-decode is a generation archive)
            model = export_example(name, Path(tmp) / f"{name}.pt2")
            plain: list[float] = []
            isolated: list[float] = []
            ratios: list[float] = []
            for repeat in range(args.repeats):
                order = ("bubblewrap", "none") if repeat % 2 == 0 else ("none", "bubblewrap")
                walls = {}
                for isolation in (*order, *reversed(order)):
                    walls.setdefault(isolation, []).append(analyze_wall_s(model, isolation, args.backends))
                pair_plain, pair_isolated = statistics.mean(walls["none"]), statistics.mean(walls["bubblewrap"])
                plain.append(pair_plain)
                isolated.append(pair_isolated)
                ratios.append(pair_isolated / pair_plain)
            print(
                f"{name:6} {statistics.median(plain):8.2f} {statistics.median(isolated):10.2f} "
                f"{statistics.median(ratios):24.3f} {' '.join(f'{r:.3f}' for r in ratios)}",
                flush=True,
            )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
