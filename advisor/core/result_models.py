"""Pydantic mirrors of the result shapes in advisor.core.schema, for where results cross a trust boundary.

The server validates a worker's `POST /api/v1/jobs/{id}/complete` against `CompletedResults` (app/results.py):
wrong types or out-of-range identifiers are refused with the field named. The models are deliberately open:

- every field is optional (older and test workers send less) and nullable, except where the TypedDict says
  a present value is never null and the views rely on it (latency statistics, parameter counts, a row's
  backend and status, the speedup interval's bounds); a non-finite measured number (NaN, Infinity) is stored
  as null, or voids the latency / interval it belongs to (app.results, before validation);
- unknown fields are kept (`extra="allow"`): workers send more than documented (`training`, notes, ...);
- enum-like fields are bounded strings, not Literals, where a real worker may send a value the TypedDict does
  not list (e.g. a measurement status), except `format` and `workload`, which the engine branches on;
- identifiers that land in indexed columns (backend, mode, device, status) are bounded to the column sizes
  of app.models, and lists are bounded (at most MAX_MEASUREMENTS measurement rows).

Free text is capped (truncated with a marker) by app.results before validation, not here. Kept out of
advisor/core/schema.py so that the measuring children, which import it, do not import pydantic. Torch-free.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_MEASUREMENTS = 200  # rows of one MeasurementRun
MAX_OPS = 10_000  # distinct ops of one model (real models: tens to a few hundred)
MAX_ITEMS = 1_000  # inputs, dynamic dims, graph-break reasons, warnings, dynamic-shape rows, via lists
MAX_SHAPE_DIMS = 64
INT64 = 2**63 - 1

Int = Annotated[int, Field(ge=-INT64 - 1, le=INT64)]
Count = Annotated[int, Field(ge=0, le=INT64)]
Name = Annotated[str, Field(max_length=200)]
Label = Annotated[str, Field(max_length=64)]


class _Open(BaseModel):
    """Typed where present, optional, unknown fields kept."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


# ---------------------------------------------------------------- inspection
class OpCoverageModel(_Open):
    inductor: Label | None = None
    torchair: Label | None = None
    torchair_via: list[Name] | None = Field(default=None, max_length=MAX_ITEMS)
    torchair_note: str | None = None
    torchair_unknown: bool | None = None
    inductor_via: list[Name] | None = Field(default=None, max_length=MAX_ITEMS)


class OpInfoModel(_Open):
    name: Name | None = None
    namespace: Label | None = None
    count: Count | None = None
    has_fake_kernel: bool | None = None
    coverage: OpCoverageModel | None = None


class InputSpecModel(_Open):
    name: Name | None = None
    shape: list[Int | Name] | None = Field(default=None, max_length=MAX_SHAPE_DIMS)
    dtype: Label | None = None
    keyword: bool | None = None


class DynamicDimModel(_Open):
    input: Name | None = None
    dim: Count | None = None
    symbol: Name | None = None
    min: Int | None = None
    max: Int | None = None


class GraphBreakModel(_Open):
    reason: str | None = None
    location: str | None = None


class GraphBreaksModel(_Open):
    analysed: bool | None = None
    count: Count | None = None
    graph_count: Count | None = None
    reasons: list[GraphBreakModel] | None = Field(default=None, max_length=MAX_ITEMS)
    note: str | None = None


class CoverageSourceModel(_Open):
    source: Label | None = None
    torch_npu_version: Label | None = None


class ParametersModel(_Open):
    count: Count = None  # type: ignore[assignment]  # may be absent, never null (the reports format it)
    bytes: Count = None  # type: ignore[assignment]


class RunnableModel(_Open):
    ok: bool | None = None
    reason: str | None = None


