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
import dataclasses
import math
import os
from collections.abc import Callable
from typing import Any

from advisor.core import catalogue
from advisor.core.context import DEFAULT_DECODE_TOKENS, DEFAULT_OPTIMIZER
from advisor.core.noise import read_load
from advisor.core.text import first_line
from advisor.harness import devices
from advisor.harness.measurement.child_variant import Variant
from advisor.harness.measurement.compiling import compile_breakdown, compile_variant
from advisor.harness.measurement.dynamic import (
    dynamo_counter,
    graph_stats,
    measure_dynamic_sizes,
    reset_dynamo_counters,
)
from advisor.harness.measurement.errors import eager_failure, stage_error
from advisor.harness.measurement.generation import measure_generation
from advisor.harness.measurement.profiler_pass import enable_kernel_markers, profiled_breakdown
from advisor.harness.measurement.seeded_cache import seed_compile_cache
from advisor.harness.measurement.sweep import measure_sweep
from advisor.harness.measurement.timing import TimingPolicy, summaries, throughput, time_side_by_side
from advisor.harness.measurement.training import reference_gradients, training_details, training_peak_mb, training_steps
from advisor.harness.sandbox import report_progress


def preload(
    device: str, trusted_headers: str | None = None, compiles_inductor: bool = False, exports_onnx: bool = False
) -> None:
    """Zygote preload (see advisor.harness.sandbox.Zygote): the imports every measurement child does anyway - `import
    torch` and what loading an ExportedProgram imports (Dynamo: ~1 s) - and, in a sandbox, a copy of Inductor's
    trusted precompiled header (advisor.harness.inductor_headers); no model, no compilation. Inductor reads its cache
    directory from the environment when it compiles, in the child.

    For a job that compiles with Inductor (`compiles_inductor`; only such a job is handed a trusted build) it also
    imports Inductor's compile path (~0.8 s more, and its memory in every idle spare of a worker that never compiles
    with it) and, on CPU, runs Inductor's CPU-feature probe (`inductor_headers.probe_vec_isa`: against the trusted
    build's test programs when there is one, else building them here) and Inductor's other once-per-process setup
    (`inductor_setup.prepare_process`: pattern tables, torch's source hash), so forked variants inherit them
    instead of each paying for them inside its cold compile (5-14 s for the probe, ~0.65 s for the rest). For a job
    that exports with torch.onnx (`exports_onnx`: ONNX Runtime) it sets up the exporter's registry once
    (`ort.prepare_exporter`: ~1 s of each exporting child's cold compile on 2 cores)."""
    devices.prepare_environment(device)
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.export  # noqa: F401

    if compiles_inductor:
        import torch._inductor.compile_fx  # noqa: F401

    from advisor.harness import inductor_headers, inductor_setup

    inductor_headers.install(trusted_headers)
    if device == "cpu" and compiles_inductor:
        inductor_headers.probe_vec_isa(trusted_headers)
        inductor_setup.prepare_process()
    if exports_onnx:
        from advisor.harness.backends import ort

        ort.prepare_exporter()

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
    optimizer: str = DEFAULT_OPTIMIZER,
    accuracy_tolerance: dict | None = None,
    sweep: dict | None = None,
    decode_tokens: int = DEFAULT_DECODE_TOKENS,
    reference_exists: bool = False,
    calibration_file: str | None = None,
    details_median_ms: float | None = None,
    seed_cache_from: str | None = None,
    eager_profile_ms: float | None = None,
) -> dict:
    """One variant's row (see the module docstring). `reference_exists`: the baseline is timed again (a re-measure)
    and, for inference and training, reads the reference its first child wrote instead of computing it again (for
    BERT-base the float64 reference and the two eager calls take over a second). `details_median_ms` (inference, with
    `warm_run`): this warm-cache child is a leading option's details child - after its warm compile it measures what
    the plan left until the options were ranked (other sizes of the dynamic dims with their recompiles, the
    profile, which is scaled by this, the first child's median latency). `seed_cache_from`: the compile cache of
    the mode this one compiles first, in the same job, copied into this child's before it compiles
    (advisor.harness.measurement.seeded_cache). `eager_profile_ms` (a details child): eager's median latency - this
    child also profiles the eager module it loaded, into `eager_time_breakdown` (details.measure_leading_details)."""
    devices.prepare_environment(device)
    cache = os.environ.get("ADVISOR_COMPILE_CACHE_DIR")
    files_seeded = seed_compile_cache(seed_cache_from, cache) if seed_cache_from and cache else None
    from advisor.harness.backends import get_backend

    backend = get_backend(backend_spec)
    progress = _progress_reporter(backend.name, mode, warm_run, details=details_median_ms is not None)
    progress("loading")
    opened = _open(backend, mode, device, workload, options, calibration_file)
    if isinstance(opened, dict):
        return opened
    dev, request = opened
    timing = TimingPolicy(**policy)
    loaded = _load(model_path, inputs_file, input_shapes, timing)
    if isinstance(loaded, dict):
        return loaded
    variant = Variant(backend, request, dev, loaded, timing, is_baseline, warm_run, progress)
    result: dict[str, Any] = {"environment": dev.describe(), "files_seeded": files_seeded}
    if workload == "generation":
        generation = measure_generation(variant, reference_path=reference_path, decode_tokens=decode_tokens)
        return _with_status({**result, **generation}, generation["accuracy"], "generation")
    import torch

    with torch.no_grad():
        return _measure_steps(
            variant,
            result,
            workload,
            reference_path,
            reference_exists,
            optimizer,
            accuracy_tolerance,
            sweep,
            (details_median_ms, eager_profile_ms),
        )


