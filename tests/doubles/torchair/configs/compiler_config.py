"""TEST DOUBLE — not torchair. `CompilerConfig` with the real option tree (torchair.md §2), written out by hand.

Kept independent of advisor/harness/backends/torchair_options.py on purpose: a test checks the two transcriptions agree.
"""

from torchair.configs._option_base import (
    CallableValue,
    FileValue,
    IntRangeValue,
    MustExistedPathValue,
    NpuBaseConfig,
    OptionValue,
)

_BOOL = [True, False]


def _flag(default):
    return OptionValue(default, _BOOL)


class _GraphDumpConfig(NpuBaseConfig):
    def __init__(self):
        self.type = OptionValue(None, [None, "txt", "pbtxt", "py"])
        self.path = OptionValue(None)
        super().__init__()


class _DataDumpConfig(NpuBaseConfig):
    def __init__(self):
        self.type = OptionValue(None, [None, "npy"])
        self.path = OptionValue(None)
        self.filter = CallableValue(None)
        super().__init__()


class _FxSummaryConfig(NpuBaseConfig):
    def __init__(self):
        self.type = OptionValue(None, [None, "csv"])
        self.skip_compile = _flag(True)
        super().__init__()


class _DebugAclGraphConfig(NpuBaseConfig):
    def __init__(self):
        self.disable_reinplace_inplaceable_ops_pass = _flag(False)
        self.disable_reinplace_input_mutated_ops_pass = _flag(False)
        self.disable_mempool_reuse_in_same_fx = _flag(False)
        self.enable_output_clone = _flag(False)
        self.static_capture_size_limit = IntRangeValue(64, 1, 2**63 - 1)
        self.clone_input = _flag(True)
        self.remove_cat_ops = _flag(True)
        super().__init__()


class _DebugConfig(NpuBaseConfig):
    def __init__(self):
        self.graph_dump = _GraphDumpConfig()
        self.data_dump = _DataDumpConfig()
        self.fx_summary = _FxSummaryConfig()
        self.run_eagerly = _flag(False)
        self.deadlock_check = _flag(False)
        self.aclgraph = _DebugAclGraphConfig()
        super().__init__()


class _AoeConfig(NpuBaseConfig):
    def __init__(self):
        self.aoe_mode = OptionValue(None, [None, "2"])
        self.work_path = MustExistedPathValue("./")
        self.aoe_config_file = FileValue(None)
        super().__init__()


class _ExportExperimentalConfig(NpuBaseConfig):
    def __init__(self):
        self.enable_record_nn_module_stack = _flag(False)
        self.auto_atc_config_generated = _flag(False)
        self.enable_lite_export = _flag(False)
        super().__init__()


class _ExportConfig(NpuBaseConfig):
    def __init__(self):
        self.export_mode = _flag(False)
        self.export_path_dir = MustExistedPathValue("./")
        self.export_name = OptionValue(None)  # plain attributes in torchair
        self.weight_name = OptionValue(None)
        self.inputs_name = OptionValue(None)
        self.experimental = _ExportExperimentalConfig()
        super().__init__()


class _DumpConfig(NpuBaseConfig):
    def __init__(self):
        self.enable_dump = _flag(False)
        self.dump_path = OptionValue("./")
        self.dump_mode = OptionValue("all", ["all", "input", "output"])
        self.quant_dumpable = _flag(False)
        self.dump_step = OptionValue(None)
        self.dump_layer = OptionValue(None)
        self.dump_data = OptionValue("tensor", ["tensor", "stats"])
        self.dump_config_path = OptionValue(None)
        self.data_dump_stage = OptionValue("optimized", ["optimized", "original"])
        super().__init__()


class _FusionConfig(NpuBaseConfig):
    def __init__(self):
        self.fusion_switch_file = FileValue(None)
        super().__init__()


class _ExperimentalAclGraphConfig(NpuBaseConfig):
    def __init__(self):
        self._aclnn_static_shape_kernel = OptionValue(None)
        self._aclnn_static_shape_kernel_build_dir = OptionValue(None)
        self._aclnn_static_shape_kernel_sym_value_range = OptionValue(None)
        self._aclnn_static_shape_kernel_sym_index = OptionValue(None)
        self._super_kernel_optimize = OptionValue(None)
        self._super_kernel_optimize_options = OptionValue(None)
        self._super_kernel_debug_options = OptionValue(None)
        super().__init__()


class _ExperimentalConfig(NpuBaseConfig):
    def __init__(self):
        self.cc_parallel_enable = _flag(False)
        self.keep_inference_input_mutations = _flag(True)
        self.memory_efficiency = _flag(False)
        self.frozen_parameter = _flag(False)
        self.static_model_ops_lower_limit = IntRangeValue(None, -1, 2**63 - 1)
        self.jit_compile = OptionValue("auto", ["auto"])
        self.npu_fx_pass = _flag(False)
        self.aot_config_enable_joint_graph = _flag(False)
        self.aot_config_output_loss_index = OptionValue(0)
        self.topology_sorting_strategy = OptionValue("DFS", ["DFS", "BFS", "RDFS", "StableRDFS"])
        self.enable_ref_data = _flag(False)
        self.enable_view_optimize = _flag(True)
        self.remove_noop_ops = _flag(True)
        self.tiling_schedule_optimize = _flag(False)
        self.pattern_fusion_pass = _flag(True)
        self.aclgraph = _ExperimentalAclGraphConfig()
        super().__init__()


class _InferenceConfig(NpuBaseConfig):
    def __init__(self):
        self.dynamic_gears_merge_policy = OptionValue("zip", ["zip", "product"])
        super().__init__()


class _GEConfig(NpuBaseConfig):
    def __init__(self):
        self.enable_single_stream = _flag(False)
        self.oo_level = OptionValue("O3", ["O3", "O1"])
        self.oo_constant_folding = OptionValue(None, [None, True, False])
        self.oo_dead_code_elimination = OptionValue(None, [None, True, False])
        self.export_compile_stat = OptionValue("2", ["2", "0", "1"])
        self.aicore_num = OptionValue(None)
        self.optimization_switch = OptionValue(None)
        self.multistream_parallel_mode = OptionValue(None)
        super().__init__()


class _AclGraphConfig(NpuBaseConfig):
    def __init__(self):
        self.use_custom_pool = OptionValue(None)
        super().__init__()


class CompilerConfig(NpuBaseConfig):
    """TEST DOUBLE of torchair.CompilerConfig."""

    def __init__(self):
        self.mode = OptionValue("max-autotune", ["max-autotune", "reduce-overhead", "npugraph_ex"])
        self.post_grad_custom_pre_pass = CallableValue(None)
        self.post_grad_custom_post_pass = CallableValue(None)
        self.debug = _DebugConfig()
        self.aoe_config = _AoeConfig()
        self.export = _ExportConfig()
        self.dump_config = _DumpConfig()
        self.fusion_config = _FusionConfig()
        self.experimental_config = _ExperimentalConfig()
        self.inference_config = _InferenceConfig()
        self.ge_config = _GEConfig()
        self.aclgraph_config = _AclGraphConfig()
        super().__init__()
