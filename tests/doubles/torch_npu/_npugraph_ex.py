"""TEST DOUBLE — not torch_npu's npugraph_ex. The Dynamo backend `torch.compile(m, backend="npugraph_ex", options=...)`.

Rejects option keys the real one rejects (same message), then compiles the FX graph with aot_eager on the CPU.
"""

from torch._dynamo.backends.debugging import aot_eager

ALLOWED_OPTIONS = frozenset(
    {
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
    }
)


def npugraph_ex_backend(gm, example_inputs, options=None, **kwargs):
    import torchair._npu_backend as record

    for option in options or {}:
        if option not in ALLOWED_OPTIONS:
            raise ValueError(f"Invalid option '{option}', allowed options: {sorted(ALLOWED_OPTIONS)}")
    record.record_call(gm, example_inputs, backend="npugraph_ex", mode="npugraph_ex", options=dict(options or {}))
    return aot_eager(gm, example_inputs)
