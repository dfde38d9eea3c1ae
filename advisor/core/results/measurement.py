"""One measured option (`MeasurementRow`) and the run it belongs to (advisor.harness.measurement.run)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field

from advisor.core.catalogue import option_label
from advisor.core.results._base import MAX_ITEMS, MAX_MEASUREMENTS, Count, DeviceLabel, Label, Open
from advisor.core.results.environment import Environment
from advisor.core.results.generation import Generation
from advisor.core.results.latency import LatencyStats
from advisor.core.results.sweep import SweepPoint
from advisor.core.results.time_breakdown import TimeBreakdown

Workload = Literal["inference", "training", "generation"]  # the engine branches on it: no other value is accepted
# What advisor.harness.measurement writes in a row's `status` (the row accepts any bounded string: see its comment)
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


class Accuracy(Open):
    passed: bool | None = None
    max_abs_err: float | None = None
    rmse: float | None = None
    reference_rmse: float | None = None  # the eager float32 run's own error against the float64 reference
    rmse_ratio: float | None = None
    cosine: float | None = None
    atol: float | None = None
    rtol: float | None = None
    reason: str | None = None
    quantized: dict[str, Any] | None = None  # int8 options: their drift from the float model and the limits applied


class SeededCompile(Open):
    """A compile that started from the kernels another option built in the same analysis
    (advisor.harness.measurement.seeded_cache): what was measured, and what the cold bound adds to it."""

    from_option: Label | None = None  # the option whose compile cache this one's started from
    measured_s: float | None = None  # this option's compile with that cache
    floor_cold_s: float | None = None  # that option's own cold compile
    files_seeded: Count | None = None  # the files of its cache this one's compile started from


def compile_is_bound(seeded: Mapping[str, Any] | None) -> bool:
    """Whether a row's `compile_seeded` (as a dict) makes its `compile_s_cold` an upper bound: it says what was
    measured. The decision's wording and the reports' notes both read it here."""
    return isinstance(seeded, Mapping) and seeded.get("measured_s") is not None


class MeasurementRow(Open):
    # The enum-like fields (backend, mode, device, status) are bounded strings, not Literals: a real worker may send
    # a value MeasurementStatus or the catalogue does not list.
    backend: Label = None  # type: ignore[assignment]  # may be absent, never null
    mode: Label | None = None
    family: Label | None = None  # baseline | generic | vendor | export
    device: DeviceLabel | None = None
    workload: Workload | None = None
    status: Annotated[str, Field(max_length=32)] = None  # type: ignore[assignment]  # may be absent, never null
    reason: str | None = None  # readable, for every status other than ok
    stderr_tail: str | None = None
    compile_s_cold: float | None = None  # compile + first call - steady median, empty cache (see compile_seeded)
    compile_seeded: SeededCompile | None = None  # set: compile_s_cold is an upper bound, not a measured cold compile
    compile_s_warm: float | None = None  # same, second process, same cache dir
    latency: LatencyStats | None = None
    eager_latency: LatencyStats | None = None  # eager, interleaved in the same process
    speedup_vs_eager: float | None = None
    speedup_ci: list[float] | None = Field(default=None, max_length=2)  # [low, high]
    peak_memory_mb: float | None = None
    memory_kind: Label | None = None  # device | rss
    serialized_bytes: int | None = None  # what the option deploys: .onnx file, int8 weights, float weights
    accuracy: Accuracy | None = None
    graph_count: Count | None = None
    graph_breaks: Count | None = None
    recompiles: Count | None = None
    throughput: dict[str, Any] | None = None
    dynamic: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_ITEMS)
    compile_breakdown: dict[str, Any] | None = None  # export backends: export_s, session_s, cached, first_call_s
    time_breakdown: TimeBreakdown | None = None  # where the time goes: a profiled pass after the timed window
    sweep: list[SweepPoint] | None = Field(default=None, max_length=MAX_ITEMS)  # the context's shape sweep
    generation: Generation | None = None  # workload="generation": prefill and decode phases
    latency_window: Label | None = None  # which window `latency` came from: "first window" | "re-measured window"
    timing_load: dict[str, Any] | None = None  # the child's load average at the "start" and "end" of its timed window
    wall_s: float | None = None
    snippet: str | None = None
    training: dict[str, Any] | None = None
    # an analysis measures the dynamic sizes, profile and warm compile of its leading options only, once ranked
    # (advisor.harness.measurement.run): None here with a ranked run means "not a leading option"
    details_error: str | None = None  # why a leading option's details child failed (its timings still stand)
    # racing (advisor.core.decision.racing): why this option stopped being timed - its window stopped clearly behind
    # the leader, or a re-measure round left it out; its numbers are the ones measured until then
    eliminated: str | None = None
    # racing's dual: why this option's first window stopped early while clearly ahead of every other option so far
    stopped_ahead: str | None = None

    @property
    def label(self) -> str:
        """`backend:mode`, the key of a row in a run (noise verdicts, why-not reasons)."""
        return option_label(self.backend, self.mode)


class MeasurementRun(Open):
    environment: Environment | None = None
    workload: Workload | None = None
    measurements: list[MeasurementRow] | None = Field(default=None, max_length=MAX_MEASUREMENTS)
    quality: dict[str, Any] | None = None  # advisor.core.noise's verdict on the run
