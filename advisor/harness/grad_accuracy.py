"""Are a backend's gradients right? Those of one training step, against eager float32 and the float64 reference.

Same rules as `advisor.harness.accuracy` (allclose with dtype tolerances, else RMSE against float64 within a multiple of
eager float32's own RMSE, else cosine similarity), applied to all parameter gradients at once, but each gradient
is first divided by the largest magnitude of its eager gradient. Gradients are often far smaller than outputs
(1e-5 is common): against a fixed atol of 1e-4 a 100 % error would pass, and in one concatenated RMSE the large
gradients would hide a wrong small one. Scaled, every parameter is held to the same relative standard.
`max_abs_err` stays in the gradients' own units. A parameter that gets a gradient in eager but none from the
backend (a dropped gradient) fails outright, by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from advisor.harness.accuracy import WORST, compare_outputs, failed


def compare_gradients(
    result: Sequence[tuple[str, Any]], reference: dict, tolerance: Mapping[str, float | None] | None = None
) -> dict[str, Any]:
    """`result`: (parameter name, gradient or None) from the backend's first step; `reference`: from
    `advisor.harness.training_step.reference_gradients`; `tolerance` as in `compare_outputs` (applied to the scaled
    gradients). The reason (on failure) names the gradients."""
    got = dict(result)
    names = reference["names"]
    missing = [
        name for name, grad in zip(names, reference["grads"], strict=True) if grad is not None and got.get(name) is None
    ]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        return failed(
            f"the backend produced no gradient for {len(missing)} parameter(s) that have one in eager: {shown}"
        )
    keep = [i for i, grad in enumerate(reference["grads"]) if grad is not None]
    fp64 = reference.get("fp64_grads")
    scales = [_scale(reference["grads"][i]) for i in keep]
    kept = list(zip(keep, scales, strict=True))
    accuracy = compare_outputs(
        [_scaled(got[names[i]], s) for i, s in kept],
        [_scaled(reference["grads"][i], s) for i, s in kept],
        None if fp64 is None else [_scaled(fp64[i], s) for i, s in kept],
        tolerance,
    )
    accuracy["max_abs_err"] = max((_max_abs_diff(got[names[i]], reference["grads"][i]) for i in keep), default=0.0)
    if not accuracy["passed"]:
        worst = _worst_relative(names, keep, got, reference["grads"], scales)
        accuracy["reason"] = (
            f"gradients after one step (each scaled by its largest eager magnitude; worst: {worst}): "
            f"{accuracy.get('reason', '')}"
        )
    return accuracy


def _scale(grad: Any) -> float:
    """The largest magnitude of an eager gradient; 1 for an all-zero (or non-float) one."""
    if not grad.is_floating_point():
        return 1.0
    largest = float(grad.detach().abs().max()) if grad.numel() else 0.0
    return largest if largest > 0 and largest < WORST else 1.0


def _scaled(grad: Any, scale: float) -> Any:
    return grad.detach() / scale if grad.is_floating_point() else grad


def _max_abs_diff(grad: Any, expected: Any) -> float:
    if tuple(grad.shape) != tuple(expected.shape):
        return WORST
    if not expected.numel():
        return 0.0
    diff = float((grad.detach().cpu().double() - expected.detach().cpu().double()).abs().max())
    return diff if diff == diff and diff < WORST else WORST


def _worst_relative(names: list[str], keep: list[int], got: dict, grads: list, scales: list[float]) -> str:
    """The parameter whose gradient is furthest off, relative to its scale, for the failure message."""
    errors = [(_max_abs_diff(got[names[i]], grads[i]) / s, names[i]) for i, s in zip(keep, scales, strict=True)]
    error, name = max(errors)
    return f"{name}, {error:.3g} of its largest element"
