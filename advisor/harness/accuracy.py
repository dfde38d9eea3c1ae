"""Is a backend's output right? Compared the way PyTorch's dynamo benchmark runner does it.

1. allclose against the eager float32 output with dtype-aware tolerances;
2. if that fails and a float64 reference exists: pass when the backend's RMSE against the
   float64 reference is at most `multiplier` x eager-fp32's own RMSE against it (+ atol / 10).
   A compiler that reorders float32 reductions is as accurate as eager, just differently wrong;
3. without a float64 reference: cosine similarity >= 0.99.

Inputs are lists of output leaves (tensors, or other values compared for equality).

An int8 option (catalogue `quantized_modes`) fails allclose by design: `judge_quantized` keeps that check's
numbers, records whether allclose held, and decides on the drift from the float model (eager float32) that a user
can judge instead - cosine similarity of the outputs, top-1 agreement for classifier-shaped outputs, max and mean
absolute error - against the context's `accuracy_tolerance.quantized` (or its defaults).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.core import quantized

WORST = 1.7976931348623157e308  # the largest float: JSON has no Infinity, and it fails every comparison

# (atol, rtol) per output dtype. float32 is loose enough for reordered reductions, tight enough to
# catch a wrong kernel; half types follow torch.testing's bfloat16 / float16 defaults, loosened.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1.6e-2),
}
MIN_COSINE = 0.99


def tolerance_for(dtype: Any) -> tuple[float, float]:
    name = str(dtype).removeprefix("torch.")
    return TOLERANCES.get(name, (0.0, 0.0))


def _rmse_multiplier(numel: int) -> float:
    """The dynamo runner allows more slack for tiny outputs, where one element dominates the RMSE."""
    if numel <= 10:
        return 10.0
    if numel <= 100:
        return 3.0
    return 2.0


def compare_outputs(
    result: Sequence[Any],
    eager: Sequence[Any],
    reference_fp64: Sequence[Any] | None,
    tolerance: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """Compare a backend's output leaves with eager's (and with the float64 reference when given): an
    advisor.core.results.Accuracy, as a plain dict.

    `tolerance`: {"atol", "rtol"} overriding the dtype defaults (the deployment context's
    `accuracy_tolerance`); a None value keeps that default."""
    import torch

    if len(result) != len(eager):
        return failed(f"the backend returned {len(result)} outputs, eager returned {len(eager)}")
    floats_res, floats_eager, floats_ref = [], [], []
    atol, rtol = 0.0, 0.0
    all_close = True
    for i, (res, exp) in enumerate(zip(result, eager, strict=True)):
        if not isinstance(exp, torch.Tensor):
            if res != exp:
                return failed(f"output {i} is {res!r}, eager gave {exp!r}")
            continue
        if not isinstance(res, torch.Tensor) or tuple(res.shape) != tuple(exp.shape):
            shape = tuple(res.shape) if isinstance(res, torch.Tensor) else type(res).__name__
            return failed(f"output {i} has shape {shape}, eager gave {tuple(exp.shape)}")
        res, exp = res.detach().cpu(), exp.detach().cpu()
        if not exp.is_floating_point():
            if not torch.equal(res, exp.to(res.dtype)):
                return failed(f"integer output {i} differs from eager")
            continue
        leaf_atol, leaf_rtol = _overridden(tolerance_for(exp.dtype), tolerance)
        atol, rtol = max(atol, leaf_atol), max(rtol, leaf_rtol)
        all_close &= bool(torch.allclose(res.to(exp.dtype), exp, atol=leaf_atol, rtol=leaf_rtol, equal_nan=True))
        floats_res.append(res.double().flatten())
        floats_eager.append(exp.double().flatten())
        if reference_fp64 is not None:
            floats_ref.append(reference_fp64[i].detach().cpu().double().flatten())
    if not floats_res:
        return {
            "passed": True,
            "max_abs_err": 0.0,
            "rmse": 0.0,
            "reference_rmse": 0.0,
            "rmse_ratio": None,
            "cosine": 1.0,
            "atol": atol,
            "rtol": rtol,
        }
    res_all, eager_all = torch.cat(floats_res), torch.cat(floats_eager)
    ref_all = torch.cat(floats_ref) if floats_ref else eager_all
    max_abs = _finite(float((res_all - eager_all).abs().nan_to_num(nan=math.inf).max()))
    rmse = _rmse(res_all, ref_all)
    ref_rmse = _rmse(eager_all, ref_all) if floats_ref else 0.0
    cosine = float(torch.nn.functional.cosine_similarity(res_all.nan_to_num(), ref_all.nan_to_num(), dim=0))
    ratio = rmse / ref_rmse if ref_rmse > 0 else None
    if all_close:
        passed, reason = True, None
    elif floats_ref:
        passed, reason = _against_reference(rmse, ref_rmse, res_all.numel(), atol, max_abs)
    else:
        passed = cosine >= MIN_COSINE
        reason = None if passed else f"no float64 reference; cosine similarity to eager is {cosine:.4f} < {MIN_COSINE}"
    accuracy = {
        "passed": passed,
        "max_abs_err": max_abs,
        "rmse": rmse,
        "reference_rmse": ref_rmse,
        "rmse_ratio": ratio,
        "cosine": cosine,
        "atol": atol,
        "rtol": rtol,
    }
    if reason:
        accuracy["reason"] = reason
    return accuracy


def _against_reference(
    rmse: float, ref_rmse: float, numel: int, atol: float, max_abs: float
) -> tuple[bool, str | None]:
    """Outside allclose, a backend passes when its RMSE against the float64 reference stays within a multiple of
    eager float32's own RMSE (plus a tenth of atol)."""
    limit = _rmse_multiplier(numel) * ref_rmse + atol / 10
    if rmse <= limit:
        return True, None
    return False, (
        f"RMSE against the float64 reference is {rmse:.3g}, above the allowed {limit:.3g} "
        f"(eager float32's own RMSE is {ref_rmse:.3g}); max abs diff from eager {max_abs:.3g}"
    )


