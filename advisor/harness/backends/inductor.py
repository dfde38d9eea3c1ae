"""Plain `torch.compile` with its default compiler, Inductor."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import Any

from advisor.core import snippets
from advisor.core.snippets import POSITIONAL_CALL
from advisor.harness.backends.base import Backend, CompileRequest, UnsupportedRequest, device_usable, run_for_workload

CACHE_ENV = snippets.INDUCTOR_CACHE_ENV


class InductorBackend(Backend, catalogue_name="inductor"):
    """Compile time: `torch.compile` is lazy, so `compile_s_cold` is the first call (Dynamo tracing, AOTAutograd,
    Inductor code generation and the C++/Triton compiler) with an empty `TORCHINDUCTOR_CACHE_DIR`;
    `compile_s_warm` is the first call in a new process with the same cache directory (FX-graph cache hit:
    tracing again plus loading the compiled kernels)."""

    def available(self, device: str) -> tuple[bool, str]:
        ok, reason = device_usable(device)
        if not ok:
            return ok, reason
        if device == "npu" and importlib.util.find_spec("triton") is None:
            return False, "Inductor on NPU needs the triton-ascend package (not installed)"
        return True, ""

    def environment(self, request: CompileRequest) -> dict[str, str]:
        return {CACHE_ENV: request.cache_dir} if request.cache_dir else {}

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        self.check_request(request)
        if request.options and request.mode != "default":
            raise UnsupportedRequest("torch.compile takes either a mode or Inductor options, not both")
        # Read by Inductor when it first compiles (the call after this), so every variant gets its own cache.
        os.environ.update(self.environment(request))
        import torch

        kwargs: dict[str, Any] = {"dynamic": True if request.dynamic else None}
        if request.options:
            kwargs["options"] = dict(request.options)
        elif request.mode != "default":
            kwargs["mode"] = request.mode
        return run_for_workload(torch.compile(module, **kwargs), request.workload)

    def snippet(
        self, mode: str, options: dict[str, Any] | None = None, workload: str = "inference", call: str = POSITIONAL_CALL
    ) -> str:
        return snippets.inductor_snippet(mode, options, workload, call)