def _progress_reporter(backend: str, mode: str, warm_run: bool, *, details: bool) -> Callable[..., None]:
    """The child's progress lines, each stage named with the kind of child it is (a details or warm-cache child)."""
    label = {"backend": backend, "mode": mode}
    prefix = ("details: " if details else "warm cache: ") if warm_run else ""

    def progress(stage: str, iterations: int = 0) -> None:
        report_progress({**label, "stage": prefix + stage, "iterations": iterations})

    return progress


def _open(
    backend: Any, mode: str, device: str, workload: str, options: dict | None, calibration_file: str | None
) -> tuple[Any, Any] | dict:
    """(the device, the compile request), or the `unavailable` row when the device, the backend on it or the
    request cannot be had here."""
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
        workload="inference" if workload == "generation" else workload,  # both phases run under no_grad
        options=options or {},
        cache_dir=os.environ.get("ADVISOR_COMPILE_CACHE_DIR"),
        calibration=calibration_file if catalogue.is_quantized(backend.name, mode) else None,
    )
    try:
        backend.check_request(request)
    except UnsupportedRequest as exc:
        return {"status": "unavailable", "reason": str(exc)}
    return dev, request


def _load(model_path: str, inputs_file: str | None, input_shapes: list[str] | None, timing: TimingPolicy) -> Any:
    """The loaded model, or the `load_error` / `unavailable` row when it cannot be loaded or run on this host."""
    import torch

    from advisor.harness.loading import LoadError, load_model

    if timing.profile:
        enable_kernel_markers()  # before compiling, in the warm-cache child too (same FX graph cache key)
    torch.manual_seed(0)
    try:
        loaded = load_model(model_path, inputs_file=inputs_file, input_shapes=input_shapes)
    except LoadError as exc:
        return {"status": "load_error", "reason": str(exc)}
    runnable, why_not = loaded.runnable
    if not runnable:
        return {"status": "unavailable", "reason": why_not or "the model cannot run on this host"}
    return loaded


