"""A shape sweep in the child: the variant timed at each of the context's shapes, side by side with eager.

At each point the compiled callable meets the new shape as it would in production: under Dynamo's automatic
dynamic shapes the first new shape recompiles (with the changed dims dynamic) and later ones usually do not; the
recompiles and the first call's time at each shape are recorded. For a Dynamo backend the same points are then
timed under a static compile (automatic dynamic shapes off, Dynamo reset: one specialised graph per shape, each
compiled on its first call), which is what `dynamic=False` would give. The points come from
advisor.core.shape_sweep.sweep_spec; the rows are advisor.core.results.SweepPoint.

Each point (and its static compile) also records the memory its first call at that shape needed beyond what was
resident just before it - the compile at that shape when it needs one, and the call - with the product's one
mechanism (advisor.harness.devices.Device.reset_peak_memory / peak_memory_mb): the device allocator's peak on
cuda/npu, the process's RSS high-water mark on the CPU (host memory, the compiler's own allocations included).
Eager is not run inside that window, so the figure is the compiled callable's alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from advisor.core.context import MAX_SWEEP_POINTS
from advisor.core.shape_sweep import range_sizes
from advisor.core.shape_traffic import input_name
from advisor.harness import devices
from advisor.harness.measurement.dynamic import dynamo_counter, dynamo_counters
from advisor.harness.measurement.errors import error_text
from advisor.harness.measurement.timing import TimingPolicy, short_policy, time_side_by_side
from advisor.harness.model_inputs import resized_like


def sweep_points(spec: dict, names: list[str], inputs: tuple) -> list[tuple[str, dict[str, list[int]]]]:
    """(label, {input name: shape}) per point; an input a point does not name keeps its example shape."""
    import torch

    example = {name: list(t.shape) for name, t in zip(names, inputs, strict=False) if isinstance(t, torch.Tensor)}
    points: list[dict[str, list[int]]] = []
    if spec.get("points"):
        # a name the model does not have is kept: measure_sweep records that point's error
        # a traffic path (batch.input_ids) names the flat input torch.export made of it (batch_input_ids)
        points = [
            {**example, **{input_name(k, names) or k: list(v) for k, v in point.items()}} for point in spec["points"]
        ]
    elif spec.get("ranges"):
        ranges = [r for r in spec["ranges"] if r["input"] in example and r["dim"] < len(example[r["input"]])]
        for which in range(3):  # every range at its min, then its middle, then its max: together, as they vary
            shape = {name: list(dims) for name, dims in example.items()}
            for r in ranges:
                sizes = range_sizes(r["min"], r["max"])
                shape[r["input"]][r["dim"]] = sizes[min(which, len(sizes) - 1)]
            if ranges and shape not in points:
                points.append(shape)
    return [(_label(point, example), point) for point in points[:MAX_SWEEP_POINTS]]


def _label(point: dict[str, list[int]], example: dict[str, list[int]]) -> str:
    changed = [name for name in point if point[name] != example.get(name)] or list(point)[:1]
    return ", ".join(f"{name}={'x'.join(map(str, point[name]))}" for name in changed)


def measure_sweep(
    spec: dict,
    loaded: Any,
    inputs: tuple,
    fns: dict[str, Callable[..., Any]],
    dev: devices.Device,
    policy: TimingPolicy,
    recompile_static: Callable[[], Callable[..., Any]] | None,
) -> list[dict]:
    """Time `fns` ({"backend": ...} or {"backend": ..., "eager": ...}) at each point; then, with
    `recompile_static` (a Dynamo backend), a static compile of the variant at the same points."""
    names = [spec_["name"] for spec_ in loaded.input_specs]
    short = short_policy(policy)
    rows = []
    sized_inputs: list[tuple | None] = []
    for label, shape in sweep_points(spec, names, inputs):
        row: dict[str, Any] = {"label": label, "shape": shape}
        problem = _point_problem(shape, names, inputs)
        if problem is not None:
            row["error"] = problem
            sized_inputs.append(None)
            rows.append(row)
            continue
        sized = None
        try:
            sized = dev.to_device(_inputs_at(shape, names, inputs))
            row.update(_time_point(fns, sized, dev, short))
        except Exception as exc:  # noqa: BLE001 - e.g. a shape outside an export's dynamic range: that point fails
            row["error"] = f"the model does not run at this shape: {error_text(exc)}"
        sized_inputs.append(sized)
        rows.append(row)
    if recompile_static is not None and any("error" not in row for row in rows):
        _static_points(rows, sized_inputs, fns, dev, short, recompile_static)
    return rows


MAX_POINT_ELEMENTS = 2**28  # per input: 1 GiB of float32; a larger point would take the whole variant down with it


def _point_problem(shape: dict[str, list[int]], names: list[str], inputs: tuple) -> str | None:
    """Why this point cannot be run (an unknown input, a non-tensor input, an input too large), or None."""
    import math

    import torch

    unknown = [name for name in shape if name not in names]
    if unknown:
        return f"the model has no input named {', '.join(unknown)} (its inputs: {', '.join(names)})"
    for name, dims in shape.items():
        index = names.index(name)
        if index >= len(inputs) or not isinstance(inputs[index], torch.Tensor):
            return f"input {name} is not a tensor the sweep can resize"
        if math.prod(dims) > MAX_POINT_ELEMENTS:
            return f"input {name} at {'x'.join(map(str, dims))} is over {MAX_POINT_ELEMENTS:,} elements"
    return None


def _time_point(fns: dict[str, Callable[..., Any]], sized: tuple, dev: devices.Device, short: TimingPolicy) -> dict:
    from advisor.core.stats import summarize

    frames_before = dynamo_counter("frames", "total")
    dev.reset_peak_memory()  # the first call at this shape alone: its compile (if any) and its run, not eager's
    first_call_s, _ = dev.timer()(lambda: fns["backend"](*sized))
    peak_mb, memory_kind = dev.peak_memory_mb()
    recompiles = dynamo_counter("frames", "total") - frames_before if dynamo_counters() is not None else None
    samples = time_side_by_side(fns, sized, dev, short, lambda n: None).samples
    point = {"median_ms": summarize(samples["backend"])["median_ms"], "recompiles": recompiles}
    point.update(first_call_s=first_call_s, peak_memory_mb=peak_mb, memory_kind=memory_kind)
    if "eager" in samples:
        point["eager_median_ms"] = summarize(samples["eager"])["median_ms"]
        point["speedup"] = point["eager_median_ms"] / point["median_ms"] if point["median_ms"] else None
    return point


def _static_points(
    rows: list[dict],
    sized_inputs: list[tuple | None],
    fns: dict[str, Callable[..., Any]],
    dev: devices.Device,
    short: TimingPolicy,
    recompile_static: Callable[[], Callable[..., Any]],
) -> None:
    import torch._dynamo

    torch._dynamo.reset()
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, assume_static_by_default=True):
        static = {**fns, "backend": recompile_static()}
        for row, sized in zip(rows, sized_inputs, strict=True):
            if "error" in row or sized is None:
                continue
            try:
                point = _time_point(static, dev.to_device(sized), dev, short)
            except Exception as exc:  # noqa: BLE001 - recorded on the point; the dynamic numbers stand
                row["static"] = {"error": error_text(exc)}
                continue
            compile_s = max(0.0, point["first_call_s"] - point["median_ms"] / 1e3)
            row["static"] = {
                "median_ms": point["median_ms"],
                "speedup": point.get("speedup"),
                "compile_s": compile_s,
                "recompiles": point["recompiles"],
                "peak_memory_mb": point["peak_memory_mb"],
                "memory_kind": point["memory_kind"],
            }


def _inputs_at(shape: dict[str, list[int]], names: list[str], inputs: tuple) -> tuple | None:
    """The example inputs at this point's shapes: random floats, integers within the example's range."""
    import torch

    gen = torch.Generator().manual_seed(0)
    out = []
    for index, t in enumerate(inputs):
        name = names[index] if index < len(names) else f"input{index}"
        if not isinstance(t, torch.Tensor):
            if name in shape:
                return None
            out.append(t)
            continue
        dims = shape.get(name, list(t.shape))
        out.append(t if list(dims) == list(t.shape) else resized_like(t, list(dims), gen))
    return tuple(out)
