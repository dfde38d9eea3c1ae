"""The deployment context: what the user tells us about where and how the model will run.

The decision engine weighs measurements against this. Every field carries a description because the
dashboard shows them as help text. Torch-free.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Stage = Literal["prototype", "production", "edge"]
ModelChanges = Literal["frequent", "occasional", "frozen"]
Target = Literal["npu", "cuda", "cpu"]
Fleet = Literal["single", "mixed"]
Optimizer = Literal["sgd", "adamw"]


class ShapeRange(BaseModel):
    """The sizes one dynamic input dimension takes in production."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(description="Input name as the model declares it, e.g. 'x' or 'input_ids'.")
    dim: int = Field(ge=0, description="Index of the dimension that varies (0 = batch).")
    min: int = Field(ge=1, description="Smallest size seen in production.")
    max: int = Field(ge=1, description="Largest size seen in production.")

    @model_validator(mode="after")
    def _min_not_above_max(self) -> ShapeRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


class AccuracyTolerance(BaseModel):
    """Overrides the dtype-aware default tolerances of the accuracy check."""

    model_config = ConfigDict(extra="forbid")

    atol: float | None = Field(default=None, ge=0, description="Absolute tolerance; empty = dtype default.")
    rtol: float | None = Field(default=None, ge=0, description="Relative tolerance; empty = dtype default.")


class DeploymentContext(BaseModel):
    """Where and how the model is deployed. Defaults describe a single-node production inference service."""

    model_config = ConfigDict(extra="forbid")

    stage: Stage = Field(
        default="production",
        description="prototype: still experimenting, compile time matters most; production: a served model, "
        "steady-state speed matters most; edge: deployed to a small or offline device.",
    )
    model_changes: ModelChanges = Field(
        default="occasional",
        description="How often the model code or weights change (each change means a recompile): "
        "frequent (several times a day), occasional, or frozen.",
    )
    workload: Literal["inference", "training"] = Field(
        default="inference",
        description="inference (forward only) or training (forward, backward, optimizer step; only forward and "
        "backward are compiled).",
    )
    optimizer: Optimizer = Field(
        default="sgd",
        description="Training only: the optimizer of the timed training step (its state counts in peak memory). "
        "sgd or adamw.",
    )
    target: Target = Field(
        default="npu", description="The device the model is served on in production: npu (Ascend), cuda, or cpu."
    )
    fleet: Fleet = Field(
        default="single",
        description="single: development and serving use the same kind of device; mixed: developed on CPU/GPU "
        "machines, served on NPU.",
    )
    expected_calls_per_compile: int | None = Field(
        default=None,
        ge=1,
        description="How many calls (inference requests, or training steps) one compiled model serves before it is "
        "recompiled (restart, redeploy, model change). Used for the break-even between fast-compiling and "
        "fast-running backends. Empty = unknown: the stage decides.",
    )
    latency_target_ms: float | None = Field(
        default=None, gt=0, description="p99 latency target per call in milliseconds; slower backends are excluded."
    )
    memory_budget_mb: float | None = Field(
        default=None, gt=0, description="Peak memory budget in MiB; backends that need more are excluded."
    )
    needs_offline_export: bool = Field(
        default=False,
        description="The model must be exported to a file that runs without Python (TorchAir dynamo_export + atc "
        "on NPU, ONNX elsewhere).",
    )
    resource_constrained: bool = Field(
        default=False,
        description="The serving device is short of memory or compute; peak memory is reported next to every "
        "option and a memory budget is worth setting.",
    )
    ships_compile_cache: bool = Field(
        default=False,
        description="The deployment ships a warm compile cache, so compile times are the warm (cached) ones.",
    )
    shape_ranges: list[ShapeRange] = Field(
        default_factory=list, description="Ranges of the dynamic input dimensions seen in production."
    )
    accuracy_tolerance: AccuracyTolerance | None = Field(
        default=None, description="Override of the accuracy check's tolerances; empty = dtype-aware defaults."
    )

    @property
    def call_unit(self) -> str:
        """What one "call" is, for messages: a request in inference, a step in training."""
        return "steps" if self.workload == "training" else "calls"


class ContextError(ValueError):
    """A context that does not validate. `.errors` lists `{"field", "message"}` per problem."""

    def __init__(self, errors: list[dict[str, str]]) -> None:
        self.errors = errors
        super().__init__("invalid deployment context: " + "; ".join(f"{e['field']}: {e['message']}" for e in errors))


def parse_context(data: dict[str, Any] | None) -> DeploymentContext:
    """Validate a context dict (from JSON, the CLI or the API); unknown fields are errors."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ContextError([{"field": "", "message": f"expected a JSON object, got {type(data).__name__}"}])
    try:
        return DeploymentContext.model_validate(data)
    except ValidationError as exc:
        raise ContextError([_field_error(err) for err in exc.errors()]) from None


def _field_error(err: Any) -> dict[str, str]:
    field = ".".join(str(part) for part in err["loc"])
    if err["type"] == "extra_forbidden":
        return {"field": field, "message": "unknown field"}
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return {"field": field, "message": message}


def context_field_help() -> dict[str, str]:
    """Field name -> description, for help texts (dashboard, CLI)."""
    return {name: info.description or "" for name, info in DeploymentContext.model_fields.items()}
