"""The int8 options' accuracy rule, shared by the measuring child and the decision (torch-free).

allclose fails an int8 model by design; what a user can judge is its drift from the float model: the cosine
similarity of the outputs and, for classifier-shaped outputs ([batch, classes]), the share of rows whose top-1
class is kept. `accuracy_tolerance.quantized` sets the least of each (defaults in advisor.core.context).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core.context import DEFAULT_MIN_COSINE, DEFAULT_MIN_TOP1_AGREEMENT

DRIFT_PREFIX = "int8 drift beyond accuracy_tolerance.quantized: "


def quantizes_by_default(context: Any, workload: str = "inference") -> bool:
    """Whether a measurement for `context` (a DeploymentContext, its dict or None) measures the exported int8 options
    without being asked: the edge branch is "export plus a quantization toolchain" (the design article), so an edge
    inference analysis weighs the int8 exports (catalogue.EXPORTED_INT8) the named - or, unnamed, all - backends
    offer on the device, calibrated on the example inputs unless a calibration file is given."""
    stage = context.get("stage") if isinstance(context, Mapping) else getattr(context, "stage", None)
    workload = (context.get("workload") if isinstance(context, Mapping) else None) or workload
    return stage == "edge" and workload == "inference"


def limits(tolerance: Mapping[str, Any] | None) -> tuple[float, float]:
    """(min_cosine, min_top1_agreement) from an `accuracy_tolerance` dict (its `quantized` field), or the defaults."""
    quantized = (tolerance or {}).get("quantized") or {}
    min_cosine = quantized.get("min_cosine")
    min_top1 = quantized.get("min_top1_agreement")
    return (
        DEFAULT_MIN_COSINE if min_cosine is None else float(min_cosine),
        DEFAULT_MIN_TOP1_AGREEMENT if min_top1 is None else float(min_top1),
    )


def drift_failure(drift: Mapping[str, Any], min_cosine: float, min_top1: float) -> str | None:
    """Why `drift` ({"cosine", "top1_agreement", "top1_rows", ...}) exceeds the tolerated one, or None."""
    problems = []
    cosine = drift.get("cosine")
    if not isinstance(cosine, int | float) or cosine < min_cosine:
        shown = f"{cosine:.4f}" if isinstance(cosine, int | float) else "unknown"
        problems.append(f"cosine similarity to the float model {shown} < min_cosine {min_cosine:g}")
    top1 = drift.get("top1_agreement")
    if isinstance(top1, int | float) and top1 < min_top1:
        rows = drift.get("top1_rows") or 0
        problems.append(
            f"top-1 agreement with the float model {top1:.0%} of {rows} rows < min_top1_agreement {min_top1:g}"
        )
    return DRIFT_PREFIX + "; ".join(problems) if problems else None


def drift_text(drift: Mapping[str, Any] | None, tolerance: Mapping[str, Any] | None) -> str | None:
    """An int8 row's drift from the float model against the tolerated one, as the reports and the dashboard show it
    in place of allclose's atol/rtol (which an int8 model fails by design): "drift: cosine 0.9950 (min 0.99),
    top-1 agreement 100% of 8 rows (min 0.9)". The limits: `tolerance`'s (the context's), else those the row was
    judged under (stored beside its drift), else the defaults. None without a drift record."""
    if not isinstance(drift, Mapping):
        return None
    stored = {key: drift.get(key) for key in ("min_cosine", "min_top1_agreement")}
    min_cosine, min_top1 = limits(tolerance if tolerance is not None else {"quantized": stored})
    cosine, top1 = drift.get("cosine"), drift.get("top1_agreement")
    parts = [f"cosine {cosine:.4f} (min {min_cosine:g})" if isinstance(cosine, int | float) else "cosine unknown"]
    if isinstance(top1, int | float):
        parts.append(f"top-1 agreement {top1:.0%} of {drift.get('top1_rows') or 0} rows (min {min_top1:g})")
    return "drift: " + ", ".join(parts)
