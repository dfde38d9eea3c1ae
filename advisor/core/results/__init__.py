"""Typed results: pydantic models of what flows between the stages (inspection -> measurements -> recommendation).

advisor.core.schema keeps the same shapes as TypedDicts for their producers (the torch-side harness and its
measuring children, which should not import pydantic); these models are how the server and the views read
them: they validate a worker's posted results (app.results), type the API's analysis (its OpenAPI schema), and
read stored analyses leniently with `read` (older shapes: missing fields are None, unknown ones kept, a field
that does not validate reads as absent). tests/test_results_models.py keeps the two in step. Torch-free.
"""

from __future__ import annotations

from advisor.core.results._base import INT64, MAX_MEASUREMENTS, read
from advisor.core.results.completed import CompletedResults
from advisor.core.results.environment import Environment
from advisor.core.results.generation import Generation, Phase
from advisor.core.results.inspection import (
    CoverageSource,
    DynamicDim,
    GraphBreak,
    GraphBreaks,
    InputSpec,
    Inspection,
    OpCoverage,
    OpInfo,
    Parameters,
    Runnable,
)
from advisor.core.results.latency import LatencyStats
from advisor.core.results.measurement import Accuracy, MeasurementRow, MeasurementRun
from advisor.core.results.recommendation import BreakEven, Caveat, LayeredPart, Recommendation, RuleStep
from advisor.core.results.sweep import StaticCompile, SweepPoint
from advisor.core.results.time_breakdown import BreakdownEntry, TimeBreakdown

__all__ = [
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
