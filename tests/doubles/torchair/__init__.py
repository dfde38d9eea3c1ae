"""TEST DOUBLE — not torchair. The TorchAir API surface the advisor uses, compiling on the CPU with aot_eager.

Signatures follow the real torchair package (torch_npu 2.14.0 wheel, `torchair/__init__.py`).
`backend_calls()`, `dim_gear_calls()` and `cache_events()` exist only in the double: they let tests see what
the advisor asked TorchAir for.
"""

import logging

import torch_npu  # noqa: F401 - like the real one, torchair lives on top of torch_npu

from torchair import inference
from torchair._npu_backend import backend_calls, get_compiler, get_npu_backend
from torchair.configs.compiler_config import CompilerConfig
from torchair.inference import cache_events, dim_gear_calls

__all__ = [
    "get_compiler",
    "get_npu_backend",
    "dynamo_export",
    "CompilerConfig",
    "use_internal_format_weight",
    "logger",
    "register_fx_node_ge_converter",
    "patch_for_hcom",
    "register_replacement",
    "npu_format_cast_via_cpu",
]

logger = logging.getLogger("torchair")
__advisor_test_double__ = True


def _not_faked(name):
    def missing(*args, **kwargs):
        raise NotImplementedError(f"torchair.{name} is not part of the test double")

    missing.__name__ = name
    return missing


dynamo_export = _not_faked("dynamo_export")
use_internal_format_weight = _not_faked("use_internal_format_weight")
register_fx_node_ge_converter = _not_faked("register_fx_node_ge_converter")
patch_for_hcom = _not_faked("patch_for_hcom")
register_replacement = _not_faked("register_replacement")
npu_format_cast_via_cpu = _not_faked("npu_format_cast_via_cpu")

_ = (inference, backend_calls, cache_events, dim_gear_calls)
