"""cpu, cuda and npu behind one small interface: describe, move, synchronize, time, peak memory.

Call `prepare_environment(kind)` before torch is imported (the sandbox child does): on a host
with torch_npu installed but no usable NPU, torch's backend autoload would make `import torch`
fail, so it is switched off there. `open_device(kind)` then imports torch (and torch_npu).

The torch_npu test double (tests/doubles, `torch_npu.__advisor_test_double__ = True`) keeps
tensors on the CPU and records `measured_on = "test-double"`; only a real NPU gives "npu".
"""

from __future__ import annotations

import glob
import importlib.util
import os
import platform
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from advisor.core.results import DeviceKind

AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"


class DeviceUnavailable(RuntimeError):
    """The requested device cannot be used here; the message says why."""


def npu_hardware_present() -> bool:
    """Ascend driver device nodes exist (checked without importing anything)."""
    return bool(glob.glob("/dev/davinci[0-9]*"))


def prepare_environment(kind: str) -> None:
    """Make `import torch` safe for `kind`; must run before torch is imported in this process."""
    if "torch" in sys.modules:
        return
    if importlib.util.find_spec("torch_npu") is None:
        return
    if kind != "npu" or not npu_hardware_present():
        os.environ.setdefault(AUTOLOAD_ENV, "0")


@dataclass
class Device:
    kind: DeviceKind
    torch_device: str  # what tensors move to: "cpu", "cuda:0", "npu:0" ("cpu" under the test double)
    measured_on: str  # "cpu" | "cuda" | "npu" | "test-double"
    _module: Any = None  # torch.cuda / torch.npu, None on cpu and under the test double
    _baseline: int = 0  # bytes in use at the last reset_peak_memory()

    def to_device(self, value: Any) -> Any:
        """Move a module, a tensor or a pytree of tensors to this device."""
        import torch
        from torch.utils._pytree import tree_map

        if isinstance(value, torch.nn.Module):
            return value.to(self.torch_device)
        return tree_map(lambda t: t.to(self.torch_device) if isinstance(t, torch.Tensor) else t, value)

    def synchronize(self) -> None:
        if self._module is not None:
            self._module.synchronize()

    def timer(self) -> Callable[[Callable[[], Any]], tuple[float, Any]]:
        """A function that calls `fn()` once and returns (seconds, its result), synchronized.

        Device events on cuda/npu (they measure device time between the two records, which also
        captures asynchronous work such as graph replays); perf_counter_ns on cpu.
        """
        if self._module is None:

            def time_on_host(fn: Callable[[], Any]) -> tuple[float, Any]:
                start = time.perf_counter_ns()
                out = fn()
                return (time.perf_counter_ns() - start) * 1e-9, out

            return time_on_host
        module = self._module

        def time_with_events(fn: Callable[[], Any]) -> tuple[float, Any]:
            start, end = module.Event(enable_timing=True), module.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3, out

        return time_with_events

    def reset_peak_memory(self) -> None:
        """Start a new peak: device allocator peak on cuda/npu, the process's RSS high-water mark on cpu."""
        if self._module is not None:
            self._module.reset_peak_memory_stats()
            self._baseline = self._module.memory_allocated()
            return
        _reset_rss_high_water_mark()
        self._baseline = _current_rss_bytes()

    def peak_memory_mb(self) -> tuple[float | None, Literal["device", "rss"]]:
        """Peak since `reset_peak_memory`, above what was in use at that moment."""
        baseline = self._baseline
        if self._module is not None:
            return max(0, self._module.max_memory_allocated() - baseline) / 2**20, "device"
        peak = _peak_rss_bytes()
        return (None if peak is None else max(0, peak - baseline) / 2**20), "rss"

    def describe(self) -> dict[str, Any]:
        """This device's advisor.core.results.Environment, as a plain dict (the measuring child's)."""
        import torch

        env = {
            "device": self.kind,
            "device_name": self._name(),
            "soc_version": None,
            "cann_version": None,
            "driver_version": None,
            "torch_version": torch.__version__,
            "torch_npu_version": None,
            "python_version": platform.python_version(),
            "host": socket.gethostname(),
            "measured_on": self.measured_on,
        }
        env["torch_threads"] = torch.get_num_threads()  # the intra-op threads every timed call ran with
        cpu_model = _cpu_model()
        if cpu_model:
            env["cpu_model"] = cpu_model
        if self.kind == "npu":
            env.update(_npu_versions())
        if self.kind == "cuda":
            env["driver_version"] = _safe(lambda: torch.version.cuda)
        return env

    def _name(self) -> str:
        if self.measured_on == "test-double":
            return "torch_npu test double (tensors on the CPU)"
        if self._module is not None:
            return str(_safe(lambda: self._module.get_device_name(0)) or self.kind)
        return _cpu_name()


def open_device(kind: str) -> Device:
    """The device to measure on. Imports torch; raises DeviceUnavailable with the reason."""
    prepare_environment(kind)
    import torch

    if kind == "cpu":
        return Device("cpu", "cpu", "cpu")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailable("no usable CUDA GPU: torch.cuda.is_available() is False")
        return Device("cuda", "cuda:0", "cuda", torch.cuda)
    if kind == "npu":
        return _open_npu()
    raise DeviceUnavailable(f"unknown device '{kind}' (cpu, cuda or npu)")


def _open_npu() -> Device:
    if importlib.util.find_spec("torch_npu") is None:
        raise DeviceUnavailable("torch_npu is not installed, so there is no NPU support here")
    try:
        import torch_npu
    except Exception as exc:  # missing CANN libraries, autoload failures, ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DeviceUnavailable(f"no usable NPU: torch_npu is installed but cannot be imported ({first})") from exc
    if getattr(torch_npu, "__advisor_test_double__", False):
        return Device("npu", "cpu", "test-double")
    import torch

    npu = getattr(torch, "npu", None) or torch_npu.npu
    if not _safe(npu.is_available):
        raise DeviceUnavailable("no usable NPU: torch_npu is installed but torch.npu.is_available() is False")
    return Device("npu", "npu:0", "npu", npu)


def _npu_versions() -> dict:
    try:
        import torch_npu
    except Exception:
        return {}
    utils = getattr(getattr(torch_npu, "npu", None), "utils", None)
    return {
        "torch_npu_version": getattr(torch_npu, "__version__", None),
        "soc_version": _safe(lambda: int(utils.get_soc_version())),
        "cann_version": _safe(lambda: str(utils.get_cann_version(module="CANN"))),
        "driver_version": _safe(lambda: str(utils.get_cann_version(module="DRIVER"))),
    }


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _cpu_model() -> str | None:
    """/proc/cpuinfo's "model name" of the host CPU (None where there is none, e.g. some ARM kernels)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()[:200]
    except OSError:
        pass
    return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _current_rss_bytes() -> int:
    kb = _status_kb("VmRSS")
    return 0 if kb is None else kb * 1024


def _reset_rss_high_water_mark() -> None:
    """Linux: writing 5 to clear_refs resets VmHWM to the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_rss_bytes() -> int | None:
    kb = _status_kb("VmHWM")
    if kb is not None:
        return kb * 1024
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    except Exception:
        return None
