"""What runs inside one sandboxed measurement child: load, compile, check, time side by side.

`measure_variant` is the sandbox target for one (backend, mode). The baseline child (eager)
also writes the reference file every other child reads: the inputs (so they are identical
across backends), eager's float32 output and the float64 reference. Failures are raised as
`StageError` with the status the row should get; the sandbox turns signals, hangs and
out-of-memory into their own statuses. Torch is imported only after `prepare_environment`.
"""

from __future__ import annotations

import copy
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from advisor import devices
from advisor.sandbox import StageError, report_progress

_OOM_MARKERS = ("can't allocate memory", "out of memory", "outofmemory")


@dataclass
class TimingPolicy:
    """When the steady-state timing stops: at least `min_iters` calls and `min_time_s`, and the 95 % CI of
    every median within +-`ci_target` (relative), or the cap `max_time_s` (which still waits for `min_iters`,
    up to 10x longer, so slow models get usable statistics). Defaults suit a 2-core CI box."""

    min_iters: int = 20
    min_time_s: float = 0.5
    max_time_s: float = 5.0
    ci_target: float = 0.02
    warmup_iters: int = 3
    block_time_s: float = 0.05  # each interleaved block of one callable lasts about this long
    dynamic_sizes: int = 2  # extra sizes measured when the model has dynamic dims
    warm_cache: bool = True  # measure the warm-cache compile in a second child


def measure_variant(
    *,
    model_path: str,
    backend_spec: str,
    mode: str,
    device: str,
    workload: str,
    inputs_file: str | None,
    input_shapes: list[str] | None,
    reference_path: str,
    is_baseline: bool,
    policy: dict,
    options: dict | None = None,
    warm_run: bool = False,
) -> dict:
    devices.prepare_environment(device)
    from advisor.backends import get_backend

    backend = get_backend(backend_spec)
    label = {"backend": backend.name, "mode": mode}

    def progress(stage: str, iterations: int = 0) -> None:
        report_progress({**label, "stage": f"warm cache: {stage}" if warm_run else stage, "iterations": iterations})

    progress("loading")
    try:
        dev = devices.open_device(device)
    except devices.DeviceUnavailable as exc:
        return {"status": "unavailable", "reason": str(exc)}
    ok, why = backend.available(device)
    if not ok:
        return {"status": "unavailable", "reason": why}
    from advisor.backends import CompileRequest, UnsupportedRequest

    request = CompileRequest(mode=mode, device=device, workload=workload, options=options or {},
                             cache_dir=os.environ.get("ADVISOR_COMPILE_CACHE_DIR"))  # fmt: skip
    try:
        backend.check_request(request)
    except UnsupportedRequest as exc:
        return {"status": "unavailable", "reason": str(exc)}

    import torch

    from advisor.loading import LoadError, load_model

    torch.manual_seed(0)
    try:
        loaded = load_model(model_path, inputs_file=inputs_file, input_shapes=input_shapes)
    except LoadError as exc:
        return {"status": "load_error", "reason": str(exc)}
    runnable, why_not = loaded.runnable
    if not runnable:
        return {"status": "unavailable", "reason": why_not or "the model cannot run on this host"}

    timing = TimingPolicy(**policy)
    result: dict[str, Any] = {"environment": dev.describe()}
    with torch.no_grad():
        if is_baseline:
            progress("reference")
            reference = _write_reference(loaded, dev, reference_path)
            result["determinism"] = reference.pop("determinism")
        else:
            reference = torch.load(reference_path, weights_only=True)
        inputs = dev.to_device(tuple(reference["inputs"]))
        module = dev.to_device(loaded.module)
        dev.reset_peak_memory()

        progress("compiling")
        compiled = _compile(backend, module, inputs, request)
        _reset_dynamo_counters()
        try:
            first_call_s, out = dev.timer()(lambda: compiled(*inputs))
        except Exception as exc:
            raise _stage_error(exc, "the first (compiling) call") from exc
        frames_after_first = _dynamo_counter("frames", "total")
        result.update(first_call_s=first_call_s, **_graph_stats())

        progress("accuracy")
        from advisor.accuracy import compare_outputs

        accuracy = compare_outputs(_leaves_on_cpu(out), reference["eager_out"], reference["fp64_out"])
        result["accuracy"] = accuracy

        progress("timing")
        # eager is the very same callable the backend compiled (ep.module() has its own call overhead)
        fns = {"backend": compiled} if is_baseline else {"backend": compiled, "eager": module}
        samples, timed_s = _time_side_by_side(fns, inputs, dev, timing, lambda n: progress("timing", n))
        result["timed_s"] = timed_s
        result.update(_summaries(samples, is_baseline))
        result["peak_memory_mb"], result["memory_kind"] = dev.peak_memory_mb()
        result["throughput"] = _throughput(inputs, result["latency"]["median_ms"])

        if loaded.dynamic_dims and not warm_run and timing.dynamic_sizes > 0:
            progress("dynamic shapes")
            result["dynamic"] = _measure_dynamic_sizes(loaded, inputs, fns, dev, timing)
        if result["graph_count"] is not None:
            result["recompiles"] = max(0, _dynamo_counter("frames", "total") - frames_after_first)
    result["status"] = "ok" if accuracy["passed"] else "fail_accuracy"
    result["reason"] = None if accuracy["passed"] else f"inaccurate output: {accuracy.get('reason', '')}"
    return result


