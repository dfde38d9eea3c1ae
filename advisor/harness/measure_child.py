"""What runs inside one sandboxed measurement child: load, compile, check, time side by side.

`measure_variant` is the sandbox target for one (backend, mode). The baseline child (eager)
also writes the reference file every other child reads: the inputs (so they are identical
across backends), eager's float32 output and the float64 reference. Failures are raised as
`StageError` with the status the row should get; the sandbox turns signals, hangs and
out-of-memory into their own statuses. Torch is imported only after `prepare_environment`.

`first_call_s` is what a user waits for before the first output: `backend.compile()` (which for export
backends such as ONNX Runtime does the whole export and session creation) plus the first call (where
torch.compile backends compile). A backend whose callable carries `compile_breakdown` (a dict of seconds per
phase, e.g. ONNX Runtime's {"export_s", "session_s"}) has it passed on as the result's `compile_breakdown`.
"""

from __future__ import annotations

import copy
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from advisor.core.text import first_line
from advisor.harness import devices
from advisor.harness.sandbox import StageError, report_progress

_OOM_MARKERS = ("can't allocate memory", "out of memory", "outofmemory")
_WARM_UP_S = 0.02  # warm-up lasts at least this long: the fastest of many calls sizes the timed blocks


@dataclass
class TimingPolicy:
    """When the steady-state timing stops: at least `min_iters` samples and `min_time_s`, and the 95 % CI of
    every median within +-`ci_target` (relative), or the cap `max_time_s` (which still waits for `min_iters`,
    up to 10x longer, so slow models get usable statistics). Defaults suit a 2-core CI box.

    A sample is one call, or for calls faster than `sample_time_s` the mean of k back-to-back calls timed
    as one block (k chosen after warm-up so a block lasts >= `sample_time_s`), as torch.utils.benchmark
    does: the median of block means is what `blocked_autorange` reports."""

    min_iters: int = 20
    min_time_s: float = 0.5
    max_time_s: float = 5.0
    ci_target: float = 0.02
    warmup_iters: int = 3
    block_time_s: float = 0.05  # each interleaved block of one callable lasts about this long
    sample_time_s: float = 0.001  # calls faster than this are timed k at a time (one sample = a block mean)
    dynamic_sizes: int = 2  # extra sizes measured when the model has dynamic dims
    warm_cache: bool = True  # measure the warm-cache compile in a second child


