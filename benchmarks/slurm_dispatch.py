"""Queued to measuring, and a job's wall time: a resident worker against `dispatch --executor slurm` (issue 45).

Both ways on this machine, against a real single-node Slurm (scripts/slurm_single_node.sh, as root), one analysis of
the tiny example MLP at a time (eager only, the product's own timing windows, `serve --no-worker` with tokens
required):
- resident: `npu-advisor worker` started before the analyses and left idle until each arrives (its next job's sandbox
  prepared while it waits, as in production);
- slurm: `npu-advisor dispatch --executor slurm` on the same server; each analysis gets a batch job running
  `npu-advisor worker --once`, which starts Python, probes the device, registers, prepares its sandbox and claims.
Per analysis, polled from the server every 0.1 s: `to_measuring_s`, from its submission to the first progress event of
a measured variant reaching the server (the job's stage `measure:...`: the worker's first variant has started; its
first timed window follows within the variant's load and warm-up); `wall_s`, from submission to `done`.

Run: `.venv/bin/python benchmarks/slurm_dispatch.py [--repeats 3] [--json out.json]`. Prints Markdown for
benchmarks/RESULTS.md with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_HERE = REPO / "benchmarks"
sys.path[:] = [str(REPO), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]

from tests.support.slurm_stack import Stack, slurm_problem, tagged, wait_for  # noqa: E402

POLL_S = 0.1


def one_analysis(stack: Stack, model: Path) -> dict[str, float]:
    submitted = time.monotonic()
    analysis = stack.submit(model)
    measuring: float | None = None
    while True:
        view = stack.analysis(analysis)
        now = time.monotonic()
        if measuring is None and (view.get("stage") or "").startswith("measure"):
            measuring = now
        if view["status"] == "done":
            return {"to_measuring_s": (measuring or now) - submitted, "wall_s": now - submitted}
        if view["status"] in ("failed", "cancelled") or now - submitted > 600:
            raise RuntimeError(f"analysis {analysis} ended {view['status']}: {view.get('error')}\n{stack.logs()}")
        time.sleep(POLL_S)


def resident(root: Path, model: Path, repeats: int) -> list[dict[str, float]]:
    stack = Stack(root, lease_ttl_s=60, fast_timing=False)
    try:
        stack.serve()
        stack.resident_worker()

        def idle() -> bool:
            workers = stack.client.get("/api/v1/workers").json()
            return any(worker["state"] == "active" for worker in workers)

        wait_for(idle, 120, "the resident worker registered", stack.logs)
        runs = []
        for _ in range(repeats):
            time.sleep(10)  # idle, as between two users' analyses: its sandbox is prepared meanwhile
            runs.append(one_analysis(stack, model))
        return runs
    finally:
        stack.stop_all()


def dispatched(root: Path, model: Path, repeats: int) -> list[dict[str, float]]:
    stack = Stack(root, lease_ttl_s=60, fast_timing=False)
    tag = f"bench{os.getpid()}"
    try:
        stack.serve()
        stack.dispatch(tag, "--max-pending", "1", "--max-running", "1")
        runs = []
        for _ in range(repeats):
            wait_for(lambda: not tagged(tag), 120, "the last batch job gone", stack.logs)
            time.sleep(2)
            runs.append(one_analysis(stack, model))
        return runs
    finally:
        stack.stop_all()


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(run[key] for run in runs), 2) for key in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if problem := slurm_problem():
        sys.exit(f"needs a running Slurm (scripts/slurm_single_node.sh as root): {problem}")
    from advisor.harness.examples import export_example

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="slurm-bench-") as tmp:
        root = Path(tmp)
        model = export_example("mlp", root / "mlp.pt2")
        (root / "resident").mkdir()
        (root / "slurm").mkdir()
        results = {
            "resident": resident(root / "resident", model, args.repeats),
            "slurm": dispatched(root / "slurm", model, args.repeats),
        }
    load_after = os.getloadavg()
    summary = {way: medians(runs) for way, runs in results.items()}
    if args.json:
        args.json.write_text(json.dumps({"runs": results, "medians": summary}, indent=2))
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; {args.repeats} analyses each way\n")
    print("| worker | queued → measuring (median s) | job wall time (median s) | runs (to measuring / wall, s) |")
    print("|---|---|---|---|")
    for way, runs in results.items():
        each = ", ".join(f"{run['to_measuring_s']:.1f} / {run['wall_s']:.1f}" for run in runs)
        print(f"| {way} | {summary[way]['to_measuring_s']} | {summary[way]['wall_s']} | {each} |")


if __name__ == "__main__":
    main()
