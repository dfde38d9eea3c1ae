"""What overlapping the inspection with eager's untimed preparation could save (issue 46, item 2), before building it.

`.venv/bin/python benchmarks/inspect_overlap.py MODEL.pt2 [--pairs 3] [--load-s 1.0]` starts two zygotes (one
per child, so both can run at once: a zygote forks one child at a time) and then alternates, `--pairs` times:

- serial (today): the inspection child to its end, then the eager child up to its `compiling` event - the end of
  its untimed preparation (load, float64 reference); it is cancelled there, before anything of it is timed;
- overlapped (the design): the inspection child, and `--load-s` seconds later (what its `load_model` takes: the
  measurement needs only the loaded inputs and dynamic dims) the eager child, until both the inspection has ended and
  eager has reached `compiling` - the gate its compile and timed window would wait at.

Each time ends when the inspection child returned or when eager's `compiling` event arrived, whichever is later
(not when that cancelled child is reaped).

Prints each pair's seconds and the medians of both and of the saving, with the load average before and after. The
zygotes' start-up is outside every timing (one per job today, shared). Nothing is compiled or timed here, so what
the saving shows is the upper bound of the design on this machine: the real one also pays a second concurrent
child's memory and the gate's wait.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]

from advisor.harness import isolated_inspection, measurement  # noqa: E402
from advisor.harness.measurement.plan import CHILD  # noqa: E402
from advisor.harness.measurement.run import default_timing  # noqa: E402
from advisor.harness.sandbox import Zygote, run_in_sandbox  # noqa: E402

GATE_STAGE = "compiling"  # eager's first event after its untimed preparation


def eager_preparation(zygote: Zygote, model: str) -> float:
    """Seconds from now until the eager child reports GATE_STAGE (it is cancelled there; its kill is not counted)."""
    reached = threading.Event()
    reached_at: list[float] = []
    workdir = zygote.new_path("measure")
    kwargs = {
        "model_path": model,
        "backend_spec": "eager",
        "mode": "default",
        "device": "cpu",
        "workload": "inference",
        "inputs_file": None,
        "input_shapes": None,
        "reference_path": f"{workdir}/reference.pt",
        "is_baseline": True,
        "policy": asdict(default_timing()),
    }

    def progress(event: dict) -> None:
        if event.get("stage") == GATE_STAGE and not reached_at:
            reached_at.append(time.perf_counter())
            reached.set()

    started = time.perf_counter()
    result = run_in_sandbox(
        CHILD,
        kwargs,
        timeout_s=600,
        memory_limit_mb=None,
        cache_dir=f"{workdir}/cache-0",  # the child creates it, and so the work dir the reference goes to
        stage="eager (preparation)",
        cancel=reached,
        on_progress=progress,
        zygote=zygote,
        readable=[model],
        writable=[workdir],
    )
    zygote.discard(workdir)
    if not reached.is_set():
        raise SystemExit(f"the eager child ended before its compile: {result.status} {result.reason} {result.value}")
    return reached_at[0] - started


def inspection(zygote: Zygote, model: str) -> float:
    started = time.perf_counter()
    result = isolated_inspection.inspect_isolated(model, zygote=zygote)
    if result.status != "ok":
        raise SystemExit(f"inspection: {result.status}: {result.reason}")
    return time.perf_counter() - started


def serial(inspecting: Zygote, eager: Zygote, model: str) -> tuple[float, float, float]:
    inspect_s = inspection(inspecting, model)
    prepare_s = eager_preparation(eager, model)
    return inspect_s + prepare_s, inspect_s, prepare_s


def overlapped(inspecting: Zygote, eager: Zygote, model: str, load_s: float) -> tuple[float, float, float]:
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    thread = threading.Thread(target=lambda: seconds.update(inspect=inspection(inspecting, model)))
    thread.start()
    time.sleep(load_s)
    eager_from = time.perf_counter() - started
    prepare_s = eager_preparation(eager, model)
    thread.join()
    return max(seconds["inspect"], eager_from + prepare_s), seconds["inspect"], prepare_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--load-s", type=float, default=1.0)
    args = parser.parse_args()
    model = os.path.abspath(args.model)
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    with (
        measurement.measurement_zygote("cpu", [model], inductor=False) as inspecting,
        measurement.measurement_zygote("cpu", [model], inductor=False) as eager,
    ):
        inspecting.start()
        eager.start()
        pairs = []
        for index in range(args.pairs):
            first, second = (serial, overlapped) if index % 2 == 0 else (overlapped, serial)
            runs = {
                first.__name__: first(inspecting, eager, model, *([args.load_s] if first is overlapped else [])),
                second.__name__: second(inspecting, eager, model, *([args.load_s] if second is overlapped else [])),
            }
            pairs.append(runs)
            for name, (total, inspect_s, prepare_s) in runs.items():
                parts = f"inspection {inspect_s:.2f}, eager to gate {prepare_s:.2f}"
                print(f"pair {index + 1} {name:10s} {total:6.2f} s ({parts})")
    serial_s = statistics.median(p["serial"][0] for p in pairs)
    overlapped_s = statistics.median(p["overlapped"][0] for p in pairs)
    saved = statistics.median(p["serial"][0] - p["overlapped"][0] for p in pairs)
    print(f"median serial {serial_s:.2f} s, overlapped {overlapped_s:.2f} s, saved (median of pairs) {saved:.2f} s")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