def _measure_steps(
    v: Variant,
    result: dict,
    workload: str,
    reference_path: str,
    reference_exists: bool,
    optimizer: str,
    accuracy_tolerance: dict | None,
    sweep: dict | None,
    details_ms: tuple[float | None, float | None] = (None, None),
) -> dict:
    """An inference or training variant (under no_grad): reference, compile and first call, accuracy, then the
    timed window and what is measured after it (in a leading option's details child: only what comes after it,
    and eager's profile where asked). `details_ms`: (this option's, eager's) first-child median of a details child."""
    import torch

    details_median_ms, eager_profile_ms = details_ms
    if v.is_baseline and not reference_exists:
        v.progress("reference")
        reference = _write_reference(v.loaded, v.dev, reference_path, workload)
        result["determinism"] = reference.pop("determinism")
    else:
        reference = torch.load(reference_path, weights_only=True)
    v.inputs = v.dev.to_device(tuple(reference["inputs"]))
    v.module = v.dev.to_device(v.loaded.module)
    frames_after_first, out = _compile_and_call(v, result, workload, optimizer)
    v.progress("accuracy")
    accuracy = _accuracy(v, result, out, reference, accuracy_tolerance, optimizer)
    result["accuracy"] = accuracy
    checked = "gradients" if v.steps else "output"
    if v.warm_run:  # the warm compile (the parent subtracts the first child's median latency) and maybe the details
        if details_median_ms is not None and not v.steps:
            # its sweep: a traffic plan's sizes, for the plan's options only (measurement.details); else None
            _after_the_window(v, result, _callables(v), frames_after_first, sweep, details_median_ms)
            if eager_profile_ms is not None and v.timing.profile:
                v.progress("profiling eager")
                result["eager_time_breakdown"] = profiled_breakdown(v.module, v.inputs, v.dev, eager_profile_ms)
        return _with_status(result, accuracy, checked)
    if not accuracy["passed"] and v.timing.race_below is not None:  # racing: it cannot be recommended
        v.timing = dataclasses.replace(v.timing, race_below=math.inf, race_above=None)  # its floor is enough
    v.progress("timing")
    fns = _timed_window(v, result)
    _after_the_window(v, result, fns, frames_after_first, sweep, result["latency"]["median_ms"])
    return _with_status(result, accuracy, checked)


def _compile_and_call(v: Variant, result: dict, workload: str, optimizer: str) -> tuple[int, Any]:
    """Compile (for training: the training step, its eager copy made before the memory reset so it is not counted)
    and make the first call; the row gets first_call_s, the graph stats, the deployed size and the compile
    breakdown. Returns Dynamo's frame count after the first call and its output."""
    compile_s = [0.0]  # seconds spent in backend.compile() (eager export + session creation for ONNX Runtime)
    if workload == "training":
        v.steps = training_steps(v.backend, v.module, v.inputs, v.request, optimizer, compile_s)
    v.dev.reset_peak_memory()

    v.progress("compiling")
    v.compiled = v.steps.backend if v.steps else compile_variant(v.backend, v.module, v.inputs, v.request, compile_s)
    reset_dynamo_counters()
    compiled, inputs = v.compiled, v.inputs
    try:
        first_call_s, out = v.dev.timer()(lambda: compiled(*inputs))
    except Exception as exc:
        raise stage_error(exc, "the first (compiling) call") from exc
    frames_after_first = dynamo_counter("frames", "total")
    result.update(first_call_s=compile_s[0] + first_call_s, **graph_stats())
    if not v.steps:  # what the option deploys (a training step's optimizer state is in `training` instead)
        from advisor.harness.backends.quantize import serialized_bytes

        result["serialized_bytes"] = serialized_bytes(compiled, v.module)
    breakdown = compile_breakdown(compiled)
    if breakdown is not None:
        result["compile_breakdown"] = {**breakdown, "first_call_s": first_call_s}
    return frames_after_first, out


def _accuracy(v: Variant, result: dict, out: Any, reference: dict, tolerance: dict | None, optimizer: str) -> dict:
    """Training: the step's gradients against eager's (the row also gets its `training` details); inference: the
    output against eager's float32 and the float64 reference (an int8 option: by its drift from the float model)."""
    from advisor.harness.accuracy import compare_outputs

    if v.steps:
        from advisor.harness.grad_accuracy import compare_gradients

        accuracy = compare_gradients(v.steps.backend.gradients(), reference["gradients"], tolerance)
        result["training"] = training_details(v.steps, optimizer, v.dev.peak_memory_mb())
        return accuracy
    accuracy = compare_outputs(_leaves_on_cpu(out), reference["eager_out"], reference["fp64_out"], tolerance)
    if catalogue.is_quantized(v.backend.name, v.request.mode):  # int8: judged by its drift from the float model
        from advisor.harness.accuracy import judge_quantized

        accuracy = judge_quantized(accuracy, _leaves_on_cpu(out), reference["eager_out"], tolerance)
    return accuracy


