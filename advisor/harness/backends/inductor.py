"""Plain `torch.compile` with its default compiler, Inductor."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from typing import Any

from advisor.core import catalogue, snippets
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

    def check_request(self, request: CompileRequest) -> None:
        super().check_request(request)
        if request.mode == catalogue.INDUCTOR_INT8_MODE:
            from advisor.harness.backends.quantize import torchao_missing

            if request.workload != "inference":
                raise UnsupportedRequest("PT2E int8 (inductor:pt2e-int8) is measured for inference only")
            if request.options:
                raise UnsupportedRequest("inductor:pt2e-int8 takes no options here")
            missing = torchao_missing()
            if missing:
                raise UnsupportedRequest(missing)

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
        if request.mode == catalogue.INDUCTOR_INT8_MODE:
            return self._compile_pt2e_int8(module, example_inputs, request)
        if request.options:
            kwargs["options"] = dict(request.options)
        elif request.mode != "default":
            kwargs["mode"] = request.mode
        return run_for_workload(torch.compile(module, **kwargs), request.workload)

    def _compile_pt2e_int8(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        """Export, prepare with the X86 Inductor quantizer, calibrate on the example inputs, convert (all in
        `compile()`, so in the cold compile), then `torch.compile` with freezing as the PT2E X86 recipe does. With
        torch 2.13 and torchao 0.18 freezing fails on some graphs (convolutions; DistilBERT's 3-D linears) with
        `InductorError: UnsupportedOperatorException: onednn.qconv_prepack.default` (or `qlinear_prepack`: ops with
        no fake kernel); then the first call compiles the Q/DQ graph again without freezing, the failed attempt
        counting in the cold compile, and the row's `compile_breakdown` says so (`freezing`, `freezing_error`)."""
        from advisor.harness.backends.quantize import FreezingFallback, pt2e_int8, weights_bytes

        converted, steps = pt2e_int8(module, example_inputs, request.calibration)
        compiled = FreezingFallback(converted, request.workload)
        compiled.compile_breakdown.update(steps, quantization="PT2E static int8")  # steps["calibration"]: on what
        compiled.serialized_bytes = weights_bytes(converted)  # int8 weights + scales and zero points
        return compiled