# ------------------------------------------------------------------ reference
def _write_reference(loaded: Any, dev: devices.Device, path: str) -> dict:
    """Eager float32 output (twice: determinism), the float64 reference on the CPU, and the inputs."""
    import torch

    inputs_cpu = tuple(loaded.example_inputs)
    fp64_out, fp64_note = _float64_reference(loaded.module, inputs_cpu)  # on the CPU, before any move
    module = dev.to_device(loaded.module)
    inputs = dev.to_device(inputs_cpu)
    try:
        first = _leaves_on_cpu(module(*inputs))
        second = _leaves_on_cpu(module(*inputs))
    except Exception as exc:
        raise StageError("runtime_error", f"the model fails in eager mode: {_one_line(exc)}") from exc
    determinism = _determinism(first, second)
    if fp64_note:
        determinism["fp64_note"] = fp64_note
    reference = {"inputs": list(inputs_cpu), "eager_out": first, "fp64_out": fp64_out}
    torch.save(reference, path)
    return {**reference, "determinism": determinism}


def _determinism(first: list, second: list) -> dict:
    import torch

    worst = 0.0
    for a, b in zip(first, second, strict=True):
        if isinstance(a, torch.Tensor) and not torch.equal(a, b):
            worst = max(worst, float((a.double() - b.double()).abs().max()))
    return {"deterministic": worst == 0.0, "max_abs_diff": worst}


def _float64_reference(module: Any, inputs: tuple) -> tuple[list | None, str | None]:
    import torch
    from torch.utils._pytree import tree_map

    try:
        module64 = copy.deepcopy(module).to(torch.float64)
        inputs64 = tree_map(lambda t: t.double() if torch.is_tensor(t) and t.is_floating_point() else t, inputs)
        return _leaves_on_cpu(module64(*inputs64)), None
    except Exception as exc:  # dtype-specialised graphs, ops without a float64 kernel, ...
        return None, f"no float64 reference ({_one_line(exc)}); accuracy falls back to cosine similarity"


# ------------------------------------------------------------------ compile
def _compile(backend: Any, module: Any, inputs: tuple, request: Any) -> Callable:
    from advisor.backends import UnsupportedRequest

    try:
        return backend.compile(module, inputs, request)
    except UnsupportedRequest as exc:
        raise StageError("compile_error", f"{backend.name} cannot do this: {exc}") from exc
    except Exception as exc:
        raise _stage_error(exc, "compilation", default="compile_error") from exc


def _stage_error(exc: BaseException, during: str, default: str = "runtime_error") -> StageError:
    """Compiler exceptions are compile errors, allocation failures are oom, the rest runtime errors."""
    message = _one_line(exc)
    if isinstance(exc, MemoryError) or any(m in message.lower() for m in _OOM_MARKERS):
        return StageError("oom", f"out of memory during {during}: {message}")
    module = type(exc).__module__ or ""
    if module.startswith(("torch._dynamo", "torch._inductor")) or type(exc).__name__ == "BackendCompilerFailed":
        return StageError("compile_error", f"compilation failed: {message}")
    return StageError(default, f"{'compilation' if default == 'compile_error' else 'the run'} failed during {during}: "
                      f"{message}")  # fmt: skip


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500] if first else type(exc).__name__


# ------------------------------------------------------------------ timing
def _time_side_by_side(
    fns: dict[str, Callable[..., Any]],
    inputs: tuple,
    dev: devices.Device,
    policy: TimingPolicy,
    on_round: Callable[[int], None],
) -> tuple[dict[str, list[float]], float]:
    """Interleave blocks of each callable (order alternating per round) until the policy says stop."""
    from advisor.stats import ci_relative_half_width

    timer = dev.timer()
    calls = {name: (lambda fn=fn: fn(*inputs)) for name, fn in fns.items()}
    block = {}
    for name, fn in calls.items():
        try:
            per_call = [timer(fn)[0] for _ in range(max(1, policy.warmup_iters))]
        except Exception as exc:
            raise _stage_error(exc, f"warm-up of {name}") from exc
        block[name] = _block_size(policy, min(per_call))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns)
    started = time.perf_counter()
    while True:
        for name in order:
            fn, times = calls[name], samples[name]
            try:
                for _ in range(block[name]):
                    times.append(timer(fn)[0])
            except Exception as exc:
                raise _stage_error(exc, f"timed calls of {name} (after {len(times)} calls)") from exc
            # re-size the next block from this block's median (warm-up calls can be far slower than steady state)
            block[name] = _block_size(policy, statistics.median(times[-block[name]:]))
        order.reverse()
        elapsed = time.perf_counter() - started
        on_round(len(samples["backend"]))
        enough_calls = all(len(t) >= policy.min_iters for t in samples.values())
        if elapsed >= policy.max_time_s and (enough_calls or elapsed >= _hard_cap_s(policy)):
            break
        if enough_calls and elapsed >= policy.min_time_s:
            if all(ci_relative_half_width(t) <= policy.ci_target for t in samples.values()):
                break
    return samples, time.perf_counter() - started


