"""Measuring a model, split by concept:

- `plan`: which variants, and the checks before any child starts;
- `run`: the whole measurement (eager first, then each variant; a noisy run re-measured in bounded rounds);
- `variant`: one variant from the parent's side (its child, its row);
- `child`: what runs in one sandboxed child (load, compile, check, time);
- `timing`: side-by-side timing; `training`: training steps; `dynamic`: extra input sizes and recompiles.
"""

from advisor.core.quantized import quantizes_by_default
from advisor.harness.measurement.plan import (
    DEFAULT_MEMORY_LIMIT_MB,
    DEFAULT_TIMEOUT_S,
    MeasureError,
    MeasurementCancelled,
    plan_variants,
)
from advisor.harness.measurement.run import builds_inductor_cpp, exports_onnx, measure_model, measurement_zygote
from advisor.harness.measurement.timing import TimingPolicy

__all__ = [
    "DEFAULT_MEMORY_LIMIT_MB",
    "DEFAULT_TIMEOUT_S",
    "MeasureError",
    "MeasurementCancelled",
    "TimingPolicy",
    "builds_inductor_cpp",
    "exports_onnx",
    "measure_model",
    "measurement_zygote",
    "plan_variants",
    "quantizes_by_default",
]
