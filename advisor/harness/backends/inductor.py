"""Plain `torch.compile` with its default compiler, Inductor."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import Any

from advisor.harness.backends.base import Backend, CompileRequest, UnsupportedRequest, device_usable, run_for_workload

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


class InductorBackend(Backend):
    """Compile time: `torch.compile` is lazy, so `compile_s_cold` is the first call (Dynamo tracing, AOTAutograd,
    Inductor code generation and the C++/Triton compiler) with an empty `TORCHINDUCTOR_CACHE_DIR`;
    `compile_s_warm` is the first call in a new process with the same cache directory (FX-graph cache hit:
    tracing again plus loading the compiled kernels)."""

    name = "inductor"
    family = "generic"
    devices = ("cpu", "cuda", "npu")
    modes = ("default", "max-autotune", "reduce-overhead")

    def modes_for(self, device: str) -> tuple[str, ...]:
        # reduce-overhead means CUDA graphs; on other devices it silently runs like default.
        return self.modes if device == "cuda" else ("default", "max-autotune")

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

    def snippet(self, mode: str, options: dict[str, Any] | None = None, workload: str = "inference") -> str:
        if options:
            compile_args = f"options={dict(options)!r}"
        elif mode != "default":
            compile_args = f'mode="{mode}"'
        else:
            compile_args = ""
        lines = [
            "import os",
            "# Keep compiled kernels between runs (set before the first compile):",
            f'os.environ.setdefault("{CACHE_ENV}", "/path/to/inductor-cache")',
            "import torch",
            "",
            f"model = torch.compile(model{', ' + compile_args if compile_args else ''})",
        ]
        if workload == "training":
            from advisor.harness.training_step import snippet_step_lines

            lines += snippet_step_lines()
        else:
            lines += ["with torch.no_grad():", "    output = model(*inputs)  # first call compiles"]
        return "\n".join(lines) + "\n"
