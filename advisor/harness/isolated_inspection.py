"""Inspection of an uploaded model in a sandboxed child: the one way the CLI and the worker inspect.

The child is isolated and limited like every measurement child (advisor.harness.sandbox,
advisor.harness.isolation): a wall clock, an address-space limit, and the OS sandbox; a pickle it meets is
refused (status "rejected"), a file it cannot load is "load_error", a hang "timeout", a memory hog "oom".
Torch-free on the parent side.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from advisor.harness.measurement import DEFAULT_MEMORY_LIMIT_MB
from advisor.harness.sandbox import Cancel, SandboxResult, Zygote, run_in_sandbox

INSPECT_TIMEOUT_S = 600.0
INSPECT_MEMORY_LIMIT_MB = DEFAULT_MEMORY_LIMIT_MB  # the same address-space limit as each measurement child
_TARGET = "advisor.harness.inspection:inspect_model"


def inspect_isolated(
    path: str,
    *,
    inputs_file: str | None = None,
    input_shapes: Sequence[str] | None = None,
    zygote: Zygote | None = None,
    timeout_s: float | None = None,
    memory_limit_mb: int | None = None,
    cancel: Cancel = None,
) -> SandboxResult:
    """`advisor.harness.inspection.inspect_model(path)` in a sandboxed child; the result's value is the Inspection."""
    model = os.path.abspath(path)
    inputs = os.path.abspath(inputs_file) if inputs_file else None
    kwargs: dict[str, Any] = {"path": model, "inputs_file": inputs, "input_shapes": list(input_shapes or []) or None}
    return run_in_sandbox(
        _TARGET,
        kwargs,
        timeout_s=timeout_s or INSPECT_TIMEOUT_S,
        memory_limit_mb=memory_limit_mb or INSPECT_MEMORY_LIMIT_MB,
        stage="inspect",
        cancel=cancel,
        zygote=zygote,
        readable=[p for p in (model, inputs) if p],
    )
