"""The code a user pastes to get one backend variant: one place for every snippet's text.

Torch-free, so the decision engine (and through it the API server) writes the same snippet the harness
measured, without importing the harness. The backend classes delegate their `snippet()` here after checking
the options; only real API names appear (tests/harness/test_backends.py, tests/harness/test_torchair_backend.py).

`call` is how the snippet calls the model: `model(*inputs)`, or `model(*args, **kwargs)` for a model that takes
keyword inputs (an exported Hugging Face model's `attention_mask=`); see `call_for`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from advisor.core.catalogue import (
    BACKENDS,
    TORCHAIR_EXPORT_MODE,
    TORCHAIR_GE_MODE,
    TORCHAIR_NPUGRAPH_EX_MODE,
)

POSITIONAL_CALL = "model(*inputs)"
KEYWORD_CALL = "model(*args, **kwargs)"
INDUCTOR_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
TORCHAIR_SNIPPET_CACHE_DIR = "./torchair_cache"  # a place of the user's, never the measurement's temp dir
# aot_autograd: without it any nn.Conv2d fails; f32: on AVX512-BF16 CPUs OpenVINO defaults to bf16.
OPENVINO_DEFAULT_OPTIONS: dict[str, Any] = {"aot_autograd": True, "config": {"INFERENCE_PRECISION_HINT": "f32"}}
NO_BACKEND = "# No backend qualifies: see why_not for each option.\n"


def keyword_inputs_of(inspection: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The names of the inputs an inspected model takes by keyword (its `inputs[*].keyword`)."""
    return tuple(str(spec.get("name")) for spec in (inspection or {}).get("inputs") or () if spec.get("keyword"))


def call_for(keyword_inputs: Iterable[str] = ()) -> str:
    """How a snippet calls the model: with `*args, **kwargs` when it takes any input by keyword."""
    return KEYWORD_CALL if any(True for _ in keyword_inputs) else POSITIONAL_CALL


def _keyword_note(call: str) -> list[str]:
    if call == POSITIONAL_CALL:
        return []
    return ["# args: the positional inputs; kwargs: the keyword inputs, e.g. {'attention_mask': mask}"]


def training_step_lines(call: str = POSITIONAL_CALL) -> list[str]:
    """The training loop a backend snippet ends with (`model` is the compiled model)."""
    batch = "inputs" if call == POSITIONAL_CALL else "(args, kwargs)"
    return [
        "optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)  # or torch.optim.AdamW",
        f"for {batch}, targets in batches:",
        f"    loss = loss_fn({call}, targets)  # the first step compiles forward and backward",
        "    loss.backward()",
        "    optimizer.step()",
        "    optimizer.zero_grad(set_to_none=True)",
    ]


