"""ONNX export + ONNX Runtime: the offline-export path on CPU/GPU nodes.

The analogue of TorchAir's `torchair.dynamo_export` -> ATC path on NPU nodes: the same ONNX file can be turned
into an offline `.om` model with `atc --framework=5`. (Named `ort` so it does not shadow the `onnxruntime` package.)

Compile time, as a user waits for it:
- cold (`compile_s_cold`): `torch.onnx.export(..., dynamo=True)` + saving `model.onnx` + creating the
  `InferenceSession` (graph optimisation) + the first run's overhead. The export dominates (seconds, even for
  small models); the session takes milliseconds.
- warm (`compile_s_warm`): a new process creates the session from the saved `model.onnx` (no export), as a
  deployment that ships the .onnx file does.
`compile()` does the whole export eagerly and puts the parts on the returned callable as `compile_breakdown`
({"export_s": export + save, "session_s": session creation, "cached": whether the file was reused}).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from advisor.core import catalogue
from advisor.harness.backends import saved_export
from advisor.harness.backends.base import Backend, CompileRequest, UnsupportedRequest

_REQUIRED_PACKAGES = catalogue.info("onnxruntime").packages
_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
_MODEL_FILE = "model.onnx"
_INT8_FILE = "model.int8.onnx"
_FINGERPRINT_FILE = "model.onnx.fingerprint"


class OnnxRuntimeBackend(Backend, catalogue_name="onnxruntime"):
    """Compile time (an export backend: everything happens in `compile()`, before the first call):
    `compile_s_cold` = ONNX export (`torch.onnx.export(dynamo=True)`) + saving model.onnx + creating the
    InferenceSession + the first run's overhead; `compile_s_warm` = creating the session from the saved
    model.onnx in a new process + the first run's overhead. `compile_breakdown` gives export_s and session_s."""

    def available(self, device: str) -> tuple[bool, str]:
        if device not in _PROVIDERS:
            return False, f"ONNX Runtime is measured on cpu or cuda here, not on {device} (NPU nodes use atc)"
        missing = [name for name in _REQUIRED_PACKAGES if importlib.util.find_spec(name) is None]
        if missing:
            return False, f"not installed: {', '.join(missing)} (pip install 'npu-advisor[export]')"
        if device == "cuda":
            import onnxruntime

            if _PROVIDERS["cuda"] not in onnxruntime.get_available_providers():
                return False, "this onnxruntime build has no CUDAExecutionProvider (install onnxruntime-gpu)"
        return True, ""

    def compile(self, module: Any, example_inputs: Sequence[Any], request: CompileRequest) -> Callable:
        self.check_request(request)
        if request.workload != "inference":
            raise UnsupportedRequest("the ONNX Runtime backend measures inference only")
        if request.options:
            raise UnsupportedRequest(f"onnxruntime takes no options here, got {sorted(request.options)}")
        import onnxruntime
        import torch

        onnx_dir = request.cache_dir or tempfile.mkdtemp(prefix="npu-advisor-onnx-")
        os.makedirs(onnx_dir, exist_ok=True)
        path = os.path.join(onnx_dir, _MODEL_FILE)
        dynamic = _exported_dynamic_dims(module, example_inputs)
        if dynamic is None and request.dynamic:
            dynamic = _batch_dynamic(example_inputs)
        fingerprint = _fingerprint(module, example_inputs, request, dynamic)
        saved = saved_export.SavedExport(onnx_dir, _MODEL_FILE, _FINGERPRINT_FILE)
        cached = saved.matches(fingerprint)
        started = time.perf_counter()
        if not cached:
            with torch.no_grad():
                program = torch.onnx.export(module, tuple(example_inputs), dynamo=True, dynamic_shapes=dynamic)
            program.save(path)
            saved.record(fingerprint)
        exported = time.perf_counter()
        quantized: dict[str, Any] = {}
        if request.mode == catalogue.ORT_INT8_MODE:  # onnxruntime.quantization on the float export
            from advisor.harness.backends.quantize import ort_int8

            int8_path = os.path.join(onnx_dir, _INT8_FILE)
            if not (cached and os.path.isfile(int8_path)):
                quantized = ort_int8(path, int8_path, example_inputs, request.calibration)
            path = int8_path
            exported = time.perf_counter()
        options = onnxruntime.SessionOptions()
        # Spinning intra-op threads slow down everything else in the process (e.g. interleaved eager runs).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(path, options, providers=[_PROVIDERS[request.device]])
        runner = _SessionCallable(session)
        runner.serialized_bytes = sum(  # the file a deployment ships (and its external weights, when saved apart)
            os.path.getsize(p) for p in (path, path + ".data") if os.path.isfile(p)
        )
        runner.compile_breakdown = {
            "export_s": 0.0 if cached else exported - started - quantized.get("quantize_s", 0.0),
            "session_s": time.perf_counter() - exported,
            "cached": cached,
            # the ONNX file's dynamic axes: ORT runs it at any size of these, and only of these
            "dynamic_axes": _describe_dynamic(dynamic, example_inputs) or "none (fixed shapes)",
            **quantized,  # int8: quantize_s, quantization (static QDQ | dynamic), fp32_bytes, int8_bytes
        }
        return runner


