"""OpenVINO through `torch.compile(backend="openvino")`, CPU only.

`import openvino.torch` registers the backend and flips a global Dynamo setting
(`inline_inbuilt_nn_modules=False`), so it must only ever run in its own child process. (Named
`openvino_backend` so it does not shadow the `openvino` package.) Its int8 mode (`openvino:int8`) converts with
OpenVINO and quantizes with NNCF instead, no Dynamo involved (advisor.harness.backends.ov_int8).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

from advisor.core import catalogue, snippets
from advisor.harness.backends import ov_int8
from advisor.harness.backends.base import Backend, CompileRequest, UnsupportedRequest, run_for_workload

DEFAULT_OPTIONS = snippets.OPENVINO_DEFAULT_OPTIONS


class OpenVinoBackend(Backend, catalogue_name="openvino"):
    """Compile time: `torch.compile(backend="openvino")` is lazy, so `compile_s_cold` is the first call (Dynamo
    tracing, conversion to an OpenVINO model, OpenVINO's compile for the CPU). `compile_s_warm` is the same in a
    new process: nothing is cached between processes unless the user passes OpenVINO's `model_caching` options.
    `openvino:int8`: cold = conversion + NNCF quantization + saving the IR + compile_model; warm = reading the saved
    int8 IR + compile_model (advisor.harness.backends.ov_int8)."""

    def available(self, device: str) -> tuple[bool, str]:
        if device != "cpu":
            return False, f"the OpenVINO backend is measured on cpu only, not on {device}"
        if importlib.util.find_spec("openvino") is None:
            return False, (
                "the openvino package is not installed (pip install openvino; openvino:int8 also needs nncf: "
                f"{ov_int8.OPENVINO_PACKAGE_HINT})"
            )
        return True, ""

    def check_request(self, request: CompileRequest) -> None:
        super().check_request(request)
        if request.mode == catalogue.OPENVINO_INT8_MODE:
            ov_int8.check(request)

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        self.check_request(request)
        if request.mode == catalogue.OPENVINO_INT8_MODE:
            return ov_int8.compile_int8(module, example_inputs, request)
        if request.workload != "inference":
            raise UnsupportedRequest("the OpenVINO backend measures inference only")
        import openvino.torch  # noqa: F401 - registers backend="openvino"
        import torch

        compiled = torch.compile(module, backend="openvino", options=_merged(request.options))
        return run_for_workload(compiled, request.workload)


def _merged(options: dict[str, Any] | None) -> dict[str, Any]:
    return snippets.openvino_options(options)
