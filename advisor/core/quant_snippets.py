"""The snippets of the int8 options (catalogue `quantized_modes`): the real API calls, calibration included.

Torch-free, like `advisor.core.snippets`. Each reproduces what the harness measured: PT2E int8 static with the X86
Inductor quantizer from `torchao`, compiled by Inductor; ONNX Runtime int8 with `onnxruntime.quantization` on the
exported `model.onnx` (static QDQ when the graph has convolutions, dynamic otherwise); OpenVINO int8 with
`openvino.convert_model` and `nncf.quantize`, saved as an IR and compiled for the CPU. Calibration loops over the
user's samples (`calibration.npz`, the file `analyze --calibration` takes) when it exists, else the example inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from advisor.core.snippets import POSITIONAL_CALL

PT2E_PACKAGE_HINT = "pip install 'npu-advisor[quant]' (torchao)"
CALIBRATION_FILE = "calibration.npz"


def calibration_lines() -> list[str]:
    """`batches`: the user's samples from an .npz (advisor.core.calibration's form: input0, input1, ... each
    [samples, *input shape]; read without pickle), or the example inputs as the advisor calibrates without one."""
    return [
        f'CALIBRATION = "{CALIBRATION_FILE}"  # your samples: input0, input1, ... each [samples, *input shape]',
        "if os.path.exists(CALIBRATION):  # `analyze --calibration` takes the same file",
        "    with np.load(CALIBRATION, allow_pickle=False) as npz:",
        '        arrays = [npz[f"input{i}"] for i in range(len(npz.files))]',
        "    batches = [[torch.from_numpy(a[s]) for a in arrays] for s in range(len(arrays[0]))]",
        "else:  # the example inputs (use a few hundred real samples)",
        "    batches = [list(inputs)]",
    ]


KEYWORD_NOTE = "# args: the positional inputs; kwargs: the keyword inputs"


@dataclass(frozen=True)
class _Inputs:
    """How the snippet calls the model (`call`), whether that passes the inputs positionally, and the snippet's
    expression for the inputs as one flat list."""

    call: str
    positional: bool
    flat: str

    @property
    def export_args(self) -> str:
        """The inputs as `torch.export.export(model, ...)` takes them."""
        return "tuple(inputs)" if self.positional else "tuple(args), kwargs"


def _inputs_of(call: str) -> _Inputs:
    positional = call == POSITIONAL_CALL
    return _Inputs(call, positional, "inputs" if positional else "[*args, *kwargs.values()]")


def _preamble(positional: bool, *imports: str) -> list[str]:
    """A snippet's top: the imports the calibration block needs (only a positional call reads the user's .npz
    samples), the quantizer's own `imports`, and for keyword inputs what `args` and `kwargs` are."""
    numpy_imports = ["import os", "", "import numpy as np"] if positional else []
    return [*numpy_imports, *imports, "", *([] if positional else [KEYWORD_NOTE])]


def _batches(positional: bool, flat: str) -> list[str]:
    """`batches` for a converter's calibration: the user's samples (positional inputs), else the example inputs."""
    return [""] + calibration_lines() if positional else [f"batches = [{flat}]  # the example inputs"]


def _pt2e_int8(inputs: _Inputs) -> list[str]:
    invocation = inputs.call.replace("model(", "quantized(", 1)
    calibrate = inputs.call.replace("model(", "prepared(", 1)
    return [
        *_preamble(
            inputs.positional,
            "import torch",
            "import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq",
            "from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e",
        ),
        *(calibration_lines() + [""] if inputs.positional else []),
        "# model in eval mode; torch 2.13 ships no torch.ao.quantization.quantize_pt2e: it is in torchao",
        f"exported = torch.export.export(model, {inputs.export_args}).module()",
        "quantizer = xiq.X86InductorQuantizer()",
        "quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())  # int8 static",
        "prepared = prepare_pt2e(exported, quantizer)",
        "with torch.no_grad():",
        *(
            [
                "    for batch in batches:  # calibration: the observers record each sample's ranges",
                "        prepared(*batch)",
            ]
            if inputs.positional
            else [f"    {calibrate}  # calibration: the example inputs (use a few hundred real samples)"]
        ),
        "quantized = convert_pt2e(prepared)",
        "# freezing packs the int8 weights for oneDNN (the PT2E X86 Inductor recipe); with torch 2.13 and",
        "# torchao 0.18 it fails on some graphs (onednn.qconv_prepack / qlinear_prepack have no fake kernel)",
        "try:",
        '    compiled = torch.compile(quantized, options={"freezing": True})',
        "    with torch.no_grad():",
        f"        outputs = {invocation.replace('quantized(', 'compiled(', 1)}  # first call compiles",
        "except Exception:  # torch._inductor.exc.InductorError: UnsupportedOperatorException ... prepack",
        "    torch._dynamo.reset()",
        '    compiled = torch.compile(quantized, options={"freezing": False})',
        "    with torch.no_grad():",
        f"        outputs = {invocation.replace('quantized(', 'compiled(', 1)}",
    ]


