"""The deployment context: what the user tells us about where and how the model will run.

The decision engine weighs measurements against this. Every field carries a description because the
dashboard shows them as help text. Torch-free.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

Stage = Literal["prototype", "production", "edge"]
ModelChanges = Literal["frequent", "occasional", "frozen"]
Target = Literal["npu", "cuda", "cpu"]
Fleet = Literal["single", "mixed"]
Optimizer = Literal["sgd", "adamw"]
Workload = Literal["inference", "training", "generation"]

# What a context, job, request or run that names no workload means: said here once, read by the worker, the
# harness and the decision engine alike.
DEFAULT_WORKLOAD: Workload = "inference"
DEFAULT_OPTIMIZER: Optimizer = "sgd"
DEFAULT_DECODE_TOKENS = 32

# Bounds of the context fields (issue 12): large enough for any real deployment, small enough that the decision
# engine, the reports and the database handle the largest accepted value. docs/usage.md ("Bad input") lists them.
MAX_CALLS_PER_COMPILE = 10**15
MAX_LATENCY_TARGET_MS = 10**7  # about 2.8 hours per call
MAX_MEMORY_BUDGET_MB = 10**7  # about 10 TB
MAX_TOLERANCE = 1e6
MAX_DIM_INDEX = 63
MAX_DIM_SIZE = 2**31 - 1
MAX_SHAPE_RANGES = 64
MAX_SWEEP_POINTS = 8  # each point costs a timed window per option, and a static compile per compiled option
MAX_SWEEP_INPUTS = 64
MAX_DECODE_TOKENS = 4096
MAX_TRAFFIC_SHAPES = 256  # distinct shapes of a deployment's traffic (advisor.core.shape_traffic)
MAX_TRAFFIC_WEIGHT = 10**15
MAX_GRAPHS = 1024
MAX_INPUT_NAME = 200
MAX_CONTEXT_JSON_CHARS = 64 * 1024
MAX_CONTEXT_DEPTH = 8
MAX_INT_DIGITS = 40  # a JSON integer longer than this is refused before Python converts it
MAX_ECHO = 80  # how much of a field name or value a message repeats


class ShapeRange(BaseModel):
    """The sizes one dynamic input dimension takes in production."""

    model_config = ConfigDict(extra="forbid")

    input: str = Field(
        min_length=1,
        max_length=MAX_INPUT_NAME,
        description="Input name as the model declares it, e.g. 'x' or 'input_ids'.",
    )
    dim: int = Field(ge=0, le=MAX_DIM_INDEX, description="Index of the dimension that varies (0 = batch).")
    min: int = Field(ge=1, le=MAX_DIM_SIZE, description="Smallest size seen in production.")
    max: int = Field(ge=1, le=MAX_DIM_SIZE, description="Largest size seen in production.")

    @model_validator(mode="after")
    def _min_not_above_max(self) -> ShapeRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max})")
        return self


InputName = Annotated[str, Field(min_length=1, max_length=MAX_INPUT_NAME)]
Shape = Annotated[list[Annotated[int, Field(ge=1, le=MAX_DIM_SIZE)]], Field(max_length=MAX_DIM_INDEX + 1)]
SweepPoint = Annotated[dict[InputName, Shape], Field(min_length=1, max_length=MAX_SWEEP_INPUTS)]


class TrafficShape(BaseModel):
    """One distinct shape of the traffic a deployment serves, and how many calls had it."""

    model_config = ConfigDict(extra="forbid")

    shapes: SweepPoint = Field(description="Input name (or path, e.g. batch.input_ids) -> shape.")
    weight: int = Field(default=1, ge=1, le=MAX_TRAFFIC_WEIGHT, description="Calls with these shapes.")


DEFAULT_MIN_COSINE = 0.99  # an int8 model whose outputs point elsewhere than the float model's is not the model
DEFAULT_MIN_TOP1_AGREEMENT = 0.9  # of the float model's top-1 classes kept, for classifier-shaped outputs


class QuantizedTolerance(BaseModel):
    """How far an int8 option's outputs may drift from the float model's (allclose fails int8 by design)."""

    model_config = ConfigDict(extra="forbid")

    min_cosine: float = Field(
        default=DEFAULT_MIN_COSINE,
        ge=-1,
        le=1,
        allow_inf_nan=False,
        description="Lowest cosine similarity of the int8 outputs to the float model's (all float outputs "
        "flattened together).",
    )
    min_top1_agreement: float = Field(
        default=DEFAULT_MIN_TOP1_AGREEMENT,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Lowest share of rows whose top-1 class matches the float model's, for classifier-shaped "
        "outputs ([batch, classes]); not applied to other outputs.",
    )


class AccuracyTolerance(BaseModel):
    """Overrides the dtype-aware default tolerances of the accuracy check."""

    model_config = ConfigDict(extra="forbid")

    atol: float | None = Field(
        default=None,
        ge=0,
        le=MAX_TOLERANCE,
        allow_inf_nan=False,
        description="Absolute tolerance; empty = dtype default.",
    )
    rtol: float | None = Field(
        default=None,
        ge=0,
        le=MAX_TOLERANCE,
        allow_inf_nan=False,
        description="Relative tolerance; empty = dtype default.",
    )
    quantized: QuantizedTolerance | None = Field(
        default=None,
        description="The drift tolerated from an int8 option (inductor:pt2e-int8, onnxruntime:int8): "
        f"{{min_cosine, min_top1_agreement}}; empty = {DEFAULT_MIN_COSINE} and {DEFAULT_MIN_TOP1_AGREEMENT}.",
    )


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
    workload: Workload = Field(
        default=DEFAULT_WORKLOAD,
        description="inference (forward only), training (forward, backward, optimizer step; only forward and "
        "backward are compiled), or generation (a causal LM with a static KV cache: prefill and decode phases "
        "timed separately, see docs/method.md, Generation workloads).",
    )
    decode_tokens: int = Field(
        default=DEFAULT_DECODE_TOKENS,
        ge=1,
        le=MAX_DECODE_TOKENS,
        description="Generation only: how many tokens the timed greedy decode generates after the prompt (within "
        "the exported static cache's length).",
    )
    optimizer: Optimizer = Field(
        default=DEFAULT_OPTIMIZER,
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
        le=MAX_CALLS_PER_COMPILE,
        description="How many calls (inference requests, or training steps) one compiled model serves before it is "
        "recompiled (restart, redeploy, model change). Used for the break-even between fast-compiling and "
        "fast-running backends. Empty = unknown: the stage decides.",
    )
    latency_target_ms: float | None = Field(
        default=None,
        gt=0,
        le=MAX_LATENCY_TARGET_MS,
        allow_inf_nan=False,
        description="p99 latency target per call in milliseconds; slower backends are excluded.",
    )
    memory_budget_mb: float | None = Field(
        default=None,
        gt=0,
        le=MAX_MEMORY_BUDGET_MB,
        allow_inf_nan=False,
        description="Peak memory budget in MiB; backends that need more are excluded.",
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
        default_factory=list,
        max_length=MAX_SHAPE_RANGES,
        description="Ranges of the dynamic input dimensions seen in production.",
    )
    shape_sweep: list[SweepPoint] = Field(
        default_factory=list,
        max_length=MAX_SWEEP_POINTS,
        description="Input shapes to time every option at, each point a JSON object of input name -> shape, e.g. "
        '[{"x": [1, 64]}, {"x": [32, 64]}]; inputs not named keep the example shape. Empty = from shape_ranges '
        "(their min, middle and max) when given, else only the example shape.",
    )
    accuracy_tolerance: AccuracyTolerance | None = Field(
        default=None, description="Override of the accuracy check's tolerances; empty = dtype-aware defaults."
    )
    shape_traffic: list[TrafficShape] = Field(
        default_factory=list,
        max_length=MAX_TRAFFIC_SHAPES,
        description="The distinct shapes production serves, each with its call count: "
        '[{"shapes": {"ids": [1, 61]}, "weight": 120}]; from --shape-traffic FILE (JSON Lines of observed '
        "calls). Given, the analysis plans dynamic vs static vs bucketed graphs for this traffic.",
    )
    max_graphs: int | None = Field(
        default=None,
        ge=1,
        le=MAX_GRAPHS,
        description="The graph budget of a shape plan: how many compiled or captured graphs the target mode may "
        "hold. Empty = the target's default (npu: npugraph_ex's capture_limit, 64; cpu/cuda: Dynamo's "
        "recompile_limit, 8).",
    )

    @field_validator("shape_traffic", mode="before")
    @classmethod
    def _traffic_lines(cls, value: Any) -> Any:
        """JSON Lines text of observed calls (the upload form's) is aggregated here (advisor.core.shape_traffic)."""
        if not isinstance(value, str):
            return value
        from advisor.core.shape_traffic import TrafficError, parse_traffic_text

        try:
            return parse_traffic_text(value)
        except TrafficError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _one_traffic(self) -> DeploymentContext:
        from advisor.core.shape_traffic import entries_problem

        problem = entries_problem([entry.model_dump() for entry in self.shape_traffic])
        if problem:
            raise ValueError(f"shape_traffic: {problem}")
        return self

    @property
    def call_unit(self) -> str:
        """What one "call" is, for messages: a request in inference, a step in training."""
        return {"training": "steps", "generation": "tokens"}.get(self.workload, "calls")


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


def parse_context_json(raw: str | bytes | None) -> dict[str, Any]:
    """Decode a context's JSON text (a form field, a file) into a dict for `parse_context`, safely.

    Refused with a ContextError naming the field, and never echoing the value: text over 64 KiB, nesting
    deeper than MAX_CONTEXT_DEPTH (also the RecursionError deep JSON raises), integers of more than
    MAX_INT_DIGITS digits (Python refuses to convert those over 4300 digits with a ValueError), NaN and
    Infinity (which Python's json accepts), and anything but a JSON object. Empty text is `{}`."""
    data = decode_json_value(raw or "{}", field="context")
    if not isinstance(data, dict):
        raise ContextError([{"field": "context", "message": "must be a JSON object"}])
    return data


def decode_json_value(raw: str | bytes, *, field: str) -> Any:
    """Any JSON value, decoded as safely as `parse_context_json` does (for one JSON-valued context field, e.g.
    the upload page's `shape_ranges`); errors name `field`, or the path below it."""
    if isinstance(raw, bytes | bytearray):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise ContextError([{"field": field, "message": "not valid JSON: not UTF-8 text"}]) from None
    if len(raw) > MAX_CONTEXT_JSON_CHARS:
        raise ContextError(
            [{"field": field, "message": f"too large: {len(raw)} characters (at most {MAX_CONTEXT_JSON_CHARS})"}]
        )
    try:
        data = json.loads(raw, parse_int=_bounded_int, parse_constant=_NonFinite)
    except RecursionError:
        raise ContextError(
            [{"field": field, "message": f"nested too deeply (at most {MAX_CONTEXT_DEPTH} levels)"}]
        ) from None
    except json.JSONDecodeError as exc:
        message = f"not valid JSON: {exc.msg}: line {exc.lineno} column {exc.colno} (char {exc.pos})"
        raise ContextError([{"field": field, "message": message}]) from None
    except ValueError as exc:  # defensive: json's own conversions
        raise ContextError([{"field": field, "message": f"not valid JSON: {_clip(str(exc))}"}]) from None
    root = () if field == "context" else (field,)
    problems = _literal_problems(data, root)
    if problems:
        raise ContextError(problems)
    return data


class _OversizedInt:
    """A JSON integer literal of more than MAX_INT_DIGITS digits, kept as its length only."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


class _NonFinite:
    """NaN, Infinity or -Infinity in the JSON text."""

    def __init__(self, literal: str) -> None:
        self.literal = literal


def _bounded_int(literal: str) -> int | _OversizedInt:
    digits = len(literal.lstrip("-"))
    return _OversizedInt(digits) if digits > MAX_INT_DIGITS else int(literal)


def _literal_problems(data: Any, root: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """Out-of-range literals and nesting past MAX_CONTEXT_DEPTH, each with the path of its field."""
    problems: list[dict[str, str]] = []
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, root)]
    deep: set[str] = set()
    while stack:
        value, path = stack.pop()
        field = _clip(".".join(path) or "context")
        if isinstance(value, _OversizedInt):
            problems.append({"field": field, "message": f"an integer of {value.digits} digits is out of range"})
        elif isinstance(value, _NonFinite):
            problems.append({"field": field, "message": f"{value.literal} is not a number here (finite numbers only)"})
        elif isinstance(value, dict | list):
            if len(path) >= MAX_CONTEXT_DEPTH:
                if field not in deep:
                    deep.add(field)
                    problems.append(
                        {"field": field, "message": f"nested too deeply (at most {MAX_CONTEXT_DEPTH} levels)"}
                    )
                continue
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((item, (*path, str(key))) for key, item in items)
    return sorted(problems, key=lambda problem: problem["field"])


def _clip(text: str, limit: int = MAX_ECHO) -> str:
    """At most `limit` characters of a name or value a message repeats."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field_error(err: Any) -> dict[str, str]:
    field = _clip(".".join(str(part) for part in err["loc"]))
    if err["type"] == "extra_forbidden":
        return {"field": field, "message": "unknown field"}
    message = err["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return {"field": field, "message": _clip(message, 300)}


def context_field_help() -> dict[str, str]:
    """Field name -> description, for help texts (dashboard, CLI)."""
    return {name: info.description or "" for name, info in DeploymentContext.model_fields.items()}
