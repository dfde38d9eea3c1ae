"""An ExportedProgram archive's user inputs (name, shape, dtype) read from its JSON alone, for the server's calibration
check at submission: the server never loads or unpickles an upload (docs/security.md), but `torch.export.save` writes
the graph's signature and tensor metadata as JSON (`<archive>/models/model.json`), which says what the example inputs
were without running anything.

Bounded whatever the upload claims: the JSON entry is read only when its declared size is at most MAX_JSON_BYTES and
read at most that many bytes; its nesting depth is measured before it is parsed (advisor.core.bounded_json); any shape
this reader does not expect - a TorchScript archive, a missing or malformed entry, a non-tensor user input, an unknown
dtype - is "cannot tell" (None), and the worker checks after its inspection instead. Torch-free.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from typing import IO, Any

from advisor.core import bounded_json

# a real model.json is KBs to a few MB (no weights); past this the check is left to the worker
MAX_JSON_BYTES = 8 * 2**20
MAX_DEPTH = 64  # torch's serialized graph nests ~10 levels
MAX_INPUTS = 100
# torch._export.serde.schema.ScalarType -> torch's dtype name (the inspection's spelling, without "torch.")
SCALAR_TYPES = {
    1: "uint8",
    2: "int8",
    3: "int16",
    4: "int32",
    5: "int64",
    6: "float16",
    7: "float32",
    8: "float64",
    12: "bool",
    13: "bfloat16",
}


def exported_inputs(handle: IO[bytes], archive_name: str) -> list[dict[str, Any]] | None:
    """[{"name", "shape", "dtype"}] of the archive's user inputs in order (a symbolic size as its expression, which
    any sample size fits: advisor.core.calibration._static_dim), or None when the JSON cannot tell."""
    try:
        with zipfile.ZipFile(handle) as archive:
            info = archive.getinfo(f"{archive_name}/models/model.json")
            if info.file_size > MAX_JSON_BYTES or info.flag_bits & 0x1:
                return None
            with archive.open(info) as entry:
                data = entry.read(MAX_JSON_BYTES + 1)
    except (KeyError, zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, RuntimeError):
        return None
    if len(data) > MAX_JSON_BYTES:
        return None
    try:
        document = bounded_json.loads(data, "the archive's model.json", MAX_DEPTH)
    except (ValueError, RecursionError, MemoryError):  # TooDeep and JSONDecodeError are ValueErrors
        return None
    return _user_inputs(document)


def _user_inputs(document: Any) -> list[dict[str, Any]] | None:
    graph_module = _get(document, "graph_module")
    specs = _get(_get(graph_module, "signature"), "input_specs")
    values = _get(_get(graph_module, "graph"), "tensor_values")
    if not isinstance(specs, list) or not isinstance(values, Mapping):
        return None
    inputs = []
    for spec in specs:
        if not isinstance(spec, Mapping) or "user_input" not in spec:
            continue  # parameters, buffers, constants: not an example input
        name = _get(_get(_get(spec["user_input"], "arg"), "as_tensor"), "name")
        tensor = values.get(name) if isinstance(name, str) else None
        described = _tensor(name, tensor)
        if described is None or len(inputs) >= MAX_INPUTS:
            return None  # a non-tensor input, or one this reader does not know: cannot tell
        inputs.append(described)
    return inputs


def _tensor(name: Any, tensor: Any) -> dict[str, Any] | None:
    dtype = SCALAR_TYPES.get(_get(tensor, "dtype"))  # type: ignore[arg-type]
    sizes = _get(tensor, "sizes")
    if dtype is None or not isinstance(sizes, list) or len(sizes) > 16:
        return None
    shape: list[int | str] = []
    for size in sizes:
        value = _get(size, "as_int")
        if type(value) is int and value >= 0:
            shape.append(value)
        elif isinstance(size, Mapping) and "as_expr" in size:
            expression = _get(size["as_expr"], "expr_str")  # "s77", as the inspection spells a symbolic size
            shape.append(expression[:40] if isinstance(expression, str) and expression else "s")
        else:
            return None
    return {"name": str(name)[:200], "shape": shape, "dtype": dtype}


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, Mapping) else None