def preload(device: str, trusted_headers: str | None = None) -> None:
    """Zygote preload (see advisor.harness.sandbox.Zygote): the imports every measurement child does anyway - `import
    torch` and what loading an ExportedProgram imports (Dynamo, Inductor: ~1.5 s) - and, in a sandbox, a copy of
    Inductor's trusted precompiled header (advisor.harness.inductor_headers); no model, no compilation. Inductor reads
    its cache directory from the environment when it compiles, in the child."""
    devices.prepare_environment(device)
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    import torch.export  # noqa: F401

    from advisor.harness import inductor_headers

    inductor_headers.install(trusted_headers)

    import advisor.harness.accuracy  # noqa: F401
    import advisor.harness.backends  # noqa: F401
    import advisor.harness.loading  # noqa: F401


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
    optimizer: str = "sgd",
    accuracy_tolerance: dict | None = None,
) -> dict:
    devices.prepare_environment(device)
    from advisor.harness.backends import get_backend

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
    from advisor.harness.backends import CompileRequest, UnsupportedRequest

    request = CompileRequest(
        mode=mode,
        device=device,
        workload=workload,
        options=options or {},
        cache_dir=os.environ.get("ADVISOR_COMPILE_CACHE_DIR"),
    )
    try:
        backend.check_request(request)
    except UnsupportedRequest as exc:
        return {"status": "unavailable", "reason": str(exc)}

    import torch

    from advisor.harness.loading import LoadError, load_model

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
            reference = _write_reference(loaded, dev, reference_path, workload)
            result["determinism"] = reference.pop("determinism")
        else:
            reference = torch.load(reference_path, weights_only=True)
        inputs = dev.to_device(tuple(reference["inputs"]))
        module = dev.to_device(loaded.module)
        # training: the eager copy of the model is made before the memory reset, so it is not counted
        compile_s = [0.0]  # seconds spent in backend.compile() (eager export + session creation for ONNX Runtime)
        steps = None
        if workload == "training":
            steps = _training_steps(backend, module, inputs, request, optimizer, compile_s)
        dev.reset_peak_memory()

        progress("compiling")
        compiled = steps.backend if steps else _compile(backend, module, inputs, request, compile_s)
        _reset_dynamo_counters()
        try:
            first_call_s, out = dev.timer()(lambda: compiled(*inputs))
        except Exception as exc:
            raise _stage_error(exc, "the first (compiling) call") from exc
        frames_after_first = _dynamo_counter("frames", "total")
        result.update(first_call_s=compile_s[0] + first_call_s, **_graph_stats())
        breakdown = _compile_breakdown(compiled)
        if breakdown is not None:
            result["compile_breakdown"] = {**breakdown, "first_call_s": first_call_s}

        progress("accuracy")
        from advisor.harness.accuracy import compare_outputs

        if steps:
            from advisor.harness.grad_accuracy import compare_gradients

            accuracy = compare_gradients(steps.backend.gradients(), reference["gradients"], accuracy_tolerance)
            result["training"] = _training_details(steps, optimizer, dev.peak_memory_mb())
        else:
            accuracy = compare_outputs(
                _leaves_on_cpu(out), reference["eager_out"], reference["fp64_out"], accuracy_tolerance
            )
        result["accuracy"] = accuracy

        progress("timing")
        # eager is the very same callable the backend compiled (ep.module() has its own call overhead)
        fns = {"backend": compiled} if is_baseline else {"backend": compiled, "eager": steps.eager if steps else module}
        window = _time_side_by_side(fns, inputs, dev, timing, lambda n: progress("timing", n))
        result["timed_s"] = window.seconds
        result.update(_summaries(window, is_baseline))
        result["peak_memory_mb"], result["memory_kind"] = dev.peak_memory_mb()
        result["throughput"] = _throughput(inputs, result["latency"]["median_ms"])
        if steps:
            result["peak_memory_mb"] = _training_peak_mb(result["peak_memory_mb"], result["training"], steps)

        if loaded.dynamic_dims and not warm_run and timing.dynamic_sizes > 0:
            progress("dynamic shapes")
            result["dynamic"] = _measure_dynamic_sizes(loaded, inputs, fns, dev, timing)
        if result["graph_count"] is not None:
            result["recompiles"] = max(0, _dynamo_counter("frames", "total") - frames_after_first)
    result["status"] = "ok" if accuracy["passed"] else "fail_accuracy"
    result["reason"] = None if accuracy["passed"] else f"inaccurate output: {accuracy.get('reason', '')}"
    if steps and not accuracy["passed"]:
        result["reason"] = f"inaccurate gradients: {accuracy.get('reason', '')}"
    return result


# ------------------------------------------------------------------ reference
def _write_reference(loaded: Any, dev: devices.Device, path: str, workload: str = "inference") -> dict:
    """Eager float32 output (twice: determinism), the float64 reference on the CPU, and the inputs;
    for training also the gradients of one eager step (float32 on the device, float64 on the CPU)."""
    import torch

    inputs_cpu = tuple(loaded.example_inputs)
    fp64_out, fp64_note = _float64_reference(loaded.module, inputs_cpu)  # on the CPU, before any move
    module = dev.to_device(loaded.module)
    inputs = dev.to_device(inputs_cpu)
    try:
        first = _leaves_on_cpu(module(*inputs))
        second = _leaves_on_cpu(module(*inputs))
    except Exception as exc:
        raise _eager_failure(exc, "the model fails in eager mode") from exc
    determinism = _determinism(first, second)
    if fp64_note:
        determinism["fp64_note"] = fp64_note
    reference = {"inputs": list(inputs_cpu), "eager_out": first, "fp64_out": fp64_out}
    if workload == "training":
        reference["gradients"] = _reference_gradients(loaded.module, inputs_cpu, dev)
        if reference["gradients"]["fp64_note"]:
            determinism["fp64_note"] = reference["gradients"]["fp64_note"]
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
        return None, f"no float64 reference ({first_line(exc, limit=500)}); accuracy falls back to cosine similarity"