def _block_size(policy: TimingPolicy, per_call_s: float) -> int:
    return max(1, min(1000, round(policy.block_time_s / max(per_call_s, 1e-6))))


def _hard_cap_s(policy: TimingPolicy) -> float:
    """The cap yields to `min_iters` for slow models, up to this long."""
    return max(10 * policy.max_time_s, 30.0)


def _summaries(samples: dict[str, list[float]], is_baseline: bool) -> dict:
    from advisor.stats import speedup, summarize

    latency = summarize(samples["backend"])
    if is_baseline:
        return {"latency": latency, "eager_latency": latency, "speedup_vs_eager": 1.0, "speedup_ci": None}
    eager = summarize(samples["eager"])
    ratio, interval = speedup(eager, latency)
    return {"latency": latency, "eager_latency": eager, "speedup_vs_eager": ratio, "speedup_ci": interval}


def _throughput(inputs: tuple, median_ms: float) -> dict | None:
    import torch

    first = next((t for t in inputs if isinstance(t, torch.Tensor) and t.dim() > 0), None)
    if first is None or median_ms <= 0:
        return None
    per_s = 1e3 / median_ms
    tokens = first.shape[0] * first.shape[1] * per_s if first.dim() == 2 and not first.is_floating_point() else None
    return {"samples_per_s": first.shape[0] * per_s, "tokens_per_s": tokens}


# ------------------------------------------------------------------ dynamic shapes
def _measure_dynamic_sizes(
    loaded: Any, inputs: tuple, fns: dict[str, Callable[..., Any]], dev: devices.Device, policy: TimingPolicy
) -> list[dict]:
    """Time a few larger sizes of the dynamic dims (same callables), counting recompiles per size."""
    import torch

    from advisor.stats import summarize

    short = TimingPolicy(min_iters=10, min_time_s=min(0.2, policy.min_time_s),
                         max_time_s=max(0.2, policy.max_time_s / 4), ci_target=policy.ci_target * 2,
                         warmup_iters=1, block_time_s=policy.block_time_s)  # fmt: skip
    names = [spec["name"] for spec in loaded.input_specs]
    rows = []
    for factor in (2, 4, 8, 16)[: policy.dynamic_sizes]:
        sized = _resized_inputs(loaded.dynamic_dims, names, inputs, factor)
        if sized is None:
            continue
        sized = dev.to_device(sized)
        frames_before = _dynamo_counter("frames", "total")
        samples, _ = _time_side_by_side(fns, sized, dev, short, lambda n: None)
        shape = {names[i] if i < len(names) else f"input{i}": list(t.shape) for i, t in enumerate(sized)
                 if isinstance(t, torch.Tensor)}  # fmt: skip
        recompiles = _dynamo_counter("frames", "total") - frames_before if _dynamo_counters() is not None else None
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
        if t.is_floating_point():
            out.append(torch.randn(shape, generator=gen, dtype=t.dtype))
        elif t.dtype == torch.bool:
            out.append(torch.ones(shape, dtype=torch.bool))
        else:
            lo, hi = int(t.min()), int(t.max())
            out.append(torch.randint(lo, hi + 1, shape, generator=gen, dtype=t.dtype))
    return tuple(out)


# ------------------------------------------------------------------ dynamo bookkeeping
def _dynamo_counters() -> Any:
    """Dynamo's counters, or None when no backend imported Dynamo (eager, ONNX): importing it costs ~1 s."""
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    return None if utils is None else utils.counters


def _reset_dynamo_counters() -> None:
    counters = _dynamo_counters()
    if counters is not None:
        counters.clear()


def _dynamo_counter(group: str, key: str) -> int:
    counters = _dynamo_counters()
    return 0 if counters is None else int(counters[group][key])


def _graph_stats() -> dict:
    """Graphs and breaks Dynamo saw during the first call; None when Dynamo was not involved (eager, ONNX)."""
    counters = _dynamo_counters()
    if counters is None or not counters["frames"]["total"]:
        return {"graph_count": None, "graph_breaks": None}
    return {"graph_count": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values()))}  # fmt: skip


def _leaves_on_cpu(out: Any) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t.detach().cpu() if isinstance(t, torch.Tensor) else t for t in tree_leaves(out)]
