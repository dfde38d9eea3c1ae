"""What is inside a model file (produced by advisor.harness.inspection)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from advisor.core.results._base import MAX_ITEMS, MAX_OPS, MAX_SHAPE_DIMS, Count, Int, Label, Name, Open

# What advisor.harness produces. The models below accept any bounded label in their place: a worker of another
# version may send a value this list does not have.
ArtifactFormat = Literal["exported_program", "torchscript"]
InductorStatus = Literal["lowered", "decomposed", "fallback", "untraceable"]
TorchAirStatus = Literal["supported", "partial", "stub", "none"]
# how torch.onnx.export(dynamo=True) takes a custom op (advisor.harness.coverage.onnx_export_status)
OnnxExportStatus = Literal["translated", "decomposed", "none"]


class OpCoverage(Open):
    inductor: Label | None = None  # lowered | decomposed | fallback | untraceable
    torchair: Label | None = None  # supported | partial | stub | none (a decomposed op: its worst via op)
    torchair_via: list[Name] | None = Field(default=None, max_length=MAX_ITEMS)
    torchair_note: str | None = None
    torchair_unknown: bool | None = None  # not known off an NPU (the kernel is picked there)
    inductor_via: list[Name] | None = Field(default=None, max_length=MAX_ITEMS)
    # custom ops only: translated | decomposed | none (the ONNX export fails on it); absent: not known (an older
    # inspection, a stubbed op, no exporter installed) - advisor.core.decision.cheap_evidence reads it
    onnx: Label | None = None


class OpInfo(Open):
    name: Name | None = None  # "aten.linear.default", "npu.npu_rms_norm.default"
    namespace: Label | None = None
    count: Count | None = None
    has_fake_kernel: bool | None = None
    coverage: OpCoverage | None = None


class InputSpec(Open):
    name: Name | None = None
    shape: list[Int | Name] | None = Field(default=None, max_length=MAX_SHAPE_DIMS)  # symbolic dims by symbol
    dtype: Label | None = None
    keyword: bool | None = None


class DynamicDim(Open):
    input: Name | None = None
    dim: Count | None = None
    symbol: Name | None = None
    min: Int | None = None
    max: Int | None = None  # None = unbounded


class GraphBreak(Open):
    reason: str | None = None
    location: str | None = None


class GraphBreaks(Open):
    analysed: bool | None = None  # False when they could not be analysed; `note` says why
    count: Count | None = None
    graph_count: Count | None = None
    reasons: list[GraphBreak] | None = Field(default=None, max_length=MAX_ITEMS)
    note: str | None = None


class CoverageSource(Open):
    source: Label | None = None  # live | table
    torch_npu_version: Label | None = None


class Parameters(Open):
    count: Count = None  # type: ignore[assignment]  # may be absent, never null (the reports format it)
    bytes: Count = None  # type: ignore[assignment]


class Runnable(Open):
    ok: bool | None = None  # False e.g. npu:: ops on a node without torch_npu
    reason: str | None = None


class Inspection(Open):
    format: ArtifactFormat | None = None
    saved_with_torch: Label | None = None
    parameters: Parameters | None = None
    flops: Count | None = None
    inputs: list[InputSpec] | None = Field(default=None, max_length=MAX_ITEMS)
    ops: list[OpInfo] | None = Field(default=None, max_length=MAX_OPS)
    custom_ops: list[OpInfo] | None = Field(default=None, max_length=MAX_OPS)  # every op outside aten/prims
    graph_breaks: GraphBreaks | None = None
    dynamic_dims: list[DynamicDim] | None = Field(default=None, max_length=MAX_ITEMS)
    torchair_coverage: CoverageSource | None = None
    runnable: Runnable | None = None
    warnings: list[str] | None = Field(default=None, max_length=MAX_ITEMS)