# ------------------------------------------------------------------ training (advisor.harness.training_step)
def _reference_gradients(module: Any, inputs: tuple, dev: devices.Device) -> dict:
    from advisor.harness.training_step import TrainingSetupError, reference_gradients

    try:
        return reference_gradients(module, inputs, dev.to_device)
    except TrainingSetupError as exc:
        raise StageError("runtime_error", f"the model cannot be trained: {exc}") from exc
    except Exception as exc:
        raise _eager_failure(exc, "a training step fails in eager mode") from exc


def _training_steps(
    backend: Any, module: Any, inputs: tuple, request: Any, optimizer: str, compile_s: list[float] | None = None
) -> Any:
    """The backend's training step on `module` and an eager step on a copy (see advisor.harness.training_step)."""
    from advisor.harness.training_step import TrainingSetupError, build_training_steps

    try:
        return build_training_steps(module, lambda m: _compile(backend, m, inputs, request, compile_s), optimizer)
    except TrainingSetupError as exc:
        raise StageError("runtime_error", f"the model cannot be trained: {exc}") from exc


def _training_peak_mb(timed_peak_mb: float | None, details: dict, steps: Any) -> float | None:
    """The backend's training peak: its first step (compile, gradients, optimizer state) or the timed steps,
    less the gradients and optimizer state of the interleaved eager copy (exact tensor bytes)."""
    from advisor.harness.training_step import state_bytes

    eager_state = state_bytes(steps.eager)
    eager_mb = (eager_state["gradients"] + eager_state["optimizer_state"]) / 2**20
    timed = None if timed_peak_mb is None else timed_peak_mb - eager_mb
    candidates = [v for v in (details["first_step_peak_mb"], timed) if v is not None]
    return max(candidates) if candidates else None


def _training_details(steps: Any, optimizer: str, first_step_peak: tuple[float | None, str]) -> dict:
    """What a training row adds: the step's recipe, what the state weighs, the backward graphs, the first peak."""
    from advisor.harness.training_step import LOSS_DESCRIPTION, state_bytes

    return {
        "optimizer": optimizer,
        "loss": LOSS_DESCRIPTION,
        "train_mode_note": steps.train_mode_note,
        "state_mb": {k: v / 2**20 for k, v in state_bytes(steps.backend).items()},
        "backward_graphs": _dynamo_counter("aot_autograd", "total") if _dynamo_counters() is not None else None,
        "first_step_peak_mb": first_step_peak[0],
    }


# ------------------------------------------------------------------ compile
def _compile(backend: Any, module: Any, inputs: tuple, request: Any, compile_s: list[float] | None = None) -> Callable:
    """`backend.compile(...)`; adds the seconds it took to `compile_s[0]` (export backends export here)."""
    from advisor.harness.backends import UnsupportedRequest

    started = time.perf_counter()
    try:
        return backend.compile(module, inputs, request)
    except UnsupportedRequest as exc:
        raise StageError("compile_error", f"{backend.name} cannot do this: {exc}") from exc
    except Exception as exc:
        raise _stage_error(exc, "compilation", default="compile_error") from exc
    finally:
        if compile_s is not None:
            compile_s[0] += time.perf_counter() - started


