"""Eager PyTorch: the reference every other backend is compared with, and the speedup denominator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from advisor.harness.backends.base import Backend, CompileRequest, UnsupportedRequest, device_usable, run_for_workload


class EagerBackend(Backend, catalogue_name="eager"):
    """Compile time: none (`compile_s_cold` = `compile_s_warm` = 0); the baseline every speedup divides by."""

    def available(self, device: str) -> tuple[bool, str]:
        return device_usable(device)

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        self.check_request(request)
        if request.options:
            raise UnsupportedRequest(f"eager takes no options, got {sorted(request.options)}")
        return run_for_workload(module, request.workload)
