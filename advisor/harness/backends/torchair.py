"""TorchAir on Ascend NPUs: the GE graph (`max-autotune`) and the `npugraph_ex` (ACL graph) backends.

Uses only the real API (as the torch_npu 2.14.0 wheel defines it): `torchair.get_npu_backend(compiler_config=...)`,
`torchair.CompilerConfig`, `torchair.inference.set_dim_gears`, `torchair.inference.cache_compile`, and
`torch.compile(model, backend="npugraph_ex", options={...})`. `torch_npu` is always imported before `torchair`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from advisor.core import snippets
from advisor.core.snippets import POSITIONAL_CALL
from advisor.harness.backends.base import Backend, CompileRequest, UnsupportedRequest, npu_usable, run_for_workload
from advisor.harness.backends.torchair_options import GE_MODE, NPUGRAPH_EX_MODE, validate_options

SNIPPET_CACHE_DIR = snippets.TORCHAIR_SNIPPET_CACHE_DIR


class TorchAirBackend(Backend, catalogue_name="torchair"):
    """Compile time: `compile_s_cold` is `compile()` plus the first call (Dynamo tracing, TorchAir's conversion
    to a GE graph or an ACL graph, and the graph compile on the NPU). `compile_s_warm`: in GE mode the graph is
    written to and read back from the variant's cache directory (`torchair.inference.cache_compile`), so the
    warm first call loads the compiled graph; npugraph_ex compiles again in a new process."""

    def available(self, device: str) -> tuple[bool, str]:
        if device != "npu":
            return False, f"TorchAir runs only on Ascend NPUs, not on {device}"
        ok, reason = npu_usable()
        if not ok:
            return ok, reason
        try:
            # After torch_npu, as TorchAir requires; torch_npu puts a lazy `torchair` proxy in sys.modules.
            import torchair  # noqa: F401
        except Exception as exc:
            return False, f"torchair cannot be imported (torch_npu built with DISABLE_INSTALL_TORCHAIR?): {exc}"
        return True, ""

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        self.check_request(request)
        validate_options(request.mode, request.options)
        gears = _normalise_gears(request.dim_gears)
        if gears and request.mode != GE_MODE:
            raise UnsupportedRequest("torchair.inference.set_dim_gears works only in max-autotune (GE) mode")
        import torch
        import torch_npu  # noqa: F401 - must come before torchair
        import torchair

        dynamic = bool(request.dynamic or gears)
        if request.mode == NPUGRAPH_EX_MODE:
            compiled = torch.compile(
                module, backend="npugraph_ex", options=dict(request.options) or None, dynamic=dynamic
            )
            return run_for_workload(compiled, request.workload)

        config = build_compiler_config(request.options)
        for index, dims in gears.items():
            torchair.inference.set_dim_gears(example_inputs[index], dim_gears=dims)
        if request.cache_dir and isinstance(module, torch.nn.Module) and request.workload == "inference":
            # Warm compile: the compiled graph is written to (and later read from) the variant's cache dir.
            # cache_compile skips guards, so callers vary input shapes only through dim_gears here.
            compiled = torchair.inference.cache_compile(
                module.forward, config=config, dynamic=dynamic, cache_dir=request.cache_dir
            )
        else:
            npu_backend = torchair.get_npu_backend(compiler_config=config)
            compiled = torch.compile(module, backend=npu_backend, dynamic=dynamic)
        return run_for_workload(compiled, request.workload)

    def snippet(
        self, mode: str, options: dict[str, Any] | None = None, workload: str = "inference", call: str = POSITIONAL_CALL
    ) -> str:
        return self.snippet_for(
            CompileRequest(mode=mode, device="npu", workload=workload, options=options or {}, call=call)
        )

    def snippet_for(self, request: CompileRequest) -> str:
        validate_options(request.mode, request.options)
        gears = _normalise_gears(request.dim_gears)
        return snippets.torchair_snippet(
            request.mode,
            request.options,
            request.workload,
            dynamic=bool(request.dynamic or gears),
            dim_gears=gears,
            cache=bool(request.cache_dir),
            call=request.call,
        )


def build_compiler_config(options: Mapping[str, Any]) -> Any:
    """A real `torchair.CompilerConfig` in GE mode with each dotted option set; torchair rejects bad names/values."""
    from torchair import CompilerConfig

    config = CompilerConfig()
    config.mode = GE_MODE
    for name, value in options.items():
        *parents, leaf = name.split(".")
        target = config
        for part in parents:
            target = getattr(target, part)
        setattr(target, leaf, value)
    return config


def _normalise_gears(dim_gears: Mapping[Any, Mapping[Any, Sequence[int]]]) -> dict[int, dict[int, list[int]]]:
    """JSON turns int keys into strings; set_dim_gears wants {dim: [sizes]} with int dims."""
    return {int(index): {int(dim): list(sizes) for dim, sizes in dims.items()} for index, dims in dim_gears.items()}
