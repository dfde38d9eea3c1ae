"""The JSON shapes that flow between the stages: inspection -> measurements -> recommendation.

These are TypedDicts (plain dicts at run time) so results cross process boundaries, HTTP and
the database as JSON without conversion: the producers (advisor.harness and its measuring children, which
do not import pydantic) build them. The server, the report and the dashboard read and validate the same
shapes with the pydantic models of advisor.core.results (tests/test_results_models.py keeps the field names
in step). Torch-free on purpose.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

ArtifactFormat = Literal["exported_program", "torchscript"]
InductorStatus = Literal["lowered", "decomposed", "fallback", "untraceable"]
TorchAirStatus = Literal["supported", "partial", "stub", "none"]
MeasurementStatus = Literal[
    "ok",
    "unavailable",
    "compile_error",
    "runtime_error",
    "fail_accuracy",
    "timeout",
    "crashed",
    "oom",
    "skipped",  # not measured: no result of it could change the recommendation (advisor.core.decision.plan_pruning)
]
Workload = Literal["inference", "training", "generation"]
DeviceKind = Literal["cpu", "cuda", "npu"]


# ---------------------------------------------------------------- inspection (issue 2)
class OpCoverage(TypedDict):
    inductor: InductorStatus
    torchair: TorchAirStatus  # for a decomposed op: the worst status of the ops in torchair_via
    torchair_via: NotRequired[list[str]]  # the ops TorchAir receives instead (the op is decomposed before it)
    torchair_note: NotRequired[str]  # what qualifies the torchair status
    torchair_unknown: NotRequired[bool]  # True: the status is not known off an NPU (the kernel is picked there)
    inductor_via: NotRequired[list[str]]  # for "decomposed": the ops Inductor lowers instead


class OpInfo(TypedDict):
    name: str  # "aten.linear.default", "npu.npu_rms_norm.default"
    namespace: str  # "aten", "prims", "npu", ...
    count: int
    has_fake_kernel: bool
    coverage: OpCoverage


class InputSpec(TypedDict):
    name: str
    shape: list[int | str]  # symbolic dims appear as their symbol, e.g. "s77"
    dtype: str  # "float32", "int64", ...
    keyword: NotRequired[bool]  # passed by keyword: model(..., name=tensor)


class DynamicDim(TypedDict):
    input: str
    dim: int
    symbol: str
    min: int | None
    max: int | None  # None = unbounded


class GraphBreak(TypedDict):
    reason: str
    location: str | None  # "file.py:12 in forward" where Dynamo knows it


class GraphBreaks(TypedDict):
    analysed: bool  # False when they could not be analysed; `note` says why
    count: int | None
    graph_count: int | None
    reasons: list[GraphBreak]
    note: NotRequired[str]


class CoverageSource(TypedDict):
    source: Literal["live", "table"]
    torch_npu_version: str | None


class Inspection(TypedDict):
    format: ArtifactFormat
    saved_with_torch: str | None
    parameters: dict  # {"count": int, "bytes": int}
    flops: int | None
    inputs: list[InputSpec]
    ops: list[OpInfo]
    custom_ops: list[OpInfo]  # every op outside aten/prims
    graph_breaks: GraphBreaks
    dynamic_dims: list[DynamicDim]
    torchair_coverage: CoverageSource
    runnable: dict  # {"ok": bool, "reason": str | None} - False e.g. npu:: ops on a node without torch_npu
    warnings: list[str]


# ---------------------------------------------------------------- measurement (issue 3)
class LatencyStats(TypedDict):
    n: int
    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    stdev_ms: float
    iqr_ms: float
    ci_low_ms: float  # 95% CI of the median
    ci_high_ms: float
    verdict: Literal["valid", "noisy"]
    calls_per_sample: NotRequired[int]  # >1: each sample is the mean of this many back-to-back calls (fast models)
    # p10-p90 range of the per-block medians over the median: how far the machine's speed moved during the
    # window, which the CI (of samples) does not cover; None when there were too few blocks of enough samples
    drift: NotRequired[float | None]


class Accuracy(TypedDict):
    passed: bool
    max_abs_err: float
    rmse: float
    reference_rmse: float  # the eager float32 run's own error against the float64 reference
    rmse_ratio: float | None
    cosine: float
    atol: float
    rtol: float
    reason: NotRequired[str]
    # int8 options only (advisor.harness.accuracy.judge_quantized): cosine, max_abs_err, mean_abs_err,
    # top1_agreement, top1_rows, allclose, and the limits applied (min_cosine, min_top1_agreement)
    quantized: NotRequired[dict]


class Environment(TypedDict, total=False):
    device: DeviceKind
    device_name: str
    soc_version: int | None
    cann_version: str | None
    driver_version: str | None
    torch_version: str
    torch_npu_version: str | None
    python_version: str
    host: str
    # "npu" only when the numbers really came from an Ascend NPU; "test-double" in CI.
    measured_on: str
    torch_threads: int  # torch.get_num_threads() in the measuring child: the intra-op threads every option ran with
    cpu_model: str  # /proc/cpuinfo's "model name" (the host CPU, whatever the device)
    # 1-minute load average readings {"load", "cores"}: "before" the run (the parent, before any child), "during" (the
    # highest reading at the start or end of any timed window), "after"; advisor.core.noise.shared_reasons
    load: dict


class MeasurementRowDict(TypedDict, total=False):
    backend: str  # "eager", "inductor", "torchair", "onnxruntime", "openvino", "tensorrt"
    mode: str  # "default", "max-autotune", "reduce-overhead", "npugraph_ex", ...
    family: Literal["baseline", "generic", "vendor", "export"]
    device: DeviceKind
    workload: Workload
    status: MeasurementStatus
    reason: str | None  # readable, for every status other than ok
    stderr_tail: str | None
    compile_s_cold: float | None  # backend.compile() + first call - steady median, empty cache
    compile_s_warm: float | None  # same, second process, same cache dir
    latency: LatencyStats | None  # this backend, steady state
    eager_latency: LatencyStats | None  # eager, interleaved in the same process
    speedup_vs_eager: float | None  # eager median / backend median (side by side)
    speedup_ci: list[float] | None  # [low, high]
    peak_memory_mb: float | None
    memory_kind: Literal["device", "rss"] | None
    # bytes of what the option deploys: the .onnx file (ONNX Runtime), the int8 weights and quantization parameters
    # (PT2E int8), the model's float weights otherwise (advisor.harness.backends.quantize.serialized_bytes)
    serialized_bytes: int | None
    accuracy: Accuracy | None
    graph_count: int | None
    graph_breaks: int | None
    recompiles: int | None
    throughput: dict | None  # {"samples_per_s": float, "tokens_per_s": float | None}
    dynamic: list[dict] | None  # one row per measured shape: {"shape": ..., "median_ms": ..., "recompiles": ...}
    compile_breakdown: dict | None  # export backends: {"export_s", "session_s", "cached", "first_call_s"}
    time_breakdown: dict | None  # torch.profiler pass: results.TimeBreakdown (harness.measurement.time_breakdown)
    sweep: list[dict] | None  # the context's shape sweep, one results.SweepPoint per shape
    generation: dict | None  # workload="generation": results.Generation (prefill and decode phases)
    # which window `latency` (the number every surface quotes) came from: "first window" or "re-measured window"
    latency_window: str
    # the child's 1-minute load average readings at the "start" and "end" of its timed window: {"load", "cores"}
    timing_load: dict | None
    wall_s: float
    snippet: str
    # workload="training" only: {optimizer, loss, train_mode_note, state_mb: {parameters, gradients,
    # optimizer_state}, backward_graphs, first_step_peak_mb}
    training: dict | None


class MeasurementRun(TypedDict):
    environment: Environment
    workload: Workload
    measurements: list[MeasurementRowDict]
    quality: NotRequired[dict]  # advisor.core.noise: {"noisy", "whole_run", "reasons", "noisy_rows", "unresolved", ...}


# ---------------------------------------------------------------- recommendation (issue 4)
class RuleStep(TypedDict):
    rule: str  # e.g. "prototype_prefers_fast_compile"
    question: str
    evidence: dict
    outcome: str


class Caveat(TypedDict):
    issue: str
    fix: str


class Recommendation(TypedDict, total=False):
    backend: str | None  # None = no backend qualifies
    mode: str | None
    confidence: Literal["high", "medium", "low"]
    measured: bool  # False = from the tree and coverage alone ("unmeasured")
    tie: bool
    layered: dict | None  # {"development": {...}, "production": {...}} for mixed fleets
    summary: str
    path: list[RuleStep]
    why_not: dict[str, str]
    break_even: dict | None
    caveats: list[Caveat]
    snippet: str
    engine_version: str
