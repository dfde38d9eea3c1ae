"""Typed results: pydantic models of what flows between the stages (inspection -> measurements -> recommendation).

These models are the one definition of the results' shapes. Their producers (advisor.harness, its measuring
children, the decision engine) build them as plain JSON dicts in these shapes, which cross processes, HTTP and the
database as they are; the models validate a worker's posted results (app.results), type the API's analysis (its
OpenAPI schema), and read stored analyses leniently with `read` (older shapes: missing fields are None, unknown
ones kept, a field that does not validate reads as absent). Torch-free.
"""

from __future__ import annotations

from advisor.core.results._base import INT64, MAX_MEASUREMENTS, read
from advisor.core.results.completed import CompletedResults
from advisor.core.results.environment import DeviceKind, Environment
from advisor.core.results.generation import Generation, Phase
from advisor.core.results.inspection import (
    ArtifactFormat,
    CoverageSource,
    DynamicDim,
    GraphBreak,
    GraphBreaks,
    InductorStatus,
    InputSpec,
    Inspection,
    OnnxExportStatus,
    OpCoverage,
    OpInfo,
    Parameters,
    Runnable,
    TorchAirStatus,
)
from advisor.core.results.latency import LatencyStats
from advisor.core.results.measurement import Accuracy, MeasurementRow, MeasurementRun, MeasurementStatus, Workload
from advisor.core.results.recommendation import BreakEven, Caveat, LayeredPart, Recommendation, RuleStep
from advisor.core.results.sweep import StaticCompile, SweepPoint
from advisor.core.results.time_breakdown import BreakdownEntry, TimeBreakdown

__all__ = [
    "ArtifactFormat",
    "DeviceKind",
    "InductorStatus",
    "MeasurementStatus",
    "OnnxExportStatus",
    "TorchAirStatus",
    "Workload",
    "INT64",
    "MAX_MEASUREMENTS",
    "Accuracy",
    "BreakEven",
    "BreakdownEntry",
    "Caveat",
    "CompletedResults",
    "CoverageSource",
    "DynamicDim",
    "Environment",
    "Generation",
    "GraphBreak",
    "GraphBreaks",
    "InputSpec",
    "Inspection",
    "LatencyStats",
    "LayeredPart",
    "MeasurementRow",
    "MeasurementRun",
    "OpCoverage",
    "OpInfo",
    "Parameters",
    "Phase",
    "Recommendation",
    "Runnable",
    "RuleStep",
    "StaticCompile",
    "SweepPoint",
    "TimeBreakdown",
    "read",
]
