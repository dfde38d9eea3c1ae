"""One training step on a loaded module: forward, loss, backward, optimizer step.

The loss is the default "simple reduction over the outputs": the sum, over every floating-point output
leaf, of the mean of its squares. It needs no labels, touches every output, and its gradient reaches every
parameter that influences an output, which is all the measurement needs (the timing and memory of a real
step, the gradients to check). The optimizer is SGD by default (lr 1e-3), AdamW when asked (lr 1e-3,
torch's other defaults); its step runs eagerly, only the model's forward and backward are compiled.

Training mode: an ExportedProgram's `ep.module()` supports autograd (its parameters require grad) but not
`.train()`, so dropout / batch-norm keep the mode the model was exported in; `train_mode_note` says so.
TorchScript modules train as loaded (`.train()` is applied). Each step starts with
`zero_grad(set_to_none=True)`, so the gradients of the last step stay readable until the next one.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

OPTIMIZERS = ("sgd", "adamw")
LEARNING_RATE = 1e-3
LOSS_DESCRIPTION = "sum over the floating-point outputs of mean(output ** 2)"


class TrainingSetupError(ValueError):
    """The model cannot be trained as asked (no float output, no trainable parameter, unknown optimizer)."""


def default_loss(output: Any) -> Any:
    """The sum over every floating-point output leaf of mean(leaf ** 2); raises when there is none."""
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        raise TrainingSetupError("the model has no floating-point output to build a loss from")
    return sum(leaf.float().pow(2).mean() for leaf in leaves)


def make_optimizer(name: str, parameters: list[Any]) -> Any:
    import torch

    if name == "sgd":
        return torch.optim.SGD(parameters, lr=LEARNING_RATE)
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=LEARNING_RATE)
    raise TrainingSetupError(f"unknown optimizer '{name}' ({' or '.join(OPTIMIZERS)})")


def prepare_for_training(module: Any) -> tuple[list[tuple[str, Any]], str | None]:
    """Switch `module` to training mode where it allows it and make its float parameters require grad.

    Returns (named trainable parameters, a note when the mode could not be switched).
    """
    note = None
    try:
        module.train()
    except NotImplementedError:  # ep.module(): "Calling train() is not supported yet."
        note = (
            "ExportedProgram modules do not support .train(): dropout and batch-norm keep the mode "
            "the model was exported in"
        )
    named = trainable_tensors(module)
    if not any(True for _ in module.parameters()) and named:
        note = (
            "the model's weights are buffers (a TorchScript file converted to an ExportedProgram): its "
            "floating-point buffers are trained as the parameters"
        )
    for _, p in named:
        p.requires_grad_(True)
    if not named:
        raise TrainingSetupError("the model has no floating-point parameters to train")
    return named, note


def trainable_tensors(module: Any) -> list[tuple[str, Any]]:
    """The floating-point parameters; for a module without parameters (TorchScript converted to an
    ExportedProgram keeps its weights as buffers), the floating-point buffers instead."""
    named = [(name, p) for name, p in module.named_parameters() if p.is_floating_point()]
    if named or any(True for _ in module.parameters()):
        return named
    return [(name, b) for name, b in module.named_buffers() if b.is_floating_point()]


@dataclass
class TrainingStep:
    """A callable running one step of `forward` (the eager or compiled module) with its own optimizer."""

    forward: Callable[..., Any]
    parameters: list[tuple[str, Any]]
    optimizer: Any
    loss_fn: Callable[[Any], Any] = default_loss

    def __call__(self, *inputs: Any) -> Any:
        import torch

        with torch.enable_grad():  # the harness may time inside torch.no_grad()
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.loss_fn(self.forward(*inputs))
            loss.backward()
            self.optimizer.step()
        return loss.detach()

    def gradients(self) -> list[tuple[str, Any]]:
        """(parameter name, its gradient from the last step, or None when it got none)."""
        return [(name, None if p.grad is None else p.grad.detach().cpu()) for name, p in self.parameters]


@dataclass
class TrainingSteps:
    """The backend's step and an eager step on an identical, separate copy of the model (for interleaving)."""

    backend: TrainingStep
    eager: TrainingStep
    train_mode_note: str | None


def build_training_steps(module: Any, compile_fn: Callable[[Any], Callable[..., Any]], optimizer: str) -> TrainingSteps:
    """Prepare `module` for training, copy it for eager, and wrap both in a step with its own optimizer.

    `compile_fn(module)` returns the backend's callable for `module` (the eager backend returns it as is).
    """
    named, note = prepare_for_training(module)
    eager_module = copy.deepcopy(module)  # before compiling: the backend may hook or wrap `module`
    eager_named = trainable_tensors(eager_module)
    backend_step = TrainingStep(compile_fn(module), named, make_optimizer(optimizer, [p for _, p in named]))
    eager_step = TrainingStep(eager_module, eager_named, make_optimizer(optimizer, [p for _, p in eager_named]))
    return TrainingSteps(backend=backend_step, eager=eager_step, train_mode_note=note)


def reference_gradients(module: Any, inputs: tuple, to_device: Callable[[Any], Any] = lambda v: v) -> dict:
    """Gradients of one eager step in float32 (on the device) and float64 (a float64 copy, on the CPU).

    Call it before `module` moves. Returns {"names", "grads", "fp64_grads" (None when the model has no
    float64 path), "fp64_note"}; grads are CPU tensors (None for a parameter that got no gradient).
    """
    import torch
    from torch.utils._pytree import tree_map

    def one_step(model: Any, step_inputs: tuple) -> tuple[list[str], list[Any]]:
        named, _ = prepare_for_training(model)
        step = TrainingStep(model, named, make_optimizer("sgd", [p for _, p in named]))
        step(*step_inputs)
        return [name for name, _ in named], [g for _, g in step.gradients()]

    fp64_grads, fp64_note = None, None
    try:
        inputs64 = tree_map(lambda t: t.double() if torch.is_tensor(t) and t.is_floating_point() else t, inputs)
        _, fp64_grads = one_step(copy.deepcopy(module).to(torch.float64), inputs64)
    except Exception as exc:  # dtype-specialised graphs, ops without a float64 kernel, ...
        fp64_note = f"no float64 gradient reference ({type(exc).__name__}); gradient accuracy uses cosine similarity"
    names, grads = one_step(to_device(copy.deepcopy(module)), to_device(inputs))
    return {"names": names, "grads": grads, "fp64_grads": fp64_grads, "fp64_note": fp64_note}


def state_bytes(step: TrainingStep) -> dict[str, int]:
    """Bytes held by the parameters, their gradients and the optimizer state after a step."""
    import torch

    params = sum(p.numel() * p.element_size() for _, p in step.parameters)
    grads = sum(p.grad.numel() * p.grad.element_size() for _, p in step.parameters if p.grad is not None)
    optimizer = sum(
        v.numel() * v.element_size()
        for state in step.optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )
    return {"parameters": params, "gradients": grads, "optimizer_state": optimizer}
