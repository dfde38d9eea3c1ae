"""Schema-only stubs for custom ops an ExportedProgram uses but this process has not registered.

`torch.export.load` fails with an opaque "error when deserializing" when a graph calls an op this process
does not know (an `npu::` op on a node without torch_npu). The archive's `models/*.json` names every op with
its arguments and its output tensors' meta, which is enough to define the op's schema and a fake kernel, so
the program loads and its graph can be read. The stubs have no real kernel: running the model fails, and the
loader reports it as not runnable.
"""

from __future__ import annotations

import importlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import torch

# models.json argument kind -> schema type (None: the argument was passed as None, type unknown).
_ARGUMENT_TYPES = {
    "as_tensor": "Tensor",
    "as_tensors": "Tensor[]",
    "as_optional_tensors": "Tensor?[]",
    "as_optional_tensor": "Tensor?",
    "as_int": "SymInt",
    "as_sym_int": "SymInt",
    "as_ints": "SymInt[]",
    "as_sym_ints": "SymInt[]",
    "as_float": "float",
    "as_sym_float": "float",
    "as_floats": "float[]",
    "as_bool": "bool",
    "as_sym_bool": "bool",
    "as_bools": "bool[]",
    "as_string": "str",
    "as_strings": "str[]",
    "as_scalar_type": "ScalarType",
    "as_memory_format": "MemoryFormat",
    "as_layout": "Layout",
    "as_device": "Device",
    "as_none": "Tensor?",
}

# The packages that register each namespace's real ops; imported before deciding an op is missing.
_NAMESPACE_PACKAGES = {"npu": "torch_npu", "torchvision": "torchvision", "torchaudio": "torchaudio"}

_LIBRARIES: dict[str, torch.library.Library] = {}  # kept alive: a dropped Library unregisters its ops


@dataclass
class OutputMeta:
    dtype: torch.dtype
    sizes: list[int]
    same_as_input: int | None  # index of a tensor argument with the same meta: the fake returns empty_like(it)


@dataclass
class OpSignature:
    qualified_name: str  # "npu.test_rms_norm.default"
    schema: str  # "test_rms_norm(Tensor x, Tensor weight, float eps) -> Tensor"
    outputs: list[OutputMeta]

    @property
    def namespace(self) -> str:
        return self.qualified_name.split(".")[0]

    @property
    def op_name(self) -> str:
        return self.qualified_name.split(".")[1]


def is_registered(qualified_name: str) -> bool:
    """Whether `torch.ops.<namespace>.<op>.<overload>` resolves in this process."""
    namespace, name, overload = qualified_name.split(".")
    try:
        getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError):
        return False
    return True


def missing_ops(op_names: list[str]) -> list[str]:
    """The ops of `op_names` this process cannot resolve, after importing their namespace's package if present."""
    for namespace in {name.split(".")[0] for name in op_names}:
        package = _NAMESPACE_PACKAGES.get(namespace)
        if package:
            try:
                importlib.import_module(package)
            except Exception:  # noqa: BLE001 - absent or broken vendor package: the op stays missing
                pass
    return [name for name in op_names if not is_registered(name)]


def read_program_json(archive_path: str) -> list[dict]:
    """The serialized programs (`<archive>/models/*.json`) of an ExportedProgram archive, parsed."""
    programs = []
    with zipfile.ZipFile(archive_path) as archive:
        for info in archive.infolist():
            parts = PurePosixPath(info.filename).parts
            if len(parts) == 3 and parts[1] == "models" and parts[2].endswith(".json"):
                programs.append(json.loads(archive.read(info)))
    return programs


def read_signatures(programs: list[dict], wanted: list[str]) -> list[OpSignature]:
    """Each wanted op's signature, from its first call site in the serialized programs."""
    found: dict[str, OpSignature] = {}
    for program in programs:
        for graph in _graphs(program["graph_module"]):
            for node in graph["nodes"]:
                name = node["target"].removeprefix("torch.ops.")
                if name in wanted and name not in found:
                    found[name] = _signature(name, node, graph["tensor_values"])
    return [found[name] for name in wanted if name in found]


def register_stubs(signatures: list[OpSignature]) -> list[str]:
    """Define each op's schema with a fake kernel built from its recorded output meta; returns their names."""
    registered = []
    for signature in signatures:
        if is_registered(signature.qualified_name):
            continue
        lib = _LIBRARIES.get(signature.namespace)
        if lib is None:
            lib = _LIBRARIES[signature.namespace] = torch.library.Library(signature.namespace, "FRAGMENT")  # noqa: TOR901
        lib.define(signature.schema)
        torch.library.register_fake(f"{signature.namespace}::{signature.op_name}", _fake_kernel(signature), lib=lib)
        registered.append(signature.qualified_name)
    return registered


def _graphs(graph_module: dict) -> list[dict]:
    """The top-level graph and every nested subgraph (higher-order op branches)."""
    graphs = [graph_module["graph"]]
    for node in graph_module["graph"]["nodes"]:
        for argument in node.get("inputs", []):
            nested = argument.get("arg", {}).get("as_graph")
            if nested:
                graphs.extend(_graphs({"graph": nested["graph"]}))
    return graphs


def _signature(qualified_name: str, node: dict, tensor_values: dict) -> OpSignature:
    namespace, op, overload = qualified_name.split(".")
    arguments, tensor_inputs = [], []
    for position, argument in enumerate(node["inputs"]):
        kind, value = next(iter(argument["arg"].items()))
        arguments.append(f"{_ARGUMENT_TYPES.get(kind, 'Any')} {argument['name']}")
        if kind == "as_tensor":
            tensor_inputs.append((position, tensor_values.get(value["name"])))
    outputs = [_output_meta(output, tensor_values, tensor_inputs) for output in node["outputs"]]
    returns = "Tensor" if len(outputs) == 1 else "(" + ", ".join("Tensor" for _ in outputs) + ")"
    name = op if overload == "default" else f"{op}.{overload}"
    return OpSignature(qualified_name, f"{name}({', '.join(arguments)}) -> {returns}", outputs)


def _output_meta(output: dict, tensor_values: dict, tensor_inputs: list[tuple[int, dict | None]]) -> OutputMeta:
    if "as_tensor" not in output:
        raise ValueError(f"cannot stub an op whose output is {next(iter(output))}; only tensor outputs are supported")
    meta = tensor_values[output["as_tensor"]["name"]]
    same_as = next((position for position, value in tensor_inputs if _same_meta(value, meta)), None)
    return OutputMeta(_dtype(meta["dtype"]), [_size_hint(size) for size in meta["sizes"]], same_as)


def _same_meta(a: dict | None, b: dict) -> bool:
    return a is not None and a["dtype"] == b["dtype"] and a["sizes"] == b["sizes"]


def _size_hint(size: dict) -> int:
    if "as_int" in size:
        return size["as_int"]
    hint = size["as_expr"].get("hint")
    return int(hint.get("as_int", 1)) if isinstance(hint, dict) else int(hint or 1)


def _dtype(code: int) -> torch.dtype:
    from torch._export.serde.schema import ScalarType
    from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

    return _SERIALIZE_TO_TORCH_DTYPE[ScalarType(code)]


def _fake_kernel(signature: OpSignature) -> Any:
    def fake(*args: Any, **kwargs: Any) -> Any:
        results = []
        for output in signature.outputs:
            if output.same_as_input is not None and output.same_as_input < len(args):
                results.append(torch.empty_like(args[output.same_as_input]))
            else:
                results.append(torch.empty(output.sizes, dtype=output.dtype))
        return results[0] if len(results) == 1 else tuple(results)

    return fake