def _overridden(default: tuple[float, float], tolerance: Mapping[str, float | None] | None) -> tuple[float, float]:
    if not tolerance:
        return default
    atol, rtol = tolerance.get("atol"), tolerance.get("rtol")
    return (default[0] if atol is None else float(atol), default[1] if rtol is None else float(rtol))


def _rmse(a: Any, b: Any) -> float:
    return _finite(float(((a - b) ** 2).mean().sqrt()))


def _finite(value: float) -> float:
    """JSON has no NaN/Infinity: report them as the largest float so they still fail comparisons."""
    return value if math.isfinite(value) else WORST


def failed(reason: str) -> dict[str, Any]:
    """An accuracy verdict that fails for `reason` (outputs or gradients that cannot be compared at all)."""
    return {
        "passed": False,
        "max_abs_err": WORST,
        "rmse": WORST,
        "reference_rmse": 0.0,
        "rmse_ratio": None,
        "cosine": 0.0,
        "atol": 0.0,
        "rtol": 0.0,
        "reason": reason,
    }


# ------------------------------------------------------------------ quantized options
def quantized_drift(result: Sequence[Any], eager: Sequence[Any]) -> dict[str, Any] | None:
    """How far an int8 option's float outputs are from the float model's: {"cosine", "max_abs_err",
    "mean_abs_err", "top1_agreement" (None without a [batch, classes] output), "top1_rows", "allclose"}.
    None when the outputs do not line up (count, shapes), which `compare_outputs` already failed."""
    import torch

    if len(result) != len(eager):
        return None
    res_parts, exp_parts = [], []
    agree = rows = 0
    all_close = True
    for res, exp in zip(result, eager, strict=True):
        if not (isinstance(exp, torch.Tensor) and exp.is_floating_point()):
            continue
        if not isinstance(res, torch.Tensor) or tuple(res.shape) != tuple(exp.shape):
            return None
        res, exp = res.detach().cpu().double(), exp.detach().cpu().double()
        atol, rtol = tolerance_for(torch.float32)
        all_close &= bool(torch.allclose(res, exp, atol=atol, rtol=rtol, equal_nan=True))
        if exp.dim() == 2 and exp.shape[0] > 0 and exp.shape[1] >= 2:  # classifier-shaped: [batch, classes]
            agree += int((res.argmax(dim=1) == exp.argmax(dim=1)).sum())
            rows += exp.shape[0]
        res_parts.append(res.flatten())
        exp_parts.append(exp.flatten())
    if not res_parts:
        return {
            "cosine": 1.0,
            "max_abs_err": 0.0,
            "mean_abs_err": 0.0,
            "top1_agreement": None,
            "top1_rows": 0,
            "allclose": True,
        }
    res_all, exp_all = torch.cat(res_parts), torch.cat(exp_parts)
    diff = (res_all - exp_all).abs().nan_to_num(nan=math.inf)
    finite = bool(torch.isfinite(res_all).all()) or not bool(torch.isfinite(exp_all).all())
    cosine = float(torch.nn.functional.cosine_similarity(res_all.nan_to_num(), exp_all.nan_to_num(), dim=0))
    return {
        "cosine": cosine if finite else -1.0,
        "max_abs_err": _finite(float(diff.max())),
        "mean_abs_err": _finite(float(diff.mean())),
        "top1_agreement": agree / rows if rows else None,
        "top1_rows": rows,
        "allclose": all_close,
    }


def judge_quantized(
    accuracy: dict[str, Any], result: Sequence[Any], eager: Sequence[Any], tolerance: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """`accuracy` (from `compare_outputs`) judged as an int8 option's: passed when the drift from the float model
    is within the tolerated one, whatever allclose said; `accuracy["quantized"]` holds the drift and the limits.
    Outputs that do not line up keep `compare_outputs`' failure."""
    drift = quantized_drift(result, eager)
    if drift is None:
        return accuracy
    min_cosine, min_top1 = quantized.limits(tolerance)
    failure = quantized.drift_failure(drift, min_cosine, min_top1)
    judged = {k: v for k, v in accuracy.items() if k != "reason"}
    judged["passed"] = failure is None
    judged["quantized"] = {**drift, "min_cosine": min_cosine, "min_top1_agreement": min_top1}
    if failure:
        judged["reason"] = failure
    return judged
