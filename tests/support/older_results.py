"""An analysis stored by an early version, for the tests that older stored data still reads, renders and serves."""

from __future__ import annotations

import json

# An analysis as an early version stored it (shaped like tests/support/synthetic_analyses.py's): no `family`,
# `workload`, `drift`, `calls_per_sample`, `quality`, `tie`, `engine_version`, no coverage `torchair_via`; a break-even
# in its first shape (`against` / `calls`); fields no version documents (`notes`, `gpu_clock_mhz`).
OLDER_ANALYSIS = json.loads(
    """
{
  "model_name": "tiny-mlp",
  "context": {"stage": "production", "target": "cpu", "expected_calls_per_compile": 100000},
  "inspection": {
    "format": "exported_program",
    "saved_with_torch": "2.3.0",
    "parameters": {"count": 10000, "bytes": 40000},
    "flops": 1200000,
    "inputs": [{"name": "x", "shape": [8, 64], "dtype": "float32"}],
    "ops": [{"name": "aten.linear.default", "namespace": "aten", "count": 3, "has_fake_kernel": true,
             "coverage": {"inductor": "lowered", "torchair": "supported"}}],
    "custom_ops": [{"name": "npu.npu_rms_norm.default", "namespace": "npu", "count": 2, "has_fake_kernel": false,
                    "coverage": {"inductor": "fallback", "torchair": "supported"}}],
    "graph_breaks": {"analysed": true, "count": 1, "graph_count": 2,
                     "reasons": [{"reason": "Data-dependent branch on .item()", "location": "model.py:12"}]},
    "dynamic_dims": [{"input": "x", "dim": 0, "symbol": "s0", "min": 1, "max": 64}],
    "notes": "inspected by advisor 0.1"
  },
  "measurements": {
    "environment": {"device": "cpu", "device_name": "synthetic CPU", "torch_version": "2.3.0", "host": "old-host",
                    "measured_on": "cpu", "gpu_clock_mhz": null},
    "measurements": [
      {"backend": "eager", "mode": "default", "status": "ok", "compile_s_cold": 0,
       "latency": {"n": 200, "median_ms": 4.0, "p90_ms": 4.3, "p99_ms": 5.2, "mean_ms": 4.1, "stdev_ms": 0.16,
                   "iqr_ms": 0.16, "ci_low_ms": 3.84, "ci_high_ms": 4.16, "verdict": "valid"},
       "peak_memory_mb": 40, "accuracy": {"passed": true, "max_abs_err": 0.0}},
      {"backend": "inductor", "mode": "max-autotune", "status": "ok", "compile_s_cold": 14, "compile_s_warm": 3.5,
       "latency": {"n": 200, "median_ms": 2.0, "p90_ms": 2.2, "p99_ms": 2.6, "mean_ms": 2.04, "stdev_ms": 0.08,
                   "iqr_ms": 0.08, "ci_low_ms": 1.92, "ci_high_ms": 2.08, "verdict": "valid"},
       "speedup_vs_eager": 2.0, "speedup_ci": [1.9, 2.1], "peak_memory_mb": 44,
       "accuracy": {"passed": true, "max_abs_err": 1e-6}},
      {"backend": "torchair", "mode": "max-autotune", "status": "unavailable", "reason": "no NPU on this node"}
    ]
  },
  "recommendation": {
    "backend": "inductor",
    "mode": "max-autotune",
    "confidence": "high",
    "measured": true,
    "summary": "inductor max-autotune is the fastest accurate option.",
    "path": [{"rule": "production_prefers_steady_state", "question": "Is the model a fixed production model?",
              "evidence": {"stage": "production"}, "outcome": "favour steady-state speed"}],
    "why_not": {"eager": "slowest steady state", "torchair": "unavailable: no NPU on this node"},
    "break_even": {"against": "eager", "calls": 4200},
    "caveats": [{"issue": "1 graph break", "fix": "remove the .item() branch"}],
    "snippet": "model = torch.compile(model, backend=\\"inductor\\", mode=\\"max-autotune\\")"
  }
}
"""
)
