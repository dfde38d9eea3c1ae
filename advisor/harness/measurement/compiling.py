"""Compiling a variant in the child, timed: `backend.compile()` plus, where the backend compiles lazily, the first
call; a backend's own compile breakdown (e.g. ONNX Runtime's export and session seconds) is passed on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from advisor.harness.measurement.errors import stage_error
from advisor.harness.sandbox import StageError


# ------------------------------------------------------------------ compile
def compile_variant(
    backend: Any, module: Any, inputs: tuple, request: Any, compile_s: list[float] | None = None
) -> Callable:
    """`backend.compile(...)`; adds the seconds it took to `compile_s[0]` (export backends export here)."""
    from advisor.harness.backends import UnsupportedRequest

    started = time.perf_counter()
    try:
        return backend.compile(module, inputs, request)
    except UnsupportedRequest as exc:
        raise StageError("compile_error", f"{backend.name} cannot do this: {exc}") from exc
    except Exception as exc:
        raise stage_error(exc, "compilation", default="compile_error") from exc
    finally:
        if compile_s is not None:
            compile_s[0] += time.perf_counter() - started


def compile_breakdown(compiled: Any) -> dict | None:
    """The backend's per-phase compile seconds, when its callable (or a training step's forward) carries them."""
    for candidate in (compiled, getattr(compiled, "forward", None)):
        breakdown = getattr(candidate, "compile_breakdown", None)
        if isinstance(breakdown, dict) and breakdown:
            return {str(k): v for k, v in breakdown.items() if isinstance(v, (int, float, bool, str))}
    return None
