"""TEST DOUBLE — not torchair. `get_npu_backend` returns a Dynamo backend that compiles with aot_eager and records."""

import functools

import torch
from torch._dynamo.backends.debugging import aot_eager

_CALLS = []


def backend_calls():
    """One dict per graph the backends compiled: backend, mode, options (dotted names), input shapes, node count."""
    return list(_CALLS)


def record_call(gm, example_inputs, *, backend, mode, options):
    _CALLS.append(
        {
            "backend": backend,
            "mode": mode,
            "options": options,
            "input_shapes": _placeholder_shapes(gm),
            "call_function_nodes": sum(1 for n in gm.graph.nodes if n.op == "call_function"),
            "grad_enabled": torch.is_grad_enabled(),
        }
    )


def _placeholder_shapes(gm):
    """Shapes as Dynamo traced them (symbolic dims print as their symbol, e.g. "s77")."""
    shapes = []
    for node in gm.graph.nodes:
        value = node.meta.get("example_value") if node.op == "placeholder" else None
        if isinstance(value, torch.Tensor):
            shapes.append([str(d) for d in value.shape])
    return shapes


def _npu_backend(gm, example_inputs, compiler_config=None, decompositions={}, **kwargs):  # noqa: B006 - real signature
    from torch_npu._npugraph_ex import ALLOWED_OPTIONS

    from torchair.configs.compiler_config import CompilerConfig

    config = compiler_config if compiler_config is not None else CompilerConfig()
    for option in kwargs.get("options") or {}:
        if option not in ALLOWED_OPTIONS:
            raise ValueError(f"Invalid option '{option}', allowed options: {sorted(ALLOWED_OPTIONS)}")
    record_call(gm, example_inputs, backend="torchair", mode=config.mode.value, options=config.changed_options())
    if config.debug.run_eagerly:
        return gm.forward
    if torch.is_grad_enabled():  # training: like the real one, aot_autograd with get_compiler for both graphs
        from torch._dynamo.backends.common import aot_autograd

        return aot_autograd(
            fw_compiler=_recording_compiler("forward", config), bw_compiler=_recording_compiler("backward", config)
        )(gm, example_inputs)
    return aot_eager(gm, example_inputs)


def get_npu_backend(*, compiler_config=None, custom_decompositions={}):  # noqa: B006 - real signature
    from torchair.configs.compiler_config import CompilerConfig

    if compiler_config is None:
        compiler_config = CompilerConfig()
    return functools.partial(_npu_backend, compiler_config=compiler_config, decompositions=custom_decompositions)


def get_compiler(compiler_config=None):
    """An FX compiler for aot_autograd (the double returns the graph's own forward)."""
    return lambda gm, example_inputs: gm.forward


_FX_COMPILES = []


def fx_compiles():
    """DOUBLE ONLY: one dict per graph aot_autograd handed to the compiler in training: kind, node count."""
    return list(_FX_COMPILES)


def _recording_compiler(kind, config):
    from torch._functorch.aot_autograd import make_boxed_func

    compiler = get_compiler(config)

    def compile_graph(gm, example_inputs):
        _FX_COMPILES.append(
            {"kind": kind, "call_function_nodes": sum(1 for n in gm.graph.nodes if n.op == "call_function")}
        )
        return make_boxed_func(compiler(gm, example_inputs))

    return compile_graph