def prepare_exporter() -> None:
    """In the zygote of a job that measures ONNX Runtime: the exporter's once-per-process setup - importing
    onnxscript's torch library and building the registry of its functions (each traced from its source), ~1 s of
    CPU on 2 cores that each exporting child otherwise spent inside its cold compile. Like Inductor's setup
    (advisor.harness.inductor_setup) it is the process's cost, not the model's. Without the exporter installed, or on
    a torch whose exporter has another layout, nothing is prepared and each child pays it, as before."""
    if importlib.util.find_spec("onnxscript") is None:
        return
    try:
        from torch.onnx._internal.exporter import _registration
    except ImportError:
        return
    _registration.ONNXRegistry.from_torchlib()


class _SessionCallable:
    """Calls an ORT session with torch tensors and returns torch tensors (one, or a tuple)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.input_names = [i.name for i in session.get_inputs()]
        self.compile_breakdown: dict[str, Any] = {}
        self.serialized_bytes: int | None = None

    def __call__(self, *inputs: Any) -> Any:
        import torch

        feeds = {name: tensor.detach().cpu().numpy() for name, tensor in zip(self.input_names, inputs, strict=False)}
        outputs = [torch.from_numpy(array) for array in self.session.run(None, feeds)]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _fingerprint(module: Any, example_inputs: Sequence[Any], request: CompileRequest, dynamic: Any = None) -> str:
    """What model.onnx is exported from: onnxruntime's version, the request's fields and dynamic axes besides the
    model and inputs (saved_export.fingerprint)."""
    import onnxruntime

    facts = {
        "onnxruntime": onnxruntime.__version__,
        "dynamic": request.dynamic,
        "dynamic_axes": _describe_dynamic(dynamic, example_inputs),
        "device": request.device,
        **({"mode": request.mode} if request.mode != "default" else {}),
    }
    return saved_export.fingerprint(module, example_inputs, facts)


def _batch_dynamic(example_inputs: Sequence[Any]) -> tuple:
    from torch.export import Dim

    return tuple({0: Dim.AUTO} if getattr(t, "dim", lambda: 0)() > 0 else None for t in example_inputs)


def _exported_dynamic_dims(module: Any, example_inputs: Sequence[Any]) -> Any:
    """The ExportedProgram's dynamic dims as `torch.onnx.export(dynamic_shapes=...)`: `{dim: Dim.AUTO}` per input
    for each dim the program keeps symbolic, so the ONNX file gets them as dynamic axes and serves every size the
    model is timed at (its dynamic sizes, a shape sweep). `ep.module()`'s placeholders (one per flat input, in the
    order the harness passes them; `KeywordCall` wraps it as `.model`) carry export's fake values, whose symbolic
    sizes are the dynamic dims. None for a module without them (TorchScript, a plain nn.Module, all dims static)."""
    import torch
    from torch.export import Dim

    graph = getattr(getattr(module, "model", module), "graph", None)
    if not isinstance(graph, torch.fx.Graph):
        return None
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return None
    specs: list[dict[int, Any] | None] = []
    for node, value in zip(placeholders, example_inputs, strict=True):
        fake = node.meta.get("val")
        if not (isinstance(fake, torch.Tensor) and isinstance(value, torch.Tensor)):
            specs.append(None)
            continue
        dims = {dim: Dim.AUTO for dim, size in enumerate(fake.shape) if isinstance(size, torch.SymInt)}
        specs.append(dims or None)
    if not any(specs):
        return None
    return _for_signature(module, tuple(specs))


def _for_signature(module: Any, specs: tuple) -> Any:
    """`specs` (one per flat input) as `dynamic_shapes` for `module.forward`: a `forward(*inputs)` (KeywordCall)
    takes them under its one varargs name, others positionally."""
    import inspect

    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return specs
    if len(parameters) == 1 and parameters[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return {parameters[0].name: specs}
    return specs


def _describe_dynamic(dynamic: Any, example_inputs: Sequence[Any]) -> str:
    """The dims exported as dynamic axes, e.g. "input0[0], input1[0]" ("" when none)."""
    if isinstance(dynamic, dict):
        dynamic = next(iter(dynamic.values()), None)
    if not dynamic:
        return ""
    return ", ".join(
        f"input{index}[{dim}]" for index, spec in enumerate(dynamic) if isinstance(spec, dict) for dim in sorted(spec)
    )
