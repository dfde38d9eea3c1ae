"""The int8 steps of the quantized modes (catalogue `quantized_modes`), run inside the measuring child.

- `pt2e_int8`: PT2E static int8 with the X86 Inductor quantizer from `torchao` (torch 2.13 no longer ships
  `torch.ao.quantization.quantize_pt2e`), calibrated on the user's calibration file
  (advisor.harness.calibration_samples) or the example inputs; Inductor compiles the result (`inductor:pt2e-int8`).
- `ort_int8`: `onnxruntime.quantization` on the exported `model.onnx`: static QDQ calibrated likewise
  when the graph has convolutions, dynamic (weights int8, activations quantized at run time) otherwise, i.e. for
  Linear/MatMul models such as transformers (`onnxruntime:int8`).

Both count in the option's cold compile: the quantization is part of what a user waits for before the first output.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Sequence
from typing import Any

from advisor.core.quant_snippets import PT2E_PACKAGE_HINT

CONV_OPS = frozenset({"Conv", "ConvTranspose"})


def torchao_missing() -> str | None:
    """Why PT2E int8 cannot run here, or None."""
    if importlib.util.find_spec("torchao") is None:
        return f"PT2E int8 needs torchao, which is not installed ({PT2E_PACKAGE_HINT})"
    return None


def pt2e_int8(module: Any, example_inputs: Sequence[Any], calibration: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The converted (int8 Q/DQ) GraphModule of `module`, calibrated on the user's `calibration` .npz or else on
    `example_inputs`, and the seconds of each step ({"export_s", "calibrate_s", "convert_s"}) with "calibration"
    (what it was calibrated on)."""
    import torch
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from advisor.harness.calibration_samples import calibration_samples

    samples, source = calibration_samples(calibration, example_inputs)  # refused before anything is compiled
    started = time.perf_counter()
    with torch.no_grad():
        exported = torch.export.export(module, tuple(example_inputs)).module()
    exported_at = time.perf_counter()
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        for sample in samples:  # calibration: the observers record the samples' ranges
            prepared(*sample)
    calibrated_at = time.perf_counter()
    converted = convert_pt2e(prepared)
    return converted, {
        "export_s": exported_at - started,
        "calibrate_s": calibrated_at - exported_at,
        "convert_s": time.perf_counter() - calibrated_at,
        "calibration": source,
    }


def weights_bytes(module: Any) -> int:
    """Bytes of the tensors a module runs with, each storage counted once: those its FX graphs read (`get_attr`:
    where an unlifted ExportedProgram keeps its weights and PT2E its int8 weights, scales and zero points; convert_pt2e
    leaves the float originals registered but unused), or, for a module without such a graph, its parameters and
    buffers."""
    import torch

    tensors: list[Any] = []
    if isinstance(module, torch.nn.Module):
        for sub in module.modules():
            graph = getattr(sub, "graph", None)
            if not isinstance(graph, torch.fx.Graph):
                continue
            for node in graph.nodes:
                if node.op != "get_attr":
                    continue
                value: Any = sub
                for part in str(node.target).split("."):
                    value = getattr(value, part, None)
                if isinstance(value, torch.Tensor):
                    tensors.append(value)
        if not tensors:  # not a graph (or one that takes its weights as inputs): every parameter and buffer
            tensors += [t for _, t in module.named_parameters(remove_duplicate=True)]
            tensors += [t for _, t in module.named_buffers(remove_duplicate=True)]
    seen: set[tuple[int, int]] = set()
    total = 0
    for tensor in tensors:
        if tensor.is_meta:
            continue
        key = (tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
        if key in seen:
            continue
        seen.add(key)
        total += tensor.untyped_storage().nbytes()
    return total


def serialized_bytes(compiled: Any, module: Any) -> int | None:
    """What an option deploys, in bytes: the backend's own figure when its callable carries `serialized_bytes` (the
    .onnx file, the int8 model's weights), else the float module's weights (eager, Inductor, TorchAir...)."""
    own = getattr(compiled, "serialized_bytes", None)
    if isinstance(own, int):
        return own
    try:
        return weights_bytes(module)
    except Exception:  # a module whose tensors cannot be walked: no figure rather than a failed row
        return None


class FreezingFallback:
    """`torch.compile(converted, options={"freezing": True})`, compiled by its first call; when that fails on a oneDNN
    prepack op without a fake kernel (torch 2.13 + torchao 0.18), Dynamo is reset and the graph compiled without
    freezing. `compile_breakdown["freezing"]` says which one runs, `freezing_error` why freezing was dropped."""

    def __init__(self, converted: Any, workload: str) -> None:
        self.converted, self.workload = converted, workload
        self.fn = self._compiled(freezing=True)
        self.first = True
        self.compile_breakdown: dict[str, Any] = {"freezing": True}
        self.serialized_bytes: int | None = None

    def _compiled(self, *, freezing: bool) -> Any:
        import torch

        from advisor.harness.backends.base import run_for_workload

        return run_for_workload(torch.compile(self.converted, options={"freezing": freezing}), self.workload)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.first:
            return self.fn(*args, **kwargs)
        self.first = False
        try:
            return self.fn(*args, **kwargs)
        except Exception as exc:
            message = str(exc)
            if "UnsupportedOperatorException" not in message or "prepack" not in message:
                raise
            import torch

            torch._dynamo.reset()
            self.compile_breakdown.update(freezing=False, freezing_error=first_error_line(exc))
            self.fn = self._compiled(freezing=False)
            return self.fn(*args, **kwargs)


def first_error_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def onnx_op_types(path: str) -> set[str]:
    import onnx

    return {node.op_type for node in onnx.load(path, load_external_data=False).graph.node}


def ort_int8(
    fp32_path: str, int8_path: str, example_inputs: Sequence[Any], calibration: str | None = None
) -> dict[str, Any]:
    """Quantize `fp32_path` into `int8_path`; returns {"quantize_s", "quantization": "static QDQ" | "dynamic", ...}.
    Static QDQ calibrates on the user's `calibration` .npz, else on the example inputs; dynamic needs no calibration
    (its activations are quantized at run time), so a calibration file is checked but not used there."""
    from advisor.harness.calibration_samples import calibration_samples

    samples, source = calibration_samples(calibration, example_inputs)  # refused before anything is quantized
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    started = time.perf_counter()
    if onnx_op_types(fp32_path) & CONV_OPS:
        import onnxruntime

        session = onnxruntime.InferenceSession(fp32_path, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        del session
        feeds = [
            {name: tensor.detach().cpu().numpy() for name, tensor in zip(names, sample, strict=False)}
            for sample in samples
        ]

        class _Calibration(CalibrationDataReader):
            def __init__(self) -> None:
                self.batches = iter(feeds)

            def get_next(self) -> dict | None:
                return next(self.batches, None)

        quantize_static(
            fp32_path,
            int8_path,
            _Calibration(),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
        kind = f"static QDQ (calibrated on {source})"
    else:
        quantize_dynamic(fp32_path, int8_path, weight_type=QuantType.QInt8)
        kind = "dynamic (int8 weights, activations quantized at run time)"
        source = "none (dynamic quantization needs no calibration)"
    return {
        "calibration": source,
        "quantize_s": time.perf_counter() - started,
        "quantization": kind,
        "fp32_bytes": os.path.getsize(fp32_path),
        "int8_bytes": os.path.getsize(int8_path),
    }
