"""Are a backend's gradients right? Those of one training step, against eager float32 and the float64 reference.

Same rules as `advisor.accuracy` (allclose with dtype tolerances, else RMSE against float64 within a multiple of
eager float32's own RMSE, else cosine similarity), applied to all parameter gradients at once. A parameter that
gets a gradient in eager but none from the backend (a dropped gradient) fails outright, by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from advisor.accuracy import compare_outputs
from advisor.schema import Accuracy

_WORST = 1.7976931348623157e308


def compare_gradients(result: Sequence[tuple[str, Any]], reference: dict) -> Accuracy:
    """`result`: (parameter name, gradient or None) from the backend's first step; `reference`: from
    `advisor.training_step.reference_gradients`. The reason (on failure) names the gradients."""
    got = dict(result)
    names = reference["names"]
    missing = [name for name, grad in zip(names, reference["grads"], strict=True)
               if grad is not None and got.get(name) is None]  # fmt: skip
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        return _failure(f"the backend produced no gradient for {len(missing)} parameter(s) that have one in eager: "
                        f"{shown}")  # fmt: skip
    keep = [i for i, grad in enumerate(reference["grads"]) if grad is not None]
    fp64 = reference.get("fp64_grads")
    accuracy = compare_outputs([got[names[i]] for i in keep], [reference["grads"][i] for i in keep],
                               None if fp64 is None else [fp64[i] for i in keep])  # fmt: skip
    if not accuracy["passed"]:
        accuracy["reason"] = f"gradients after one step: {accuracy.get('reason', '')}"
    return accuracy


def _failure(reason: str) -> Accuracy:
    return Accuracy(passed=False, max_abs_err=_WORST, rmse=_WORST, reference_rmse=0.0, rmse_ratio=None, cosine=0.0,
                    atol=0.0, rtol=0.0, reason=reason)  # fmt: skip
