"""Builders of synthetic Inspection / MeasurementRun dicts (advisor.core.results shapes) for decision tests.

Torch-free: the decision engine and reports are tested without compiling anything.
"""

from __future__ import annotations

from typing import Any

FAMILIES = {"eager": "baseline", "inductor": "generic", "torchair": "vendor", "onnxruntime": "export"}


def latency(median_ms: float, spread: float = 0.02, *, verdict: str = "valid") -> dict[str, Any]:
    """LatencyStats around `median_ms`; the 95% CI is +-spread (relative)."""
    half = median_ms * spread
    return {
        "n": 200,
        "median_ms": median_ms,
        "p90_ms": median_ms * 1.05,
        "p99_ms": median_ms * 1.1,
        "mean_ms": median_ms * 1.01,
        "stdev_ms": half,
        "iqr_ms": half * 2,
        "ci_low_ms": median_ms - half,
        "ci_high_ms": median_ms + half,
        "verdict": verdict,
    }


def measurement(
    backend: str,
    *,
    mode: str = "default",
    median_ms: float | None = 10.0,
    compile_s: float | None = 5.0,
    warm_s: float | None = None,
    status: str = "ok",
    reason: str | None = None,
    memory_mb: float | None = 100.0,
    spread: float = 0.02,
    device: str = "npu",
    verdict: str = "valid",
    eager_ms: float | None = None,
) -> dict[str, Any]:
    """A Measurement row. `eager_ms`: eager's median timed side by side in the same process (a compiled row
    then carries `speedup_vs_eager` and its CI the way advisor/stats.speedup computes them); an eager row
    always carries itself as its side-by-side eager timing, as the measurement child does."""
    ok = status == "ok"
    timed = latency(median_ms, spread, verdict=verdict) if ok and median_ms is not None else None
    eager_timed = speedup = speedup_ci = None
    if timed is not None and backend == "eager":
        eager_timed, speedup = timed, 1.0
    elif timed is not None and eager_ms is not None:
        eager_timed = latency(eager_ms, spread)
        speedup = eager_ms / median_ms
        speedup_ci = [eager_timed["ci_low_ms"] / timed["ci_high_ms"], eager_timed["ci_high_ms"] / timed["ci_low_ms"]]
    return {
        "backend": backend,
        "mode": mode,
        "family": FAMILIES.get(backend, "vendor"),
        "device": device,
        "workload": "inference",
        "status": status,
        "reason": reason,
        "stderr_tail": None,
        "compile_s_cold": (0.0 if backend == "eager" else compile_s) if ok else None,
        "compile_s_warm": warm_s if ok else None,
        "latency": timed,
        "eager_latency": eager_timed,
        "speedup_vs_eager": speedup,
        "speedup_ci": speedup_ci,
        "peak_memory_mb": memory_mb if ok else None,
        "memory_kind": "device",
        "accuracy": {
            "passed": status != "fail_accuracy",
            "max_abs_err": 1e-6,
            "rmse": 1e-7,
            "reference_rmse": 1e-7,
            "rmse_ratio": 1.0,
            "cosine": 1.0,
            "atol": 1e-5,
            "rtol": 1e-5,
        },
        "graph_count": 1,
        "graph_breaks": 0,
        "recompiles": 0,
        "throughput": None,
        "dynamic": None,
        "wall_s": 1.0,
        "snippet": "",
    }


def run(*rows: dict[str, Any], device: str = "npu", measured_on: str | None = None) -> dict[str, Any]:
    """A MeasurementRun; measured_on defaults to the device (a real measurement)."""
    return {
        "environment": {
            "device": device,
            "device_name": f"synthetic {device}",
            "torch_version": "2.13.0",
            "python_version": "3.11",
            "host": "test",
            "measured_on": measured_on or device,
        },
        "workload": "inference",
        "measurements": [dict(row, device=device) for row in rows],
    }


def op(
    name: str,
    *,
    inductor: str = "lowered",
    torchair: str = "supported",
    fake: bool = True,
    count: int = 1,
    note: str | None = None,
    unknown: bool | None = None,
) -> dict[str, Any]:
    coverage: dict[str, Any] = {"inductor": inductor, "torchair": torchair}
    if note is not None:
        coverage["torchair_note"] = note
    if unknown is not None:
        coverage["torchair_unknown"] = unknown
    return {
        "name": name,
        "namespace": name.split(".")[0],
        "count": count,
        "has_fake_kernel": fake,
        "coverage": coverage,
    }


def inspection(
    *,
    ops: list[dict[str, Any]] | None = None,
    custom_ops: list[dict[str, Any]] | None = None,
    graph_breaks: list[dict[str, Any]] | None = None,
    dynamic_dims: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    ops = ops if ops is not None else [op("aten.linear.default", count=3), op("aten.relu.default", count=2)]
    custom_ops = custom_ops or []
    breaks = graph_breaks or []
    return {
        "format": "exported_program",
        "saved_with_torch": "2.13.0",
        "parameters": {"count": 1000, "bytes": 4000},
        "flops": 123456,
        "inputs": [{"name": "x", "shape": [4, 64], "dtype": "float32"}],
        "ops": ops + custom_ops,
        "custom_ops": custom_ops,
        "graph_breaks": {"analysed": True, "count": len(breaks), "graph_count": len(breaks) + 1, "reasons": breaks},
        "dynamic_dims": dynamic_dims or [],
        "torchair_coverage": {"source": "table", "torch_npu_version": "2.14.0"},
        "runnable": {"ok": True, "reason": None},
        "warnings": [],
    }


def npu_op_inspection() -> dict[str, Any]:
    """A model with an npu:: op TorchAir converts and Inductor cannot trace (no fake kernel)."""
    return inspection(
        custom_ops=[op("npu.npu_rms_norm.default", inductor="untraceable", torchair="supported", fake=False)]
    )


def blog_run(**kwargs: Any) -> dict[str, Any]:
    """The blog's figures: Inductor 3.2 s / 12.4 ms, TorchAir 28.7 s / 8.2 ms, eager 20 ms."""
    return run(
        measurement("eager", median_ms=20.0, compile_s=0.0),
        measurement("inductor", median_ms=12.4, compile_s=3.2),
        measurement("torchair", mode="max-autotune", median_ms=8.2, compile_s=28.7),
        **kwargs,
    )
