"""What the time-breakdown pass costs the timings it never touches (issue 16, item 3).

The measuring child compiles with Inductor's `cpp.enable_kernel_profile` so its generated kernels show up in the
profiler (advisor.harness.measurement.profiler_pass): each kernel call then passes a RECORD_FUNCTION, which is a
thread-local check while no profiler runs. `.venv/bin/python benchmarks/kernel_markers.py [--model mlp|cnn]`
compiles the same example model twice in one process, with and without the markers, and times the two compiled
callables side by side (interleaved blocks, advisor.harness.measurement.timing) against each other, three windows.
It also times the profiled pass itself (the ~0.25 s of extra calls after the timed window). Prints the medians,
the with/without ratio per window and the load average, as Markdown for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--windows", type=int, default=3)
    args = parser.parse_args()

    import torch
    import torch._inductor.config as inductor_config

    from advisor.core.stats import summarize
    from advisor.harness import devices
    from advisor.harness.examples import build_example
    from advisor.harness.measurement.profiler_pass import time_breakdown
    from advisor.harness.measurement.timing import TimingPolicy, time_side_by_side

    model, inputs = build_example(args.model)
    compiled = {}  # time_side_by_side's names: "backend" = with the markers, "eager" = without
    with torch.no_grad():
        for name, markers in (("eager", False), ("backend", True)):
            # A code object of its own per variant: Dynamo caches compiled code per code object, and with
            # inlined nn.Modules a second torch.compile of the same model would reuse the first one's code.
            scope: dict = {}
            exec(compile("def forward(m, x):\n    return m(x)\n", f"<{name}>", "exec"), scope)  # noqa: S102
            module = copy.deepcopy(model)
            with inductor_config.patch({"cpp.enable_kernel_profile": markers, "fx_graph_cache": False}):
                step = torch.compile(scope["forward"])
                step(module, *inputs)  # compile now, under this setting
            compiled[name] = lambda *args, step=step, module=module: step(module, *args)
        dev = devices.open_device("cpu")
        policy = TimingPolicy(min_iters=50, min_time_s=2.0, max_time_s=6.0, ci_target=0.01)
        load_before = os.getloadavg()
        print(f"Inductor `{args.model}` example, CPU, torch {torch.__version__}; load before {_load(load_before)}\n")
        print("| window | median without markers | median with markers | with / without |")
        print("|---|---|---|---|")
        for window in range(1, args.windows + 1):
            samples = time_side_by_side(compiled, inputs, dev, policy, lambda n: None).samples
            without, with_ = summarize(samples["eager"])["median_ms"], summarize(samples["backend"])["median_ms"]
            print(f"| {window} | {without * 1e3:.1f} µs | {with_ * 1e3:.1f} µs | {with_ / without:.3f} |")
        started = time.perf_counter()
        breakdown = time_breakdown(compiled["backend"], inputs, "cpu", lambda: None, without / 1e3)
        profiled_s = time.perf_counter() - started
    print(
        f"\nThe profiled pass: {breakdown['calls']} calls, {profiled_s:.2f} s including the profiler's start and "
        f"stop; {breakdown['fused_kernels']} generated kernels seen. Load after {_load(os.getloadavg())}."
    )


def _load(values: tuple[float, float, float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    main()
