"""Where one variant's time goes: a `torch.profiler` pass after its timed window, at the measured shape.

The child profiles a few more calls of the callable it just timed (so the profiler's overhead never touches the
timed numbers) and keeps the top entries by self time:

- eager: per aten op;
- Inductor: per generated kernel (`cpp_fused_*` on CPU, recorded because the child compiles with Inductor's
  `cpp.enable_kernel_profile`; `triton_*` on CUDA), the aten ops the compiled code still calls ("aten call":
  library kernels such as `aten::addmm`; "fallback": ops Inductor has no lowering for, from its own
  `lowering.fallbacks`), and the Dynamo/AOTAutograd runtime around them ("runtime");
- backends whose runtime the profiler cannot see into (ONNX Runtime, OpenVINO) show what it saw, with a note.

On CUDA the shares are of device (kernel) time; elsewhere of host self time. On an NPU only host-side ops are
visible (device kernels need torch_npu's profiler or msprof), which the note says. The shapes are the
`advisor.core.results.TimeBreakdown` model.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

TOP = 15
PROFILE_BUDGET_S = 0.25  # profiled calls last about this long in total (at least MIN_CALLS, at most MAX_CALLS)
MIN_CALLS = 3
# Reading the profile back costs ~60 us per recorded op event (torch builds a Python object for each), far more than
# the calls themselves for a small model: a profile of 100 calls of a 2-layer BERT (32,500 events) took 2.3 s, of 20
# calls 0.3-0.8 s, with the same top entries (near-equal ones swap places between runs at either count).
MAX_CALLS = 20

_GENERATED_KERNEL = re.compile(r"(^|_)(cpp_fused|triton_)")
_COMPILED_FX_CALL = re.compile(r"^## Call CompiledFxGraph \w+ ##$")


def enable_kernel_markers() -> None:
    """Make Inductor's generated C++ kernels visible to the profiler (a RECORD_FUNCTION per kernel call: one
    thread-local check when no profiler is running). Set before compiling, and in the warm-cache child too, so
    both children share the FX graph cache key."""
    import torch._inductor.config as inductor_config

    inductor_config.cpp.enable_kernel_profile = True


def profile_calls(per_call_s: float) -> int:
    """How many calls the profiled pass makes: about PROFILE_BUDGET_S of them, within [MIN_CALLS, MAX_CALLS]."""
    if per_call_s <= 0:
        return MAX_CALLS
    return max(MIN_CALLS, min(MAX_CALLS, int(PROFILE_BUDGET_S / per_call_s)))


def time_breakdown(
    fn: Callable[..., Any], inputs: tuple, device: str, synchronize: Callable[[], None], per_call_s: float
) -> dict:
    """Profile `fn(*inputs)` and return the breakdown dict (advisor.core.results.TimeBreakdown's shape)."""
    from torch.profiler import ProfilerActivity, profile

    calls = profile_calls(per_call_s)
    on_device = device == "cuda"
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_device else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn(*inputs)
        synchronize()
    averages = prof.key_averages()
    if on_device:  # kernels only: an aten op's own device time is its kernels', which are listed too
        from torch.autograd import DeviceType

        averages = [e for e in averages if getattr(e, "device_type", None) == DeviceType.CUDA]
    events = [(e.key, e.count, _self_us(e, on_device)) for e in averages]
    return summarise(events, calls, device, called_directly=_called_directly(prof.events()))


def _called_directly(events: Any) -> set[str]:
    """aten ops some call did not come from inside another aten op: what compiled code itself called (an op
    `aten::mkldnn_convolution` runs internally, such as `aten::resize_`, is not a fallback of the compiler)."""
    direct = set()
    for event in events:
        parent = getattr(event, "cpu_parent", None)
        if event.name.startswith("aten::") and not (parent is not None and parent.name.startswith("aten::")):
            direct.add(event.name)
    return direct


def profiled_breakdown(fn: Callable[..., Any], inputs: tuple, dev: Any, median_ms: float) -> dict:
    """`time_breakdown` on `dev` (an advisor.harness.devices.Device) after a timed window whose median was
    `median_ms`; a profiler that fails leaves the row's numbers standing (the breakdown then holds its `error`)."""
    import torch

    from advisor.core.text import first_line

    try:
        with torch.no_grad():
            return time_breakdown(fn, inputs, dev.kind, dev.synchronize, median_ms / 1e3)
    except Exception as exc:  # noqa: BLE001 - the breakdown is an extra, the timings are already taken
        return {"error": f"the profiler failed: {first_line(exc, limit=300)}"}


def _self_us(event: Any, on_device: bool) -> float:
    if on_device:
        return float(getattr(event, "self_device_time_total", 0.0) or 0.0)
    return float(event.self_cpu_time_total)


def summarise(
    events: list[tuple[str, int, float]], calls: int, device: str, called_directly: set[str] | None = None
) -> dict:
    """(name, count, self µs) over `calls` calls -> top entries with their share, kernel and fallback counts.
    `called_directly`: the aten ops called from outside any other aten op (None: all were); only those can be
    the compiler's fallbacks."""
    timed = [(_short_name(name), count, us) for name, count, us in events if us > 0]
    total_us = sum(us for _, _, us in timed)
    kernels = sorted({name for name, _, _ in timed if _GENERATED_KERNEL.search(name)})
    compiled = bool(kernels) or any(_is_runtime(name) and "Compiled" in name for name, _, _ in timed)
    # only a compiled callable's aten calls are told apart as fallbacks: an eager (or ONNX Runtime) child never
    # imports Inductor's lowering table for it (~0.8 s of CPU in a child whose zygote did not import Inductor)
    fallbacks = _direct_fallbacks(called_directly) if compiled else frozenset()
    entries = [
        _entry(name, count, us, calls, total_us, _kind(name, compiled, fallbacks, device))
        for name, count, us in sorted(timed, key=lambda item: item[2], reverse=True)[:TOP]
    ]
    return {
        "source": "torch.profiler, device (kernel) time" if device == "cuda" else "torch.profiler, host self time",
        "calls": calls,
        "total_ms_per_call": total_us / 1e3 / calls,
        "entries": entries,
        "other_share": max(0.0, 1.0 - sum(e["share"] for e in entries)) if total_us else 0.0,
        "fused_kernels": len(kernels) if compiled else None,
        "fallback_ops": _fallback_ops(timed, compiled, fallbacks),
        "note": _note(device, timed),
    }


def _direct_fallbacks(called_directly: set[str] | None) -> frozenset[str]:
    """Inductor's fallback ops, less those only ever called from inside another aten op."""
    fallbacks = _inductor_fallbacks()
    if called_directly is None:
        return fallbacks
    return frozenset(op for op in fallbacks if f"aten::{op}" in called_directly)


def _entry(name: str, count: int, us: float, calls: int, total_us: float, kind: str) -> dict[str, Any]:
    return {
        "name": name[:200],
        "kind": kind,
        "ms_per_call": us / 1e3 / calls,
        "share": us / total_us if total_us else 0.0,
        "count_per_call": count / calls,
    }


def _fallback_ops(timed: list[tuple[str, int, float]], compiled: bool, fallbacks: frozenset[str]) -> list[str]:
    """The aten ops a compiled callable ran as the compiler's fallbacks (classified as on the host)."""
    if not compiled:
        return []
    return sorted({name for name, _, _ in timed if _kind(name, compiled, fallbacks) == "fallback"})


def _kind(name: str, compiled: bool, fallbacks: frozenset[str], device: str = "cpu") -> str:
    if _GENERATED_KERNEL.search(name):
        return "kernel"
    if device == "cuda":
        return "library kernel"  # a device kernel the compiler did not generate (cuBLAS, cuDNN, ATen's own)
    if name.startswith("aten::"):
        if not compiled:
            return "op"
        return "fallback" if name.removeprefix("aten::") in fallbacks else "aten call"
    if _is_runtime(name):
        return "runtime"
    return "op"


def _is_runtime(name: str) -> bool:
    return not name.startswith(("aten::", "cuda", "void ")) and not _GENERATED_KERNEL.search(name)


def _short_name(name: str) -> str:
    """`## Call CompiledFxGraph <hash> ##` -> `Call CompiledFxGraph` (the hash differs per compile)."""
    return "Call CompiledFxGraph" if _COMPILED_FX_CALL.match(name) else name


def _note(device: str, timed: list[tuple[str, int, float]]) -> str | None:
    if device == "npu":
        return "host-side ops only: NPU kernels need torch_npu's profiler or msprof, which this pass does not run"
    if not timed:
        return "the profiler saw no ops: this backend's runtime runs outside PyTorch's profiler"
    if not any(name.startswith("aten::") or _GENERATED_KERNEL.search(name) for name, _, _ in timed):
        return "only the call into this backend's runtime is visible: its own kernels run outside PyTorch's profiler"
    return None


def _inductor_fallbacks() -> frozenset[str]:
    """Op names ("_cdist_forward") Inductor runs as fallback kernels (lowering.fallbacks holds OpOverloads)."""
    try:
        from torch._inductor import lowering
    except Exception:  # noqa: BLE001 - no Inductor in this build: nothing is called a fallback
        return frozenset()
    return frozenset(str(op).split(".")[1] for op in lowering.fallbacks if str(op).startswith("aten."))
