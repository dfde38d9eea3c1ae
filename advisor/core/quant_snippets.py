"""The snippets of the int8 options (catalogue `quantized_modes`): the real API calls, calibration included.

Torch-free, like `advisor.core.snippets`. Each reproduces what the harness measured: PT2E int8 static with the X86
Inductor quantizer from `torchao`, compiled by Inductor; ONNX Runtime int8 with `onnxruntime.quantization` on the
exported `model.onnx` (static QDQ when the graph has convolutions, dynamic otherwise); OpenVINO int8 with
`openvino.convert_model` and `nncf.quantize`, saved as an IR and compiled for the CPU. Calibration loops over the
user's samples (`calibration.npz`, the file `analyze --calibration` takes) when it exists, else the example inputs.
"""

from __future__ import annotations

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


def _inputs_of(call: str) -> tuple[bool, str]:
    """Whether `call` passes the inputs positionally, and the snippet's expression for them as one flat list."""
    positional = call == POSITIONAL_CALL
    return positional, "inputs" if positional else "[*args, *kwargs.values()]"


def _numpy_imports(positional: bool) -> list[str]:
    """The imports the calibration block needs: only a positional call reads the user's .npz samples."""
    return ["import os", "", "import numpy as np"] if positional else []


def _batches(positional: bool, flat: str) -> list[str]:
    """`batches` for a converter's calibration: the user's samples (positional inputs), else the example inputs."""
    return [""] + calibration_lines() if positional else [f"batches = [{flat}]  # the example inputs"]


def _script(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def pt2e_int8_snippet(call: str = POSITIONAL_CALL) -> str:
    invocation = call.replace("model(", "quantized(", 1)
    positional = call == POSITIONAL_CALL
    export_args = "tuple(inputs)" if positional else "tuple(args), kwargs"
    calibrate = call.replace("model(", "prepared(", 1)
    return _script(
        [
            *([] if positional else [KEYWORD_NOTE]),
            *_numpy_imports(positional),
            "import torch",
            "import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq",
            "from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e",
            "",
            *(calibration_lines() + [""] if positional else []),
            "# model in eval mode; torch 2.13 ships no torch.ao.quantization.quantize_pt2e: it is in torchao",
            f"exported = torch.export.export(model, {export_args}).module()",
            "quantizer = xiq.X86InductorQuantizer()",
            "quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())  # int8 static",
            "prepared = prepare_pt2e(exported, quantizer)",
            "with torch.no_grad():",
            *(
                [
                    "    for batch in batches:  # calibration: the observers record each sample's ranges",
                    "        prepared(*batch)",
                ]
                if positional
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
    )


def ort_int8_snippet(call: str = POSITIONAL_CALL) -> str:
    positional, flat = _inputs_of(call)
    export_args = "tuple(inputs)" if positional else "tuple(args), kwargs=kwargs"
    return _script(
        [
            *_numpy_imports(positional),
            "import onnx",
            "import torch",
            "import onnxruntime as ort",
            "from onnxruntime.quantization import (",
            "    CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static,",
            ")",
            "",
            *([] if positional else [KEYWORD_NOTE]),
            "with torch.no_grad():",
            f"    onnx_program = torch.onnx.export(model, {export_args}, dynamo=True)",
            'onnx_program.save("model.onnx")',
            'names = [i.name for i in onnx.load("model.onnx").graph.input]',
            *_batches(positional, flat),
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
            f"outputs = session.run(None, {{n: t.numpy() for n, t in zip(names, {flat})}})",
        ]
    )


def openvino_int8_snippet(call: str = POSITIONAL_CALL) -> str:
    """openvino:int8: OpenVINO's conversion, NNCF post-training int8 (calibrated), the IR saved and compiled."""
    positional, flat = _inputs_of(call)
    return _script(
        [
            *_numpy_imports(positional),
            "import nncf",
            "import openvino as ov",
            "import torch",
            "",
            *([] if positional else [KEYWORD_NOTE]),
            "with torch.no_grad():  # model in eval mode; OpenVINO converts the ExportedProgram",
            "    exported = torch.export.export(model, " + ("tuple(inputs))" if positional else "tuple(args), kwargs)"),
            "    ov_model = ov.convert_model(exported)",
            *_batches(positional, flat),
            "",
            "calibration = nncf.Dataset(batches, lambda batch: [t.numpy() for t in batch])",
            "int8_model = nncf.quantize(ov_model, calibration, subset_size=len(batches))  # static int8",
            'ov.save_model(int8_model, "model.int8.xml", compress_to_fp16=False)  # the IR: .xml + .bin',
            "",
            "core = ov.Core()",
            'compiled = core.compile_model(core.read_model("model.int8.xml"), "CPU")',
            f"results = compiled([t.numpy() for t in {flat}])",
            "outputs = [results[port] for port in compiled.outputs]",
        ]
    )


def quantized_snippet(backend: str, call: str = POSITIONAL_CALL) -> str:
    """The snippet of `backend`'s int8 mode (inductor:pt2e-int8, onnxruntime:int8 or openvino:int8)."""
    if backend == "openvino":
        return openvino_int8_snippet(call)
    return pt2e_int8_snippet(call) if backend == "inductor" else ort_int8_snippet(call)
