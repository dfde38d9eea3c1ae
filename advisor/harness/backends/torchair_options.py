"""The real TorchAir option names, as data, so options can be checked where torchair is not importable.

Transcribed from the torch_npu 2.14.0 wheel (`dynamo/torchair/configs/*.py`): the `torchair.CompilerConfig` tree,
and the keys `torch.compile(backend="npugraph_ex", options=...)` accepts. Torch-free on purpose.

Each entry of COMPILER_CONFIG_OPTIONS maps a dotted attribute path of `CompilerConfig` to what it accepts:
a tuple of allowed values, an `IntRange`, a type (free-form of that type), `CALLABLE`, or None (anything).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from advisor.core.catalogue import TORCHAIR_GE_MODE, TORCHAIR_NPUGRAPH_EX_MODE

BOOL = (True, False)
CALLABLE = "callable or None"


@dataclass(frozen=True)
class IntRange:
    """An integer option with inclusive bounds (None = unbounded)."""

    low: int | None
    high: int | None

    def accepts(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def __str__(self) -> str:
        return f"an integer in [{self.low}, {'inf' if self.high is None else self.high}]"


OptionSpec = tuple | IntRange | type | str | None

COMPILER_CONFIG_OPTIONS: dict[str, OptionSpec] = {
    "mode": ("max-autotune", "reduce-overhead", "npugraph_ex"),
    "post_grad_custom_pre_pass": CALLABLE,
    "post_grad_custom_post_pass": CALLABLE,
    # debug
    "debug.graph_dump.type": (None, "txt", "pbtxt", "py"),
    "debug.graph_dump.path": str,
    "debug.data_dump.type": (None, "npy"),
    "debug.data_dump.path": str,
    "debug.data_dump.filter": CALLABLE,
    "debug.fx_summary.type": (None, "csv"),
    "debug.fx_summary.skip_compile": BOOL,
    "debug.run_eagerly": BOOL,
    "debug.deadlock_check": BOOL,
    "debug.aclgraph.disable_reinplace_inplaceable_ops_pass": BOOL,
    "debug.aclgraph.disable_reinplace_input_mutated_ops_pass": BOOL,
    "debug.aclgraph.disable_mempool_reuse_in_same_fx": BOOL,
    "debug.aclgraph.enable_output_clone": BOOL,
    "debug.aclgraph.static_capture_size_limit": IntRange(1, None),
    "debug.aclgraph.clone_input": BOOL,
    "debug.aclgraph.remove_cat_ops": BOOL,
    # aoe_config (auto-tuning)
    "aoe_config.aoe_mode": (None, "2"),
    "aoe_config.work_path": str,  # an existing directory on the NPU node
    "aoe_config.aoe_config_file": str,  # an existing file on the NPU node
    # export
    "export.export_mode": BOOL,
    "export.export_path_dir": str,  # must exist
    "export.export_name": str,
    "export.weight_name": str,
    "export.inputs_name": str,
    "export.experimental.enable_record_nn_module_stack": BOOL,
    "export.experimental.auto_atc_config_generated": BOOL,
    "export.experimental.enable_lite_export": BOOL,
    # dump_config
    "dump_config.enable_dump": BOOL,
    "dump_config.dump_path": str,
    "dump_config.dump_mode": ("all", "input", "output"),
    "dump_config.quant_dumpable": BOOL,
    "dump_config.dump_step": str,  # e.g. "0|1|2-5"
    "dump_config.dump_layer": str,
    "dump_config.dump_data": ("tensor", "stats"),
    "dump_config.dump_config_path": str,  # a .json file
    "dump_config.data_dump_stage": ("optimized", "original"),
    # fusion_config
    "fusion_config.fusion_switch_file": str,  # an existing file
    # experimental_config
    "experimental_config.cc_parallel_enable": BOOL,
    "experimental_config.keep_inference_input_mutations": BOOL,
    "experimental_config.memory_efficiency": BOOL,
    "experimental_config.frozen_parameter": BOOL,
    "experimental_config.static_model_ops_lower_limit": IntRange(-1, 2**63 - 1),
    "experimental_config.jit_compile": ("auto",),
    "experimental_config.npu_fx_pass": BOOL,
    "experimental_config.aot_config_enable_joint_graph": BOOL,
    "experimental_config.aot_config_output_loss_index": int,
    "experimental_config.topology_sorting_strategy": ("DFS", "BFS", "RDFS", "StableRDFS"),
    "experimental_config.enable_ref_data": BOOL,
    "experimental_config.enable_view_optimize": BOOL,
    "experimental_config.remove_noop_ops": BOOL,
    "experimental_config.tiling_schedule_optimize": BOOL,
    "experimental_config.pattern_fusion_pass": BOOL,
    # experimental_config.aclgraph: private names in torchair itself (leading underscore)
    "experimental_config.aclgraph._aclnn_static_shape_kernel": None,
    "experimental_config.aclgraph._aclnn_static_shape_kernel_build_dir": None,
    "experimental_config.aclgraph._aclnn_static_shape_kernel_sym_value_range": None,
    "experimental_config.aclgraph._aclnn_static_shape_kernel_sym_index": None,
    "experimental_config.aclgraph._super_kernel_optimize": None,
    "experimental_config.aclgraph._super_kernel_optimize_options": None,
    "experimental_config.aclgraph._super_kernel_debug_options": None,
    # inference_config
    "inference_config.dynamic_gears_merge_policy": ("zip", "product"),
    # ge_config
    "ge_config.enable_single_stream": BOOL,
    "ge_config.oo_level": ("O3", "O1"),
    "ge_config.oo_constant_folding": (None, True, False),
    "ge_config.oo_dead_code_elimination": (None, True, False),
    "ge_config.export_compile_stat": ("2", "0", "1"),
    "ge_config.aicore_num": None,
    "ge_config.optimization_switch": None,
    "ge_config.multistream_parallel_mode": None,
    # aclgraph_config
    "aclgraph_config.use_custom_pool": None,  # a graph pool handle
}

# `torch.compile(model, backend="npugraph_ex", options={...})`: any other key is a ValueError("Invalid option ...").
NPUGRAPH_EX_OPTIONS: tuple[str, ...] = (
    "force_eager",
    "use_graph_pool",
    "reuse_graph_pool_in_same_fx",
    "capture_limit",
    "clone_input",
    "clone_output",
    "static_kernel_compile",
    "super_kernel_optimize",
    "super_kernel_optimize_options",
    "super_kernel_debug_options",
    "frozen_parameter",
    "remove_noop_ops",
    "remove_cat_ops",
    "inplace_pass",
    "input_inplace_pass",
    "pattern_fusion_pass",
    "post_grad_custom_pre_pass",
    "post_grad_custom_post_pass",
    "dump_tensor_data",
    "data_dump_stage",
    "data_dump_dir",
)

GE_MODE = TORCHAIR_GE_MODE
NPUGRAPH_EX_MODE = TORCHAIR_NPUGRAPH_EX_MODE
# Option names the user sets through the variant itself, never through options.
_SET_BY_VARIANT = ("mode",)


def validate_options(mode: str, options: Mapping[str, Any] | None) -> None:
    """Raise ValueError naming the valid options when `options` has a name or value TorchAir would reject.

    `mode` "max-autotune" takes dotted `CompilerConfig` names ("ge_config.oo_level");
    "npugraph_ex" takes the flat npugraph_ex option keys ("frozen_parameter").
    """
    if mode == GE_MODE:
        valid = [name for name in COMPILER_CONFIG_OPTIONS if name not in _SET_BY_VARIANT]
        for name, value in (options or {}).items():
            if name in _SET_BY_VARIANT:
                raise ValueError(f"'{name}' is chosen by the variant (max-autotune or npugraph_ex), not by an option")
            if name not in COMPILER_CONFIG_OPTIONS:
                raise ValueError(f"unknown TorchAir CompilerConfig option '{name}'; valid options: {', '.join(valid)}")
            _check_value(name, value, COMPILER_CONFIG_OPTIONS[name])
    elif mode == NPUGRAPH_EX_MODE:
        for name in options or {}:
            if name not in NPUGRAPH_EX_OPTIONS:
                valid = ", ".join(NPUGRAPH_EX_OPTIONS)
                raise ValueError(f"unknown npugraph_ex option '{name}'; valid options: {valid}")
    else:
        raise ValueError(f"unknown TorchAir mode '{mode}'; valid modes: {GE_MODE}, {NPUGRAPH_EX_MODE}")


def _check_value(name: str, value: Any, spec: OptionSpec) -> None:
    if spec is None:
        return
    if spec == CALLABLE:
        ok = value is None or callable(value)
    elif isinstance(spec, tuple):
        ok = any(value == allowed and type(value) is type(allowed) for allowed in spec)
    elif isinstance(spec, IntRange):
        ok = spec.accepts(value)
    else:
        ok = isinstance(value, spec) and not (spec is int and isinstance(value, bool))
    if not ok:
        expected = list(spec) if isinstance(spec, tuple) else getattr(spec, "__name__", str(spec))
        raise ValueError(f"TorchAir option '{name}' does not accept {value!r}; expected {expected}")