def _timed_window(v: Variant, result: dict) -> dict[str, Any]:
    """The side-by-side timed window (the compiled callable, and eager unless this is the baseline) and what the
    row takes from it: the load at its start and end, the latencies, peak memory and throughput. Returns the
    callables it timed."""
    fns = _callables(v)
    load_start = read_load()  # was the node shared while this window ran (advisor.core.noise.shared_reasons)
    window = time_side_by_side(fns, v.inputs, v.dev, v.timing, lambda n: v.progress("timing", n))
    result["timing_load"] = {"start": load_start, "end": read_load()}
    result["timed_s"] = window.seconds
    result["raced"] = window.raced
    result["ahead"] = window.ahead
    result.update(summaries(window, v.is_baseline))
    result["peak_memory_mb"], result["memory_kind"] = v.dev.peak_memory_mb()
    result["throughput"] = throughput(v.inputs, result["latency"]["median_ms"])
    if v.steps:
        result["peak_memory_mb"] = training_peak_mb(result["peak_memory_mb"], result["training"], v.steps)
    return fns


def _callables(v: Variant) -> dict[str, Any]:
    """What is timed side by side: the compiled callable, and eager unless this is the baseline - the very same
    callable the backend compiled (ep.module() has its own call overhead)."""
    fns = {"backend": v.compiled}
    if not v.is_baseline:
        fns["eager"] = v.steps.eager if v.steps else v.module
    return fns


def _after_the_window(
    v: Variant, result: dict, fns: dict[str, Any], frames_after_first: int, sweep: dict | None, median_ms: float
) -> None:
    """What is measured after the timed window (whose median was `median_ms`), or in a leading option's details
    child: other sizes of the dynamic dims, recompiles, the profiled breakdown and, last (its static pass resets
    Dynamo), the shape sweep."""
    if v.loaded.dynamic_dims and v.timing.dynamic_sizes > 0:
        v.progress("dynamic shapes")
        result["dynamic"] = measure_dynamic_sizes(v.loaded, v.inputs, fns, v.dev, v.timing)
    if result["graph_count"] is not None:
        result["recompiles"] = max(0, dynamo_counter("frames", "total") - frames_after_first)
    if v.timing.profile:
        v.progress("profiling")
        result["time_breakdown"] = profiled_breakdown(v.compiled, v.inputs, v.dev, median_ms)
    if sweep and not v.steps:
        v.progress("shape sweep")  # last: its static pass resets Dynamo
        dynamo_based = not v.is_baseline and result["graph_count"] is not None
        backend, module, inputs, request = v.backend, v.module, v.inputs, v.request
        static = (lambda: compile_variant(backend, module, inputs, request)) if dynamo_based else None
        result["sweep"] = measure_sweep(sweep, v.loaded, inputs, fns, v.dev, v.timing, static)


def _with_status(result: dict, accuracy: dict, checked: str) -> dict:
    """The row's status and reason from its accuracy check of `checked` (output, gradients, generation)."""
    passed = accuracy["passed"]
    result["status"] = "ok" if passed else "fail_accuracy"
    result["reason"] = None if passed else f"inaccurate {checked}: {accuracy.get('reason', '')}"
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
        raise eager_failure(exc, "the model fails in eager mode") from exc
    determinism = _determinism(first, second)
    if fp64_note:
        determinism["fp64_note"] = fp64_note
    reference = {"inputs": list(inputs_cpu), "eager_out": first, "fp64_out": fp64_out}
    if workload == "training":
        reference["gradients"] = reference_gradients(loaded.module, inputs_cpu, dev)
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


def _leaves_on_cpu(out: Any) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t.detach().cpu() if isinstance(t, torch.Tensor) else t for t in tree_leaves(out)]
