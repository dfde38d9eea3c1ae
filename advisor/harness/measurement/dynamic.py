"""Dynamic shapes in the child: extra input sizes, recompiles and graph counts from Dynamo's counters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from advisor.harness import devices
from advisor.harness.measurement.timing import TimingPolicy, short_policy, time_side_by_side
from advisor.harness.model_inputs import resized_like


# ------------------------------------------------------------------ dynamic shapes
def measure_dynamic_sizes(
    loaded: Any, inputs: tuple, fns: dict[str, Callable[..., Any]], dev: devices.Device, policy: TimingPolicy
) -> list[dict]:
    """Time a few larger sizes of the dynamic dims (same callables), counting recompiles per size."""
    import torch

    from advisor.core.stats import summarize

    short = short_policy(policy)
    names = [spec["name"] for spec in loaded.input_specs]
    rows = []
    for factor in (2, 4, 8, 16)[: policy.dynamic_sizes]:
        sized = _resized_inputs(loaded.dynamic_dims, names, inputs, factor)
        if sized is None:
            continue
        sized = dev.to_device(sized)
        frames_before = dynamo_counter("frames", "total")
        samples = time_side_by_side(fns, sized, dev, short, lambda n: None).samples
        shape = {
            names[i] if i < len(names) else f"input{i}": list(t.shape)
            for i, t in enumerate(sized)
            if isinstance(t, torch.Tensor)
        }
        recompiles = dynamo_counter("frames", "total") - frames_before if dynamo_counters() is not None else None
        row = {"shape": shape, "median_ms": summarize(samples["backend"])["median_ms"], "recompiles": recompiles}
        if "eager" in samples:
            row["eager_median_ms"] = summarize(samples["eager"])["median_ms"]
        rows.append(row)
    return rows


def _resized_inputs(dynamic_dims: list[dict], names: list[str], inputs: tuple, factor: int) -> tuple | None:
    """`inputs` with every dynamic dim scaled by `factor` (within its range); None when nothing changes."""
    import torch

    by_input: dict[int, dict[int, int]] = {}
    changed = False
    for d in dynamic_dims:
        if d["input"] not in names or names.index(d["input"]) >= len(inputs):
            continue
        index = names.index(d["input"])
        base = inputs[index].shape[d["dim"]]
        size = base * factor
        if d["max"] is not None:
            size = min(size, d["max"])
        if d["min"] is not None:
            size = max(size, d["min"])
        changed |= size != base
        by_input.setdefault(index, {})[d["dim"]] = size
    if not changed:
        return None
    gen = torch.Generator().manual_seed(factor)
    out = []
    for i, t in enumerate(inputs):
        if i not in by_input or not isinstance(t, torch.Tensor):
            out.append(t)
            continue
        shape = [by_input[i].get(dim, size) for dim, size in enumerate(t.shape)]
        out.append(resized_like(t, shape, gen))
    return tuple(out)


# ------------------------------------------------------------------ dynamo bookkeeping
def dynamo_counters() -> Any:
    """Dynamo's counters, or None when no backend imported Dynamo (eager, ONNX): importing it costs ~1 s."""
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    return None if utils is None else utils.counters


def reset_dynamo_counters() -> None:
    counters = dynamo_counters()
    if counters is not None:
        counters.clear()


def dynamo_counter(group: str, key: str) -> int:
    counters = dynamo_counters()
    return 0 if counters is None else int(counters[group][key])


def graph_stats() -> dict:
    """Graphs and breaks Dynamo saw during the first call; None when Dynamo was not involved (eager, ONNX)."""
    counters = dynamo_counters()
    if counters is None or not counters["frames"]["total"]:
        return {"graph_count": None, "graph_breaks": None}
    return {
        "graph_count": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }
