"""What every backend looks like to the measurement harness.

A backend turns a loaded module into a callable the harness can time, and can print the
exact code a user pastes to get the same thing. Backends import their packages lazily so
listing them never imports torch or a vendor SDK.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from advisor.core import catalogue, snippets
from advisor.core.catalogue import BackendInfo, Family
from advisor.core.snippets import POSITIONAL_CALL

__all__ = ["Backend", "BackendInfo", "CompileRequest", "Family", "UnsupportedRequest"]


@dataclass
class CompileRequest:
    """Everything a backend needs to compile one (mode, device, workload) variant."""

    mode: str
    device: str  # "cpu" | "cuda" | "npu"
    workload: str = "inference"  # "inference" | "training"
    options: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None  # this variant's own compile-cache directory
    dynamic: bool = False
    # TorchAir GE only: {input index: {dim: [sizes]}} -> torchair.inference.set_dim_gears on the example inputs.
    # The first call of the compiled callable must then use those same example input tensors.
    dim_gears: dict[int, dict[int, list[int]]] = field(default_factory=dict)
    # How the pasted snippet calls the model: `model(*inputs)`, or `model(*args, **kwargs)` for keyword inputs.
    call: str = POSITIONAL_CALL
    # int8 modes only: the user's calibration .npz (advisor.core.calibration); None: calibrate on the example inputs
    calibration: str | None = None


class UnsupportedRequest(ValueError):
    """This backend cannot do the requested mode / device / workload / options; the message says why."""


class Backend(ABC):
    """A built-in backend names its catalogue entry (`class EagerBackend(Backend, catalogue_name="eager")`) and
    takes its name, family, devices, modes and process needs from it; a backend a test injects sets them itself."""

    name: str
    family: Family
    devices: tuple[str, ...]
    modes: tuple[str, ...]
    # True when compiling changes process-wide state (e.g. OpenVINO's Dynamo config): never share a process.
    needs_own_process: bool = False
    info: ClassVar[BackendInfo | None] = None  # the catalogue entry of a built-in backend

    def __init_subclass__(cls, catalogue_name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if catalogue_name is None:
            return
        entry = catalogue.info(catalogue_name)
        cls.info = entry
        cls.name, cls.family, cls.devices, cls.modes = entry.name, entry.family, entry.devices, entry.modes
        cls.needs_own_process = entry.needs_own_process

    @abstractmethod
    def available(self, device: str) -> tuple[bool, str]:
        """(True, "") when this backend can run on `device` here, else (False, the reason)."""

    @abstractmethod
    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        """Return a callable taking the example inputs. Compilation may be lazy (first call)."""

    def snippet(
        self, mode: str, options: dict[str, Any] | None = None, workload: str = "inference", call: str = POSITIONAL_CALL
    ) -> str:
        """The code a user pastes to get this variant; only real API names. A built-in backend's is its catalogue
        entry's (advisor.core.snippets.snippet, int8 modes included: what a report shows without the harness); a
        backend a test injects writes its own."""
        if self.info is None:
            raise NotImplementedError(f"backend '{self.name}' has no snippet")
        return snippets.snippet(self.info.name, mode, options, workload, call)

    def modes_for(self, device: str) -> tuple[str, ...]:
        """The modes that run on `device` (all of them for a backend without a catalogue entry)."""
        return self.info.modes_for(device) if self.info is not None else self.modes

    def environment(self, request: CompileRequest) -> dict[str, str]:
        """Environment variables the child must set before importing torch for this request."""
        return {}

    def snippet_for(self, request: CompileRequest) -> str:
        """The snippet for exactly this request (backends that use cache_dir / dim_gears override it)."""
        if "call" not in inspect.signature(self.snippet).parameters:  # a plugin backend written before `call`
            return self.snippet(request.mode, request.options, request.workload)
        return self.snippet(request.mode, request.options, request.workload, call=request.call)

    def check_request(self, request: CompileRequest) -> None:
        """Raise UnsupportedRequest when this backend cannot do `request` (unknown mode, mode not on this device)."""
        if request.mode not in self.modes:
            raise UnsupportedRequest(f"{self.name} has no mode '{request.mode}'; modes: {', '.join(self.modes)}")
        if request.mode not in self.modes_for(request.device):
            raise UnsupportedRequest(
                f"{self.name} mode '{request.mode}' does not run on {request.device}; "
                f"modes there: {', '.join(self.modes_for(request.device))}"
            )
        if request.workload not in ("inference", "training"):
            raise UnsupportedRequest(f"unknown workload '{request.workload}' (inference or training)")


def run_for_workload(fn: Callable, workload: str) -> Callable:
    """Inference runs (and therefore lazily compiles) under torch.no_grad(): custom ops fail to compile otherwise."""
    if workload != "inference":
        return fn
    import torch

    def call_without_grad(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return fn(*args, **kwargs)

    return call_without_grad


def device_usable(device: str) -> tuple[bool, str]:
    """(True, "") when `device` can run tensors in this process, else (False, why). Imports torch for cuda/npu."""
    if device == "cpu":
        return True, ""
    if device == "cuda":
        import torch

        if torch.cuda.is_available():
            return True, ""
        return False, "no usable CUDA GPU: torch.cuda.is_available() is False"
    if device == "npu":
        return npu_usable()
    return False, f"unknown device '{device}' (cpu, cuda or npu)"


def npu_usable() -> tuple[bool, str]:
    """Whether torch_npu imports and sees an NPU. Never raises: an import failure is the reason."""
    import importlib.util

    if importlib.util.find_spec("torch_npu") is None:
        return False, "torch_npu is not installed, so there is no NPU support here"
    try:
        import torch_npu
    except Exception as exc:  # ImportError (missing CANN libs), RuntimeError (autoload), ...
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return False, f"no usable NPU: torch_npu is installed but cannot be imported ({first_line})"
    try:
        usable = bool(torch_npu.npu.is_available())
    except Exception as exc:
        return False, f"no usable NPU: torch_npu.npu.is_available() failed ({exc})"
    if not usable:
        return False, "no usable NPU: torch_npu is installed but torch.npu.is_available() is False"
    return True, ""
