"""`openvino:int8`: OpenVINO's own conversion, NNCF post-training int8, an IR the OpenVINO runtime runs.

`openvino.convert_model(torch.export.export(module, inputs))` converts the float model, `nncf.quantize` (static int8,
calibrated on the user's calibration file or the example inputs, as the other int8 options) quantizes it, and
`openvino.Core().compile_model(model, "CPU")` compiles it. No Dynamo is involved: the IR (`model.int8.xml` +
`.bin`) is an offline artifact a deployment runs without Python, so it is an export path like ONNX.

Compile time: cold = conversion + calibration + quantization + saving the IR + `compile_model`; warm = what a
deployment that ships the IR does: `Core().read_model` of the saved IR + `compile_model` in a new process (no
conversion, no quantization), reused only when its fingerprint (versions, inputs, weights) matches.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from advisor.harness.backends import saved_export
from advisor.harness.backends.base import CompileRequest, UnsupportedRequest

OPENVINO_PACKAGE_HINT = "pip install 'npu-advisor[openvino]'"
_REQUIRED = ("openvino", "nncf")
_IR_FILE = "model.int8.xml"
_FLOAT_IR_FILE = "model.xml"  # the float conversion, saved too: its size is the int8 IR's comparison
_FINGERPRINT_FILE = "model.int8.fingerprint"


def missing_packages() -> str | None:
    """Why openvino:int8 cannot run here (the packages it lacks and what to install), or None."""
    missing = [name for name in _REQUIRED if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"openvino:int8 needs {' and '.join(missing)}, not installed ({OPENVINO_PACKAGE_HINT})"


def check(request: CompileRequest) -> None:
    """UnsupportedRequest for what openvino:int8 cannot do: training, options, missing packages."""
    if request.workload != "inference":
        raise UnsupportedRequest("openvino:int8 is measured for inference only")
    if request.options:
        raise UnsupportedRequest(f"openvino:int8 takes no options here, got {sorted(request.options)}")
    missing = missing_packages()
    if missing:
        raise UnsupportedRequest(missing)


def compile_int8(module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
    """The compiled int8 IR as a callable on torch tensors, with `compile_breakdown` and `serialized_bytes`
    (the IR's .xml + .bin)."""
    check(request)
    import openvino

    from advisor.harness.calibration_samples import calibration_samples

    samples, source = calibration_samples(request.calibration, example_inputs)  # refused before any conversion
    ir_dir = request.cache_dir or tempfile.mkdtemp(prefix="npu-advisor-openvino-")
    os.makedirs(ir_dir, exist_ok=True)
    xml = os.path.join(ir_dir, _IR_FILE)
    fingerprint = _fingerprint(module, example_inputs, request)
    saved = saved_export.SavedExport(ir_dir, _IR_FILE, _FINGERPRINT_FILE)
    cached = saved.matches(fingerprint)
    core = openvino.Core()
    steps: dict[str, Any] = {"cached": cached, "quantization": "NNCF post-training static int8"}
    started = time.perf_counter()
    if cached:
        model = core.read_model(xml)
        steps["read_s"] = time.perf_counter() - started
        steps["calibration"] = "none (the saved int8 IR is reused)"
    else:
        model = _quantized(module, example_inputs, samples, steps, os.path.join(ir_dir, _FLOAT_IR_FILE))
        openvino.save_model(model, xml, compress_to_fp16=False)
        saved.record(fingerprint)
        steps["calibration"] = source
    compiling = time.perf_counter()
    compiled = core.compile_model(model, "CPU")
    steps["compile_model_s"] = time.perf_counter() - compiling
    runner = _IrCallable(compiled)
    runner.compile_breakdown = steps
    runner.serialized_bytes = _ir_bytes(xml)
    steps.update(fp32_bytes=_ir_bytes(os.path.join(ir_dir, _FLOAT_IR_FILE)), int8_bytes=runner.serialized_bytes)
    return runner


def _ir_bytes(xml: str) -> int:
    """An IR's deployed size: its .xml (the graph) + .bin (the weights)."""
    return sum(os.path.getsize(p) for p in (xml, xml[: -len(".xml")] + ".bin") if os.path.isfile(p))


def _quantized(
    module: Any, example_inputs: Sequence[Any], samples: list[tuple[Any, ...]], steps: dict, float_xml: str
) -> Any:
    """convert_model (the float IR saved to `float_xml`) then nncf.quantize on `samples`; the seconds of each go
    into `steps`."""
    import nncf
    import openvino
    import torch

    started = time.perf_counter()
    with torch.no_grad():  # through torch.export: a loaded ExportedProgram's module cannot be TorchScript-traced
        model = openvino.convert_model(torch.export.export(module, tuple(example_inputs)))
    openvino.save_model(model, float_xml, compress_to_fp16=False)
    converted = time.perf_counter()
    dataset = nncf.Dataset(samples, lambda sample: [t.detach().cpu().numpy() for t in sample])
    quantized = nncf.quantize(model, dataset, subset_size=len(samples))
    steps.update(convert_s=converted - started, quantize_s=time.perf_counter() - converted)
    return quantized


class _IrCallable:
    """Calls a compiled OpenVINO model with torch tensors and returns torch tensors (one, or a tuple)."""

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.compile_breakdown: dict[str, Any] = {}
        self.serialized_bytes: int | None = None

    def __call__(self, *inputs: Any) -> Any:
        import torch

        results = self.request.infer([t.detach().cpu().numpy() for t in inputs])
        outputs = [torch.from_numpy(results[port].copy()) for port in self.compiled.outputs]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _fingerprint(module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> str:
    """What the saved IR was quantized from: the versions and the calibration besides the model and inputs."""
    import nncf
    import openvino

    facts = {"openvino": openvino.__version__, "nncf": nncf.__version__, "calibration": request.calibration}
    return saved_export.fingerprint(module, example_inputs, facts)
