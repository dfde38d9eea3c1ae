"""The int8 options' drift against the deployment context's tolerance, as the decision reads it (torch-free).

The measuring child judges an int8 row under the context it measured with (advisor.harness.accuracy.judge_quantized);
re-deciding stored rows under another context applies that context's `accuracy_tolerance.quantized` here, so a
stricter tolerance excludes a row the measurement passed, with the same reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core import catalogue, quantized
from advisor.core.context import DeploymentContext


def drift_exclusion(row: Mapping[str, Any] | None, context: DeploymentContext) -> str | None:
    """Why a measured int8 row is excluded under `context`'s tolerated drift, or None (also for float rows)."""
    if not row or not catalogue.is_quantized(row.get("backend"), row.get("mode")):
        return None
    drift = (row.get("accuracy") or {}).get("quantized")
    if not isinstance(drift, Mapping):
        return None
    tolerance = context.accuracy_tolerance.model_dump() if context.accuracy_tolerance else None
    failure = quantized.drift_failure(drift, *quantized.limits(tolerance))
    return f"failed the accuracy check: {failure}" if failure else None