def _with_call(lines: list[str], workload: str, call: str, comment: str = "  # first call compiles") -> str:
    if workload == "training":
        lines = [*lines, *_keyword_note(call), *training_step_lines(call)]
    else:
        lines = [*lines, *_keyword_note(call), "with torch.no_grad():", f"    output = {call}{comment}"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------- per backend
def eager_snippet(workload: str = "inference", call: str = POSITIONAL_CALL) -> str:
    return _with_call(["# eager PyTorch: no compilation"], workload, call, comment="")


def inductor_snippet(
    mode: str, options: Mapping[str, Any] | None = None, workload: str = "inference", call: str = POSITIONAL_CALL
) -> str:
    if options:
        compile_args = f"options={dict(options)!r}"
    elif mode != "default":
        compile_args = f'mode="{mode}"'
    else:
        compile_args = ""
    lines = [
        "import os",
        "# Keep compiled kernels between runs (set before the first compile):",
        f'os.environ.setdefault("{INDUCTOR_CACHE_ENV}", "/path/to/inductor-cache")',
        "import torch",
        "",
        f"model = torch.compile(model{', ' + compile_args if compile_args else ''})",
    ]
    return _with_call(lines, workload, call)


def openvino_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's options over OPENVINO_DEFAULT_OPTIONS (the `config` dict merged key by key)."""
    merged = {**OPENVINO_DEFAULT_OPTIONS, **(options or {})}
    merged["config"] = {**OPENVINO_DEFAULT_OPTIONS["config"], **(options or {}).get("config", {})}
    return merged


def openvino_snippet(options: Mapping[str, Any] | None = None, call: str = POSITIONAL_CALL) -> str:
    lines = [
        "import torch",
        "import openvino.torch  # registers the openvino backend; changes Dynamo config process-wide",
        "",
        f'model = torch.compile(model, backend="openvino", options={openvino_options(options)!r})',
    ]
    return _with_call(lines, "inference", call)


def tensorrt_snippet(options: Mapping[str, Any] | None = None, call: str = POSITIONAL_CALL) -> str:
    extra = f", options={dict(options)!r}" if options else ""
    lines = [
        "import torch",
        "import torch_tensorrt  # registers the tensorrt backend",
        "",
        f'model = torch.compile(model, backend="tensorrt"{extra})',
    ]
    return _with_call(lines, "inference", call, comment="  # first call builds the TensorRT engine")


def onnxruntime_snippet() -> str:
    """What the measurement row shows: the export the harness timed, and ATC for an Ascend node."""
    return (
        "\n".join(
            [
                "import torch",
                "import onnxruntime as ort",
                "",
                "with torch.no_grad():",
                "    onnx_program = torch.onnx.export(model, tuple(inputs), dynamo=True)",
                'onnx_program.save("model.onnx")',
                "",
                "so = ort.SessionOptions()",
                'so.add_session_config_entry("session.intra_op.allow_spinning", "0")',
                'session = ort.InferenceSession("model.onnx", so, providers=["CPUExecutionProvider"])',
                "feeds = {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)}",
                "outputs = session.run(None, feeds)",
                "",
                "# On an Ascend NPU node, convert the same file offline with ATC instead:",
                "#   atc --model=model.onnx --framework=5 --output=model --soc_version=<SoC from npu-smi info>",
                '# (TorchAir\'s own export: torchair.dynamo_export(*inputs, model=model, export_path="export_file"),',
                "#  then atc --model=export_file/export.air --framework=1 ...)",
            ]
        )
        + "\n"
    )


def torchair_literal(value: Any) -> str:
    """An option value as Python source; a callable becomes its name (the user's own pass)."""
    if callable(value):
        return f"{getattr(value, '__name__', 'my_pass')}  # your callable"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {torchair_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def torchair_snippet(
    mode: str,
    options: Mapping[str, Any] | None = None,
    workload: str = "inference",
    *,
    dynamic: bool = False,
    dim_gears: Mapping[int, Mapping[int, list[int]]] | None = None,
    cache: bool = False,
    call: str = POSITIONAL_CALL,
) -> str:
    """GE (`max-autotune`) or `npugraph_ex`; `cache` writes torchair.inference.cache_compile (GE inference).
    The options are not checked here: the harness checks them against TorchAir's real option names."""
    options = options or {}
    if mode == TORCHAIR_NPUGRAPH_EX_MODE:
        extra = f", options={torchair_literal(options)}" if options else ""
        lines = [
            "import torch",
            "import torch_npu  # registers the npugraph_ex backend",
            "",
            f'model = torch.compile(model, backend="npugraph_ex"{extra}, dynamic={dynamic})',
        ]
        return _with_call(lines, workload, call)
    if mode != TORCHAIR_GE_MODE:
        raise ValueError(
            f"unknown TorchAir mode '{mode}'; valid modes: {TORCHAIR_GE_MODE}, {TORCHAIR_NPUGRAPH_EX_MODE}"
        )
    lines = [
        "import torch",
        "import torch_npu",
        "import torchair",
        "from torchair import CompilerConfig",
        "",
        "config = CompilerConfig()",
        f'config.mode = "{TORCHAIR_GE_MODE}"',
    ]
    lines += [f"config.{name} = {torchair_literal(value)}" for name, value in options.items()]
    for index, dims in (dim_gears or {}).items():
        lines.append(f"torchair.inference.set_dim_gears(inputs[{index}], dim_gears={dims!r})")
    if cache and workload == "inference":
        lines += [
            "# Compile once; later processes load the compiled graph from cache_dir (skips guards: a recompile",
            "# invalidates the cache; keep the same CANN version). Pick a directory that outlives the process.",
            "model.forward = torchair.inference.cache_compile(model.forward, config=config, "
            f"dynamic={dynamic}, cache_dir={TORCHAIR_SNIPPET_CACHE_DIR!r})",
        ]
    else:
        lines += [
            "npu_backend = torchair.get_npu_backend(compiler_config=config)",
            f"model = torch.compile(model, backend=npu_backend, dynamic={dynamic})",
        ]
    return _with_call(lines, workload, call)


# ------------------------------------------------------------------------------------------- dispatch
def snippet(
    backend: str,
    mode: str,
    options: Mapping[str, Any] | None = None,
    workload: str = "inference",
    call: str = POSITIONAL_CALL,
) -> str:
    """The snippet a built-in backend's variant measures; KeyError for a backend the catalogue does not know,
    ValueError for a TorchAir mode it does not have."""
    if backend not in BACKENDS:
        raise KeyError(f"no snippet for unknown backend '{backend}'")
    if mode in BACKENDS[backend].quantized_modes:  # int8: the quantization calls, calibration included
        from advisor.core import quant_snippets

        return quant_snippets.quantized_snippet(backend, call)
    if backend == "eager":
        return eager_snippet(workload, call)
    if backend == "inductor":
        return inductor_snippet(mode, options, workload, call)
    if backend == "torchair":
        return torchair_snippet(mode, options, workload, call=call)
    if backend == "onnxruntime":
        return onnxruntime_snippet()  # ORT feeds inputs by name: the same for keyword inputs
    if backend == "openvino":
        return openvino_snippet(options, call)
    return tensorrt_snippet(options, call)


def recommendation_snippet(backend: str, mode: str, workload: str = "inference", call: str = POSITIONAL_CALL) -> str:
    """What a recommendation shows for (backend, mode): the deployment path for the export options, the
    measured variant's snippet otherwise; KeyError / ValueError as `snippet` for what it cannot write."""
    if mode == TORCHAIR_EXPORT_MODE:
        return TORCHAIR_EXPORT_SNIPPET
    if backend in BACKENDS and mode in BACKENDS[backend].quantized_modes:
        return snippet(backend, mode, None, workload, call)
    if backend == "onnxruntime":
        return ONNX_SNIPPET if call == POSITIONAL_CALL else ONNX_KEYWORD_SNIPPET
    return snippet(backend, mode, None, workload, call)


def fallback_snippet(backend: str, mode: str) -> str:
    """What a recommendation shows when `recommendation_snippet` cannot write one and the row has none: a
    backend the catalogue does not know (one a test or a plugin adds), or a TorchAir mode it does not have."""
    if backend == "torchair":
        if mode == TORCHAIR_NPUGRAPH_EX_MODE:
            return (
                "import torch\nimport torch_npu  # registers the npugraph_ex backend\n\n"
                'model = torch.compile(model, backend="npugraph_ex", dynamic=False)\n'
            )
        return (
            "import torch\nimport torch_npu\nimport torchair\n\nconfig = torchair.CompilerConfig()\n"
            f'config.mode = "{mode}"\nnpu_backend = torchair.get_npu_backend(compiler_config=config)\n'
            "model = torch.compile(model, backend=npu_backend, dynamic=False)\n"
        )
    mode_arg = "" if mode == "default" else f', mode="{mode}"'
    return f'import torch\n\nmodel = torch.compile(model, backend="{backend}"{mode_arg})\n'


TORCHAIR_EXPORT_SNIPPET = """import torch
import torch_npu  # must come before torchair
import torchair

config = torchair.CompilerConfig()
# Writes export_file/model.air (one whole graph: dynamo_export traces with fullgraph=True)
torchair.dynamo_export(*inputs, model=model, export_path="export_file", export_name="model", dynamic=False,
                       config=config)
# Then, on a machine with CANN, build the offline model for your SoC (see `npu-smi info`):
#   atc --model=export_file/model.air --framework=1 --output=model --soc_version=<your SoC, e.g. Ascend910B>
"""

ONNX_SNIPPET = """import torch
import onnxruntime as ort

onnx_program = torch.onnx.export(model, tuple(inputs), dynamo=True)
onnx_program.save("model.onnx")

session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])  # or CUDAExecutionProvider
names = [i.name for i in session.get_inputs()]
outputs = session.run(None, {name: t.numpy() for name, t in zip(names, inputs)})
"""

# The same for a model with keyword inputs: the exported graph takes the positional inputs first, then the
# keyword ones in the order they were passed to the export.
ONNX_KEYWORD_SNIPPET = """import torch
import onnxruntime as ort

# args: the positional inputs; kwargs: the keyword inputs, e.g. {'attention_mask': mask}
onnx_program = torch.onnx.export(model, tuple(args), kwargs=kwargs, dynamo=True)
onnx_program.save("model.onnx")

session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])  # or CUDAExecutionProvider
names = [i.name for i in session.get_inputs()]
outputs = session.run(None, {name: t.numpy() for name, t in zip(names, [*args, *kwargs.values()])})
"""