class InspectionModel(_Open):
    format: Literal["exported_program", "torchscript"] | None = None
    saved_with_torch: Label | None = None
    parameters: ParametersModel | None = None
    flops: Count | None = None
    inputs: list[InputSpecModel] | None = Field(default=None, max_length=MAX_ITEMS)
    ops: list[OpInfoModel] | None = Field(default=None, max_length=MAX_OPS)
    custom_ops: list[OpInfoModel] | None = Field(default=None, max_length=MAX_OPS)
    graph_breaks: GraphBreaksModel | None = None
    dynamic_dims: list[DynamicDimModel] | None = Field(default=None, max_length=MAX_ITEMS)
    torchair_coverage: CoverageSourceModel | None = None
    runnable: RunnableModel | None = None
    warnings: list[str] | None = Field(default=None, max_length=MAX_ITEMS)


# ---------------------------------------------------------------- measurements
class LatencyStatsModel(_Open):
    # The statistics may be absent but never null: a latency whose numbers are not known is no latency (a
    # non-finite one makes app.results store the whole latency as null, which every view handles).
    n: Count = None  # type: ignore[assignment]
    median_ms: float = None  # type: ignore[assignment]
    p90_ms: float = None  # type: ignore[assignment]
    p99_ms: float = None  # type: ignore[assignment]
    mean_ms: float = None  # type: ignore[assignment]
    stdev_ms: float = None  # type: ignore[assignment]
    iqr_ms: float = None  # type: ignore[assignment]
    ci_low_ms: float = None  # type: ignore[assignment]
    ci_high_ms: float = None  # type: ignore[assignment]
    verdict: Label = None  # type: ignore[assignment]
    calls_per_sample: Count | None = None
    drift: float | None = None


class AccuracyModel(_Open):
    passed: bool | None = None
    max_abs_err: float | None = None
    rmse: float | None = None
    reference_rmse: float | None = None
    rmse_ratio: float | None = None
    cosine: float | None = None
    atol: float | None = None
    rtol: float | None = None
    reason: str | None = None


class EnvironmentModel(_Open):
    device: Annotated[str, Field(max_length=16)] | None = None
    device_name: Name | None = None
    soc_version: Int | None = None
    cann_version: Label | None = None
    driver_version: Label | None = None
    torch_version: Label | None = None
    torch_npu_version: Label | None = None
    python_version: Label | None = None
    host: Name | None = None
    measured_on: Label | None = None


class MeasurementModel(_Open):
    # backend / mode / device / status land in the indexed columns of app.models.Measurement
    backend: Label = None  # type: ignore[assignment]  # may be absent, never null
    mode: Label | None = None
    family: Label | None = None
    device: Annotated[str, Field(max_length=16)] | None = None
    workload: Literal["inference", "training"] | None = None
    status: Annotated[str, Field(max_length=32)] = None  # type: ignore[assignment]  # may be absent, never null
    reason: str | None = None
    stderr_tail: str | None = None
    compile_s_cold: float | None = None
    compile_s_warm: float | None = None
    latency: LatencyStatsModel | None = None
    eager_latency: LatencyStatsModel | None = None
    speedup_vs_eager: float | None = None
    speedup_ci: list[float] | None = Field(default=None, max_length=2)  # [low, high]
    peak_memory_mb: float | None = None
    memory_kind: Label | None = None
    accuracy: AccuracyModel | None = None
    graph_count: Count | None = None
    graph_breaks: Count | None = None
    recompiles: Count | None = None
    throughput: dict[str, Any] | None = None
    dynamic: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_ITEMS)
    wall_s: float | None = None
    snippet: str | None = None
    training: dict[str, Any] | None = None


class MeasurementRunModel(_Open):
    environment: EnvironmentModel | None = None
    workload: Literal["inference", "training"] | None = None
    measurements: list[MeasurementModel] | None = Field(default=None, max_length=MAX_MEASUREMENTS)
    quality: dict[str, Any] | None = None  # advisor.core.noise's verdict on the run


class CompletedResults(BaseModel):
    """The body of `POST /api/v1/jobs/{id}/complete`: the worker's Inspection and MeasurementRun."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    inspection: InspectionModel | None = None
    measurements: MeasurementRunModel | None = None