def _compile_breakdown(compiled: Any) -> dict | None:
    """The backend's per-phase compile seconds, when its callable (or a training step's forward) carries them."""
    for candidate in (compiled, getattr(compiled, "forward", None)):
        breakdown = getattr(candidate, "compile_breakdown", None)
        if isinstance(breakdown, dict) and breakdown:
            return {str(k): v for k, v in breakdown.items() if isinstance(v, (int, float, bool, str))}
    return None


def _is_out_of_memory(exc: BaseException, message: str) -> bool:
    return isinstance(exc, MemoryError) or any(marker in message.lower() for marker in _OOM_MARKERS)


def _eager_failure(exc: BaseException, what: str) -> StageError:
    """An allocation failure is "oom" (the memory limit or the machine), anything else a runtime error."""
    message = first_line(exc, limit=500)
    if _is_out_of_memory(exc, message):
        return StageError("oom", f"{what}: out of memory: {message}")
    return StageError("runtime_error", f"{what}: {message}")


def _stage_error(exc: BaseException, during: str, default: str = "runtime_error") -> StageError:
    """Compiler exceptions are compile errors, allocation failures are oom, the rest runtime errors."""
    message = first_line(exc, limit=500)
    if _is_out_of_memory(exc, message):
        return StageError("oom", f"out of memory during {during}: {message}")
    module = type(exc).__module__ or ""
    if module.startswith(("torch._dynamo", "torch._inductor")) or type(exc).__name__ == "BackendCompilerFailed":
        return StageError("compile_error", f"compilation failed: {message}")
    return StageError(
        default, f"{'compilation' if default == 'compile_error' else 'the run'} failed during {during}: {message}"
    )


# ------------------------------------------------------------------ timing
class TimedWindow(NamedTuple):
    """What `_time_side_by_side` measured, per callable name."""

    samples: dict[str, list[float]]  # per-call seconds; a sample is the mean of calls_per_sample calls
    calls_per_sample: dict[str, int]
    seconds: float  # spent timing
    block_sizes: dict[str, list[int]]  # samples per interleaved block, in order (for `stats.drift`)


def _time_side_by_side(
    fns: dict[str, Callable[..., Any]],
    inputs: tuple,
    dev: devices.Device,
    policy: TimingPolicy,
    on_round: Callable[[int], None],
) -> TimedWindow:
    """Interleave blocks of each callable (order alternating per round) until the policy says stop.

    A sample is the mean of `calls_per_sample[name]` back-to-back calls, synchronised once at its end.
    """
    from advisor.core.stats import ci_relative_half_width

    timer = dev.timer()
    calls_per_sample: dict[str, int] = {}
    run_sample: dict[str, Callable[[], Any]] = {}
    samples_per_block: dict[str, int] = {}
    for name, fn in fns.items():
        try:
            per_call = _warm_up(timer, lambda fn=fn: fn(*inputs), policy.warmup_iters)
        except Exception as exc:
            raise _stage_error(exc, f"warm-up of {name}") from exc
        k = _calls_per_sample(policy, per_call)
        calls_per_sample[name] = k
        run_sample[name] = _repeated(fn, inputs, k)
        samples_per_block[name] = _block_size(policy, per_call * k)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    block_sizes: dict[str, list[int]] = {name: [] for name in fns}
    order = list(fns)
    started = time.perf_counter()
    while True:
        for name in order:
            run, times, k = run_sample[name], samples[name], calls_per_sample[name]
            try:
                for _ in range(samples_per_block[name]):
                    times.append(timer(run)[0] / k)
            except Exception as exc:
                raise _stage_error(exc, f"timed calls of {name} (after {len(times) * k} calls)") from exc
            block_sizes[name].append(samples_per_block[name])
            # re-size the next block from this block's median (warm-up calls can be far slower than steady state)
            samples_per_block[name] = _block_size(policy, statistics.median(times[-samples_per_block[name] :]) * k)
        order.reverse()
        elapsed = time.perf_counter() - started
        on_round(len(samples["backend"]) * calls_per_sample["backend"])
        enough_samples = all(len(t) >= policy.min_iters for t in samples.values())
        if elapsed >= policy.max_time_s and (enough_samples or elapsed >= _hard_cap_s(policy)):
            break
        if enough_samples and elapsed >= policy.min_time_s:
            if all(ci_relative_half_width(t) <= policy.ci_target for t in samples.values()):
                break
    return TimedWindow(samples, calls_per_sample, time.perf_counter() - started, block_sizes)


