"""TensorRT through Torch-TensorRT's `torch.compile(backend="tensorrt")`, CUDA only.

(Named `tensorrt_backend` so it does not shadow the `tensorrt` package.)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

from advisor.harness.backends.base import Backend, CompileRequest, UnsupportedRequest, device_usable, run_for_workload


class TensorRtBackend(Backend, catalogue_name="tensorrt"):
    """Compile time: `torch.compile(backend="tensorrt")` is lazy, so `compile_s_cold` is the first call (Dynamo
    tracing, partitioning and the TensorRT engine build); `compile_s_warm` is the same in a new process (engines
    are rebuilt unless Torch-TensorRT's engine cache options are given)."""

    def available(self, device: str) -> tuple[bool, str]:
        if device != "cuda":
            return False, f"TensorRT runs only on NVIDIA GPUs (cuda), not on {device}"
        if importlib.util.find_spec("torch_tensorrt") is None:
            return False, "the torch_tensorrt package is not installed (pip install torch-tensorrt)"
        return device_usable(device)

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        self.check_request(request)
        if request.workload != "inference":
            raise UnsupportedRequest("the TensorRT backend measures inference only")
        import torch
        import torch_tensorrt  # noqa: F401 - registers backend="tensorrt"

        compiled = torch.compile(
            module, backend="tensorrt", options=dict(request.options) or None, dynamic=True if request.dynamic else None
        )
        return run_for_workload(compiled, request.workload)
