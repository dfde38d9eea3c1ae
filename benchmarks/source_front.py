"""The from-source front end's own cost (issue 28): `npu-advisor inspect FILE.py:factory` against the plain script a
user would write for the same facts, `torch._dynamo.explain` + `torch.export.export`, side by side in one run.

Both run as a child process of their own, from the same factory file, so each pays `import torch` and building the
model once. The front end does more than the plain script: its first call is the plain script's explain (the same
capture), then it calls the model at a second batch size (a recompile: a dynamic trace) and at the example shape
again (which graph serves it tells whether marking the dims dynamic removes the recompile), and exports non-strict
(strict only where non-strict fails; `--strict-export` tries both). Target: <= 1.3x the plain script. Models: the
tests' small MLP and BERT-base (seq 128, batch 1, random weights from a local config). A-B-B-A order per model,
medians quoted.

Run: `.venv/bin/python benchmarks/source_front.py [--models mlp,bert]`. Prints Markdown for benchmarks/RESULTS.md.
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

FACTORIES = """
import torch


def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    return model, (torch.randn(8, 64),)


def bert():
    import transformers

    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig()).eval()
    ids = torch.randint(0, 30522, (1, 128))
    return model, (), {"input_ids": ids, "attention_mask": torch.ones(1, 128, dtype=torch.long)}
"""

PLAIN = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("factories", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
built = getattr(module, sys.argv[2])()
model, args, kwargs = (built + ({},))[:3]
with torch.no_grad():
    explanation = torch._dynamo.explain(model)(*args, **kwargs)
program = torch.export.export(model, args, kwargs)
print(explanation.graph_break_count, len(program.graph.nodes))
"""


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"{command[:4]} failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,bert")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="source-front-bench-"))
    factories = work / "factories.py"
    factories.write_text(FACTORIES)
    python = sys.executable
    load = os.getloadavg()[0]
    rows = []
    for name in args.models.split(","):
        front = [str(Path(python).with_name("npu-advisor")), "inspect", f"{factories}:{name}", "--json"]
        plain = [python, "-c", PLAIN, str(factories), name]
        times: dict[str, list[float]] = {"front end": [], "plain script": []}
        for kind in ("front end", "plain script", "plain script", "front end"):  # A-B-B-A: drift hits both
            times[kind].append(timed(front if kind == "front end" else plain))
            print(f"[{name}] {kind}: {times[kind][-1]:.1f} s", file=sys.stderr)
        medians = {kind: statistics.median(values) for kind, values in times.items()}
        rows.append((name, medians, times))
    print(f"Load {load:.2f} -> {os.getloadavg()[0]:.2f} (1-minute average).\n")
    print("| model | front end s: median (each) | plain explain + export s: median (each) | ratio |")
    print("|---|---|---|---|")
    for name, medians, times in rows:
        each = {kind: ", ".join(f"{t:.1f}" for t in values) for kind, values in times.items()}
        print(
            f"| {name} | {medians['front end']:.1f} ({each['front end']}) "
            f"| {medians['plain script']:.1f} ({each['plain script']}) "
            f"| {medians['front end'] / medians['plain script']:.2f} |"
        )


if __name__ == "__main__":
    main()
