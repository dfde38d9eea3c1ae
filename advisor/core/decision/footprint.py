"""An option's deployed size against the context's memory budget (torch-free).

`memory_budget_mb` already excludes an option whose measured peak is over it; on CPU that peak is the RSS growth
above the loaded model, so the weights themselves are not in it. The row's `serialized_bytes` (what the option
deploys: the .onnx file, the int8 weights, the float weights) is checked too: a model that alone exceeds the budget
cannot be served within it, and an int8 option that fits where the float ones do not is the edge trade-off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core.context import DeploymentContext

MIB = 2**20


def size_exclusion(row: Mapping[str, Any] | None, context: DeploymentContext) -> str | None:
    """Why the option's deployed model alone is over `memory_budget_mb`, or None."""
    budget = context.memory_budget_mb
    size = (row or {}).get("serialized_bytes")
    if budget is None or not isinstance(size, int) or isinstance(size, bool):
        return None
    if size / MIB <= budget:
        return None
    return f"over the memory budget: the deployed model alone is {size / MIB:.4g} MiB > {budget:g} MiB"
