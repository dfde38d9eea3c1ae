"""ONNX Runtime with and without spinning intra-op threads, quiet and busy, side by side in one process.

Why this exists: the zoo's busy plain script (issue 46) timed ONNX Runtime 4-5x slower than quiet while the
advisor's busy rows read 2-2.5x. The two differ in one session option: the advisor (and the snippet it gives the
user, advisor/core/snippets.py) turns off `session.intra_op.allow_spinning`; the script kept ONNX Runtime's default
(spinning on). A spinning thread keeps its core while it waits for work; under other processes' load it burns the
time slices the computing threads need.

For one zoo model (`--dir data/zoo --model distilbert`, built by benchmarks/zoo.py) it exports the ONNX file once,
builds both sessions and eager, and times them in interleaved `torch.utils.benchmark` rounds (as the plain script
does), first quiet, then under one `while True` process per core (zoo.BusyLoad). Prints medians and the busy/quiet
ratio of each.

Run: `.venv-zoo/bin/python benchmarks/ort_spinning.py --dir data/zoo --model distilbert [--rounds 5]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]


def _sessions(module: Any, args: tuple, kwargs: dict, scratch: str, threads: int) -> dict[str, Any]:
    import onnxruntime
    import torch

    path = os.path.join(scratch, "model.onnx")
    torch.onnx.export(module, args, path, kwargs=kwargs or None, dynamo=True)
    feed_values = [t.numpy() for t in (*args, *kwargs.values())]
    runners = {}
    for name, spinning in (("onnxruntime, spinning on (ORT's default)", "1"), ("onnxruntime, spinning off", "0")):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", spinning)
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = dict(zip([i.name for i in session.get_inputs()], feed_values, strict=False))
        runners[name] = lambda session=session, feed=feed: session.run(None, feed)
    return runners


def _medians(runners: dict[str, Any], rounds: int, min_run_time: float, threads: int) -> dict[str, float]:
    from benchmarks.zoo import interleaved_round_medians

    rounds_ms = interleaved_round_medians(runners, rounds, min_run_time, threads)
    return {name: statistics.median(values) for name, values in rounds_ms.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="data/zoo")
    parser.add_argument("--model", default="distilbert")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.3)
    args = parser.parse_args()

    import torch

    from advisor.harness import custom_op_stubs, pytree_outputs
    from benchmarks.zoo import BusyLoad

    path = str(Path(args.dir) / f"{args.model}.pt2")
    pytree_outputs.register_stand_ins(custom_op_stubs.read_program_json(path))
    module = torch.export.load(path).module()
    call_args, call_kwargs = torch.load(str(Path(args.dir) / f"{args.model}.inputs.pt"), weights_only=True)
    call_args = tuple(call_args)
    threads = torch.get_num_threads()
    runners = {"eager": lambda: module(*call_args, **call_kwargs)}
    runners.update(_sessions(module, call_args, call_kwargs, tempfile.mkdtemp(prefix="ort-spin-"), threads))
    with torch.no_grad():
        for runner in runners.values():
            runner()
    quiet = _medians(runners, args.rounds, args.min_run_time, threads)
    with BusyLoad(os.cpu_count() or 2):
        busy = _medians(runners, args.rounds, args.min_run_time, threads)
    print(f"{args.model}: {threads} threads, {args.rounds} interleaved rounds >= {args.min_run_time} s, medians (ms)")
    print("| runner | quiet ms | busy ms | busy / quiet |\n|---|---|---|---|")
    for name in runners:
        print(f"| {name} | {quiet[name]:.2f} | {busy[name]:.2f} | {busy[name] / quiet[name]:.2f} |")
    print(json.dumps({"model": args.model, "threads": threads, "quiet_ms": quiet, "busy_ms": busy}))


if __name__ == "__main__":
    main()