def _ort_int8(inputs: _Inputs) -> list[str]:
    export_args = "tuple(inputs)" if inputs.positional else "tuple(args), kwargs=kwargs"
    return [
        *_preamble(
            inputs.positional,
            "import onnx",
            "import torch",
            "import onnxruntime as ort",
            "from onnxruntime.quantization import (",
            "    CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static,",
            ")",
        ),
        "with torch.no_grad():",
        f"    onnx_program = torch.onnx.export(model, {export_args}, dynamo=True)",
        'onnx_program.save("model.onnx")',
        'names = [i.name for i in onnx.load("model.onnx").graph.input]',
        *_batches(inputs.positional, inputs.flat),
        "",
        "",
        "class Calibration(CalibrationDataReader):  # static QDQ's calibration samples",
        "    def __init__(self, batches):",
        "        self.batches = iter([{n: t.numpy() for n, t in zip(names, b)} for b in batches])",
        "",
        "    def get_next(self):",
        "        return next(self.batches, None)",
        "",
        "",
        'ops = {node.op_type for node in onnx.load("model.onnx").graph.node}',
        'if ops & {"Conv", "ConvTranspose"}:  # convolutional: static QDQ, calibrated',
        "    quantize_static(",
        '        "model.onnx", "model.int8.onnx", Calibration(batches),',
        "        quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,",
        "    )",
        "else:  # Linear / MatMul (transformer-style): dynamic, activations quantized at run time",
        '    quantize_dynamic("model.onnx", "model.int8.onnx", weight_type=QuantType.QInt8)',
        "",
        "so = ort.SessionOptions()",
        'so.add_session_config_entry("session.intra_op.allow_spinning", "0")',
        'session = ort.InferenceSession("model.int8.onnx", so, providers=["CPUExecutionProvider"])',
        f"outputs = session.run(None, {{n: t.numpy() for n, t in zip(names, {inputs.flat})}})",
    ]


def _openvino_int8(inputs: _Inputs) -> list[str]:
    """openvino:int8: OpenVINO's conversion, NNCF post-training int8 (calibrated), the IR saved and compiled."""
    return [
        *_preamble(inputs.positional, "import nncf", "import openvino as ov", "import torch"),
        "with torch.no_grad():  # model in eval mode; OpenVINO converts the ExportedProgram",
        f"    exported = torch.export.export(model, {inputs.export_args})",
        "    ov_model = ov.convert_model(exported)",
        *_batches(inputs.positional, inputs.flat),
        "",
        "calibration = nncf.Dataset(batches, lambda batch: [t.numpy() for t in batch])",
        "int8_model = nncf.quantize(ov_model, calibration, subset_size=len(batches))  # static int8",
        'ov.save_model(int8_model, "model.int8.xml", compress_to_fp16=False)  # the IR: .xml + .bin',
        "",
        "core = ov.Core()",
        'compiled = core.compile_model(core.read_model("model.int8.xml"), "CPU")',
        f"results = compiled([t.numpy() for t in {inputs.flat}])",
        "outputs = [results[port] for port in compiled.outputs]",
    ]


_INT8_LINES: dict[str, Callable[[_Inputs], list[str]]] = {
    "inductor": _pt2e_int8,
    "onnxruntime": _ort_int8,
    "openvino": _openvino_int8,
}


def quantized_snippet(backend: str, call: str = POSITIONAL_CALL) -> str:
    """The snippet of `backend`'s int8 mode (inductor:pt2e-int8, onnxruntime:int8 or openvino:int8)."""
    return "\n".join(_INT8_LINES[backend](_inputs_of(call))) + "\n"


def pt2e_int8_snippet(call: str = POSITIONAL_CALL) -> str:
    return quantized_snippet("inductor", call)


def ort_int8_snippet(call: str = POSITIONAL_CALL) -> str:
    return quantized_snippet("onnxruntime", call)


def openvino_int8_snippet(call: str = POSITIONAL_CALL) -> str:
    return quantized_snippet("openvino", call)