def _warm_up(timer: Callable[[Callable[[], Any]], tuple[float, Any]], call: Callable[[], Any], iters: int) -> float:
    """Call at least `iters` times and for at least _WARM_UP_S; the fastest call (robust to descheduling)."""
    fastest, spent, n = float("inf"), 0.0, 0
    while n < max(1, iters) or spent < _WARM_UP_S:
        seconds = timer(call)[0]
        fastest, spent, n = min(fastest, seconds), spent + seconds, n + 1
    return fastest


def _calls_per_sample(policy: TimingPolicy, per_call_s: float) -> int:
    """k such that k calls last >= `sample_time_s` (1 for calls that long already)."""
    return max(1, min(10_000, math.ceil(policy.sample_time_s / max(per_call_s, 1e-7))))


def _repeated(fn: Callable[..., Any], inputs: tuple, k: int) -> Callable[[], Any]:
    """A callable running `fn(*inputs)` k times back to back, returning the last output."""
    if k == 1:
        return lambda: fn(*inputs)

    def run_k() -> Any:
        out = None
        for _ in range(k):
            out = fn(*inputs)
        return out

    return run_k


def _block_size(policy: TimingPolicy, per_sample_s: float) -> int:
    """Samples per interleaved block so that one block of one callable lasts about `block_time_s`."""
    return max(1, min(1000, round(policy.block_time_s / max(per_sample_s, 1e-6))))


def _hard_cap_s(policy: TimingPolicy) -> float:
    """The cap yields to `min_iters` for slow models, up to this long."""
    return max(10 * policy.max_time_s, 30.0)


def _summaries(window: TimedWindow, is_baseline: bool) -> dict:
    from advisor.core.stats import speedup, summarize

    def stats(name: str) -> Any:
        return summarize(
            window.samples[name], calls_per_sample=window.calls_per_sample[name], block_sizes=window.block_sizes[name]
        )

    latency = stats("backend")
    if is_baseline:
        return {"latency": latency, "eager_latency": latency, "speedup_vs_eager": 1.0, "speedup_ci": None}
    eager = stats("eager")
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

    from advisor.core.stats import summarize

    short = TimingPolicy(
        min_iters=10,
        min_time_s=min(0.2, policy.min_time_s),
        max_time_s=max(0.2, policy.max_time_s / 4),
        ci_target=policy.ci_target * 2,
        warmup_iters=1,
        block_time_s=policy.block_time_s,
        sample_time_s=policy.sample_time_s,
    )
    names = [spec["name"] for spec in loaded.input_specs]
    rows = []
    for factor in (2, 4, 8, 16)[: policy.dynamic_sizes]:
        sized = _resized_inputs(loaded.dynamic_dims, names, inputs, factor)
        if sized is None:
            continue
        sized = dev.to_device(sized)
        frames_before = _dynamo_counter("frames", "total")
        samples = _time_side_by_side(fns, sized, dev, short, lambda n: None).samples
        shape = {
            names[i] if i < len(names) else f"input{i}": list(t.shape)
            for i, t in enumerate(sized)
            if isinstance(t, torch.Tensor)
        }
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
    return {
        "graph_count": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }


def _leaves_on_cpu(out: Any) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t.detach().cpu() if isinstance(t, torch.Tensor) else t for t in tree_leaves(out)]
