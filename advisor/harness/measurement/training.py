"""Training rows in the child: the reference gradients, the timed optimizer steps, their peak memory."""

from __future__ import annotations

from typing import Any

from advisor.harness import devices
from advisor.harness.measurement.compiling import compile_variant
from advisor.harness.measurement.dynamic import dynamo_counter, dynamo_counters
from advisor.harness.measurement.errors import eager_failure
from advisor.harness.sandbox import StageError


# ------------------------------------------------------------------ training (advisor.harness.training_step)
def reference_gradients(module: Any, inputs: tuple, dev: devices.Device) -> dict:
    from advisor.harness.training_step import TrainingSetupError, reference_gradients

    try:
        return reference_gradients(module, inputs, dev.to_device)
    except TrainingSetupError as exc:
        raise StageError("runtime_error", f"the model cannot be trained: {exc}") from exc
    except Exception as exc:
        raise eager_failure(exc, "a training step fails in eager mode") from exc


def training_steps(
    backend: Any, module: Any, inputs: tuple, request: Any, optimizer: str, compile_s: list[float] | None = None
) -> Any:
    """The backend's training step on `module` and an eager step on a copy (see advisor.harness.training_step)."""
    from advisor.harness.training_step import TrainingSetupError, build_training_steps

    try:
        return build_training_steps(
            module, lambda m: compile_variant(backend, m, inputs, request, compile_s), optimizer
        )
    except TrainingSetupError as exc:
        raise StageError("runtime_error", f"the model cannot be trained: {exc}") from exc


def training_peak_mb(timed_peak_mb: float | None, details: dict, steps: Any) -> float | None:
    """The backend's training peak: its first step (compile, gradients, optimizer state) or the timed steps,
    less the gradients and optimizer state of the interleaved eager copy (exact tensor bytes)."""
    from advisor.harness.training_step import state_bytes

    eager_state = state_bytes(steps.eager)
    eager_mb = (eager_state["gradients"] + eager_state["optimizer_state"]) / 2**20
    timed = None if timed_peak_mb is None else timed_peak_mb - eager_mb
    candidates = [v for v in (details["first_step_peak_mb"], timed) if v is not None]
    return max(candidates) if candidates else None


def training_details(steps: Any, optimizer: str, first_step_peak: tuple[float | None, str]) -> dict:
    """What a training row adds: the step's recipe, what the state weighs, the backward graphs, the first peak."""
    from advisor.harness.training_step import LOSS_DESCRIPTION, state_bytes

    return {
        "optimizer": optimizer,
        "loss": LOSS_DESCRIPTION,
        "train_mode_note": steps.train_mode_note,
        "state_mb": {k: v / 2**20 for k, v in state_bytes(steps.backend).items()},
        "backward_graphs": dynamo_counter("aot_autograd", "total") if dynamo_counters() is not None else None,
        "first_step_peak_mb": first_step_peak[0],
    }
