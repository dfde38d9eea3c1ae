"""Issue 31's benchmark: the int8 options against fp32 eager for ResNet-18 and DistilBERT at batch 1 on this CPU.

Each model is exported (random init from a `transformers` config, nothing downloaded) and measured in one run with
eager, ONNX Runtime (float), `onnxruntime:int8`, `inductor:pt2e-int8` and `openvino:int8` (its row says
"unavailable" without the `openvino` extra): latency side by side with eager, the
deployed size (`serialized_bytes`), the peak memory, and the int8 drift from the float model (cosine, top-1
agreement, max and mean absolute error). One input batch: top-1 agreement is over 1 row, so it reads 0 % or 100 %.
Under each table: eager's median in every process that timed it and the run's noise verdict, since on a node shared
with other work eager (torch's spinning OpenMP threads) slows far more than the export runtimes and every
speedup_vs_eager overstates (benchmarks/RESULTS.md, "Quantized options").

    .venv/bin/python benchmarks/quantized.py [--out results.json] [--models resnet18,distilbert]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

BACKENDS = ["onnxruntime", "onnxruntime:int8", "inductor:pt2e-int8", "openvino:int8"]


def export_resnet18(path: Path) -> str:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.ResNetConfig(
        num_labels=1000, depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], layer_type="basic"
    )
    model = transformers.ResNetForImageClassification(config).eval()
    torch.export.save(torch.export.export(model, args=(torch.randn(1, 3, 224, 224),)), str(path))
    return str(path)


def export_distilbert(path: Path) -> str:
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(num_labels=2)).eval()
    ids = torch.randint(0, 30522, (1, 128))
    torch.export.save(torch.export.export(model, args=(ids,)), str(path))
    return str(path)


MODELS = {"resnet18": export_resnet18, "distilbert": export_distilbert}


def measure(path: str) -> dict:
    from advisor.harness.measurement import TimingPolicy, measure_model

    started = time.perf_counter()
    run = measure_model(
        path,
        backends=BACKENDS,
        timing=TimingPolicy(warm_cache=False, dynamic_sizes=0, profile=False),
        timeout_s=1800,
        remeasure=False,
    )
    return {
        "wall_s": time.perf_counter() - started,
        "rows": run["measurements"],
        "environment": run["environment"],
        "quality": run["quality"],
    }


def markdown(results: dict) -> str:
    lines = [
        "| model | option | median ms | speedup vs eager [95% CI] | size MiB | peak MiB | cosine | top-1 | max abs err"
        " | mean abs err | cold compile s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, result in results["models"].items():
        for row in result["rows"]:
            label = f"{row['backend']}:{row['mode']}"
            if row["status"] != "ok":
                lines.append(f"| {name} | {label} | {row['status']}: {(row.get('reason') or '')[:120]} |")
                continue
            drift = (row.get("accuracy") or {}).get("quantized") or {}
            ci = row.get("speedup_ci") or [None, None]
            speedup = (
                f"{row['speedup_vs_eager']:.2f}x [{ci[0]:.2f}-{ci[1]:.2f}]" if ci[0] is not None else "1.00x (baseline)"
            )
            size = row.get("serialized_bytes")
            top1 = drift.get("top1_agreement")

            def num(value: float | None, spec: str) -> str:
                return "-" if value is None else format(value, spec)

            lines.append(
                f"| {name} | {label} | {row['latency']['median_ms']:.2f} | {speedup} | "
                f"{num(size and size / 2**20, '.1f')} | {num(row.get('peak_memory_mb'), '.0f')} | "
                f"{num(drift.get('cosine'), '.4f')} | {'-' if top1 is None else f'{top1:.0%}'} | "
                f"{num(drift.get('max_abs_err'), '.3g')} | {num(drift.get('mean_abs_err'), '.3g')} | "
                f"{num(row.get('compile_s_cold'), '.1f')} |"
            )
    for name, result in results["models"].items():
        quality = result.get("quality") or {}
        medians = ", ".join(f"{label} {ms:.2f} ms" for label, ms in (quality.get("eager_medians_ms") or {}).items())
        verdict = "noisy: " + "; ".join(quality.get("reasons") or []) if quality.get("noisy") else "not noisy"
        lines.append(f"\n{name}: eager's median in each process: {medians or '-'}; {verdict}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args(argv)
    results: dict = {"models": {}}
    with tempfile.TemporaryDirectory(prefix="npu-advisor-quant-bench-") as tmp:
        for name in args.models.split(","):
            print(f"{name}: exporting and measuring {', '.join(BACKENDS)} ...", file=sys.stderr, flush=True)
            path = MODELS[name](Path(tmp) / f"{name}.pt2")
            results["models"][name] = measure(path)
            if args.out:
                args.out.write_text(json.dumps(results, indent=1, default=str))
    text = markdown(results)
    print(text)
    return text


if __name__ == "__main__":
    main()
