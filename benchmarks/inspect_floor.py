"""`npu-advisor inspect` against its floor (issue 15, item 4), measured side by side in one run.

`.venv/bin/python benchmarks/inspect_floor.py [--repeats 3] [--models mlp,bert-base]` exports each model, then
alternates, `--repeats` times: the floor, a fresh `python -c` that does `import torch` + `torch.export.load` +
one `run_decompositions()` on the file (what any inspection must do; for BERT also the import of
`transformers.modeling_outputs`, without which stock `torch.export.load` cannot rebuild its output), and
`npu-advisor inspect FILE --json` (the CLI, its sandboxed child and everything the inspection adds). Wall time
and peak RSS (the largest process of each tree, from `wait4`) per run; prints the medians, the ratio
inspect / floor (median of the pairs) and the peak RSS against "file size + 0.6 GB", with the load average
before and after, as Markdown for benchmarks/RESULTS.md.
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

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != _HERE)]
PYTHON = sys.executable
CLI = str(Path(sys.executable).with_name("npu-advisor"))
FLOOR = "import sys, torch; torch.export.load(sys.argv[1]).run_decompositions()"
# stock torch.export.load must find the output container's class to rebuild a transformers model's output spec, so
# the floor of an HF export imports it (the advisor rebuilds the container without transformers: pytree_outputs)
HF_FLOOR = "import sys, torch, transformers.modeling_outputs; torch.export.load(sys.argv[1]).run_decompositions()"


def export(name: str, path: Path) -> str:
    import torch

    if name == "mlp":
        from tests.support.models import export_to, mlp

        return export_to(path, *mlp())
    import transformers

    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig()).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, 128))
    kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    torch.export.save(torch.export.export(model, args=(), kwargs=kwargs), str(path))
    return str(path)


def timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of the largest process in the command's tree."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{command[0]} failed: {process.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="mlp,bert-base")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    lines = [
        "| model | file MiB | floor s (median) | inspect s (median) | inspect / floor (median of pairs) "
        "| floor peak RSS MiB | inspect peak RSS MiB | RSS budget (file + 0.6 GB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = export(name, Path(tmp) / f"{name}.pt2")
            size_mb = os.path.getsize(path) / 2**20
            floors, inspects, ratios = [], [], []
            for _ in range(args.repeats):
                floor = timed([PYTHON, "-c", FLOOR if name == "mlp" else HF_FLOOR, path])
                inspect = timed([CLI, "inspect", path, "--json"])
                floors.append(floor)
                inspects.append(inspect)
                ratios.append(inspect[0] / floor[0])
            budget = size_mb + 0.6 * 1024
            lines.append(
                f"| {name} | {size_mb:.0f} | {statistics.median(f[0] for f in floors):.1f} | "
                f"{statistics.median(i[0] for i in inspects):.1f} | {statistics.median(ratios):.2f} "
                f"({', '.join(f'{r:.2f}' for r in ratios)}) | {max(f[1] for f in floors):.0f} | "
                f"{max(i[1] for i in inspects):.0f} | {budget:.0f} |"
            )
    print(f"load average before {load_before:.2f}, after {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
