"""ONNX export + ONNX Runtime: the offline-export path on CPU/GPU nodes.

The analogue of TorchAir's `torchair.dynamo_export` -> ATC path on NPU nodes: the same ONNX file can be turned
into an offline `.om` model with `atc --framework=5`. (Named `ort` so it does not shadow the `onnxruntime` package.)
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from advisor.backends.base import Backend, CompileRequest, UnsupportedRequest

_REQUIRED_PACKAGES = ("onnxruntime", "onnx", "onnxscript")
_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    family = "export"
    devices = ("cpu", "cuda")
    modes = ("default",)

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
        path = os.path.join(onnx_dir, "model.onnx")
        with torch.no_grad():
            program = torch.onnx.export(module, tuple(example_inputs), dynamo=True,
                                        dynamic_shapes=_batch_dynamic(example_inputs) if request.dynamic else None)
        program.save(path)
        options = onnxruntime.SessionOptions()
        # Spinning intra-op threads slow down everything else in the process (e.g. interleaved eager runs).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(path, options, providers=[_PROVIDERS[request.device]])
        return _SessionCallable(session)

    def snippet(self, mode: str, options: dict[str, Any] | None = None, workload: str = "inference") -> str:
        return "\n".join([
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
            "# (TorchAir's own export: torchair.dynamo_export(*inputs, model=model, export_path=\"export_file\"),",
            "#  then atc --model=export_file/export.air --framework=1 ...)",
        ]) + "\n"


class _SessionCallable:
    """Calls an ORT session with torch tensors and returns torch tensors (one, or a tuple)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.input_names = [i.name for i in session.get_inputs()]

    def __call__(self, *inputs: Any) -> Any:
        import torch

        feeds = {name: tensor.detach().cpu().numpy() for name, tensor in zip(self.input_names, inputs, strict=False)}
        outputs = [torch.from_numpy(array) for array in self.session.run(None, feeds)]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _batch_dynamic(example_inputs: Sequence[Any]) -> tuple:
    from torch.export import Dim

    return tuple({0: Dim.AUTO} if getattr(t, "dim", lambda: 0)() > 0 else None for t in example_inputs)
