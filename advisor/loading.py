"""Load a sniffed model file for introspection and measurement (CLI and worker children only: imports torch).

Everything that reads the upload runs with advisor.safe_unpickle armed: any pickle anywhere in the archive
that names a global other than a tensor-rebuild function is refused (`PickledObjectRefused`, sandbox status
"rejected"), whatever the entry is called. On top of that every `torch.load` is forced to `weights_only=True`.
ExportedProgram: custom ops this process does not know are stubbed from the archive's own op signatures
first (see custom_op_stubs), then `torch.export.load`. TorchScript: `torch.jit.load` (TorchScript's own
unpickler, which only builds TorchScript types), then conversion to an ExportedProgram where the installed
torch's TS2EPConverter manages. What TorchScript code does when it runs (e.g. `torch.from_file`) only the
OS sandbox stops (advisor.isolation).
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import torch

from advisor import custom_op_stubs
from advisor.artifacts import ArtifactInfo, ArtifactRejected, sniff
from advisor.model_inputs import InputsError, dtype_name, generate_tensor, load_inputs_file, tensors_from_flags
from advisor.safe_unpickle import PickledObjectRefused, refusing_pickled_objects
from advisor.schema import DynamicDim, InputSpec

_WEIGHTS_ONLY_GLOBAL = re.compile(r"GLOBAL\s+([\w.]+)")
_LOCATE_MAX_ENTRY_BYTES = 256 << 20
_LOCATE_CHUNK = 1 << 20


class LoadError(RuntimeError):
    """A user-facing reason the model could not be loaded. `str()` is the message."""

    sandbox_status = "load_error"  # what advisor.sandbox reports when a child raises it


@dataclass
class LoadedModel:
    format: str  # "exported_program" | "torchscript"
    module: Any  # ep.module(), or the ScriptModule when it could not be converted
    exported_program: Any | None
    script_module: Any | None
    example_inputs: tuple
    input_specs: list[InputSpec]
    dynamic_dims: list[DynamicDim]
    saved_with_torch: str | None
    runnable: tuple[bool, str | None]
    stubbed_ops: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    conversion_error: str | None = None  # TorchScript only: why TS2EPConverter failed


def load_model(path: str, *, inputs_file: str | None = None, input_shapes: list[str] | None = None) -> LoadedModel:
    """Sniff, then load the model; raise `LoadError` with a readable message on any failure."""
    try:
        info = sniff(path)
    except ArtifactRejected as exc:
        raise LoadError(str(exc)) from exc
    try:
        with refusing_pickled_objects(), _weights_only_loads():
            if info.format == "exported_program":
                return _load_exported_program(path, info, inputs_file, input_shapes or [])
            return _load_torchscript(path, inputs_file, input_shapes or [])
    except InputsError as exc:
        raise LoadError(str(exc)) from exc
    except PickledObjectRefused as exc:
        exc.entry = exc.entry or locate_pickle(path, exc.global_name)
        raise


def locate_pickle(path: str, global_name: str) -> str | None:
    """The archive entry (without its top folder) holding a pickle that names `global_name`, for the message."""
    module, _, name = global_name.rpartition(".")
    needles = [name.encode(), module.encode()]
    custom_object = global_name.startswith("torch.classes")
    with contextlib.suppress(OSError, zipfile.BadZipFile, ValueError, RuntimeError):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                skip = info.is_dir() or info.filename.endswith(".json") or info.file_size > _LOCATE_MAX_ENTRY_BYTES
                if skip:
                    continue
                inside = "/".join(PurePosixPath(info.filename).parts[1:]) or info.filename
                if custom_object:
                    if PurePosixPath(info.filename).name.startswith("custom_obj"):
                        return inside
                    continue
                with archive.open(info) as member:
                    if _stream_contains(member, needles):
                        return inside
    return None


def _stream_contains(member: Any, needles: list[bytes]) -> bool:
    found: set[bytes] = set()
    carry = b""
    while True:
        window = carry + member.read(_LOCATE_CHUNK)
        found |= {needle for needle in needles if needle in window}
        if len(found) == len(needles):
            return True
        if len(window) == len(carry):
            return False
        carry = window[-256:]


def _refused_by_weights_only(exc: BaseException) -> PickledObjectRefused | None:
    """torch's weights-only unpickler names the global it refused in its message; make it our refusal."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, PickledObjectRefused):
            return seen
        text = str(seen)
        if "weights only load failed" in text.lower():
            match = _WEIGHTS_ONLY_GLOBAL.search(text)
            return PickledObjectRefused(match.group(1) if match else "an object that is not a tensor")
        seen = seen.__cause__ or seen.__context__
    return None


# ------------------------------------------------------------------ ExportedProgram
def _load_exported_program(
    path: str, info: ArtifactInfo, inputs_file: str | None, input_shapes: list[str]
) -> LoadedModel:
    programs = custom_op_stubs.read_program_json(path)
    missing = custom_op_stubs.missing_ops(info.custom_op_names)
    try:
        stubbed = custom_op_stubs.register_stubs(custom_op_stubs.read_signatures(programs, missing))
    except (ValueError, RuntimeError) as exc:
        unknown = ", ".join(missing)
        raise LoadError(f"The model uses ops unknown here ({unknown}) that could not be stubbed: {exc}") from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ep = torch.export.load(path)
        except Exception as exc:  # noqa: BLE001 - torch raises many types; the user needs one readable line
            refused = _refused_by_weights_only(exc)
            if refused is not None:
                raise refused from None
            raise LoadError(f"torch.export.load could not load this ExportedProgram: {_first_line(exc)}") from exc
    specs = _exported_input_specs(ep)
    names = [spec["name"] for spec in specs]
    example_inputs, source = _exported_example_inputs(ep, specs, inputs_file, input_shapes)
    runnable: tuple[bool, str | None] = (True, None)
    if stubbed:
        runnable = (
            False,
            f"op(s) {', '.join(stubbed)} are not available on this node (is the vendor package, e.g. torch_npu, "
            "installed?); they were registered as schema-only stubs so the graph can be read, but it cannot run here",
        )
    notes = [f"example inputs: {source}"] if source else []
    if not names:
        notes.append("the program has no tensor inputs")
    return LoadedModel(
        format="exported_program",
        module=ep.module(),
        exported_program=ep,
        script_module=None,
        example_inputs=example_inputs,
        input_specs=specs,
        dynamic_dims=_dynamic_dims(ep),
        saved_with_torch=next((p.get("torch_version") for p in programs if p.get("torch_version")), None),
        runnable=runnable,
        stubbed_ops=stubbed,
        warnings=notes,
    )


@contextlib.contextmanager
def _weights_only_loads() -> Iterator[None]:
    """Force every `torch.load` inside (even `weights_only=False` ones in torch.export.load) to weights-only."""
    previous = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        yield
    finally:
        if previous is None:
            del os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"]
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = previous


def _user_input_nodes(ep: Any) -> list[Any]:
    user_inputs = set(ep.graph_signature.user_inputs)
    return [node for node in ep.graph.nodes if node.op == "placeholder" and node.name in user_inputs]


def _exported_input_specs(ep: Any) -> list[InputSpec]:
    specs: list[InputSpec] = []
    for node in _user_input_nodes(ep):
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            shape = [int(dim) if isinstance(dim, int) else str(dim) for dim in value.shape]
            specs.append({"name": node.name, "shape": shape, "dtype": dtype_name(value.dtype)})
    return specs


def _exported_example_inputs(
    ep: Any, specs: list[InputSpec], inputs_file: str | None, input_shapes: list[str]
) -> tuple[tuple, str]:
    names = [spec["name"] for spec in specs]
    if inputs_file:
        return load_inputs_file(inputs_file, names), f"from {PurePosixPath(inputs_file).name}"
    if input_shapes:
        return tensors_from_flags(input_shapes, names), "generated from --input-shape"
    if ep.example_inputs is not None:
        args, kwargs = ep.example_inputs
        if not kwargs:
            return tuple(args), "stored in the archive"
    generator = torch.Generator().manual_seed(0)
    hints = [[dim if isinstance(dim, int) else _symbol_hint(ep, dim) for dim in spec["shape"]] for spec in specs]
    dtypes = [getattr(torch, spec["dtype"]) for spec in specs]
    tensors = tuple(generate_tensor(shape, dtype, generator) for shape, dtype in zip(hints, dtypes, strict=True))
    return tensors, "generated from the input specs (no example inputs stored in the archive)"


def _symbol_hint(ep: Any, symbol: str) -> int:
    for sym, value_range in ep.range_constraints.items():
        if str(sym) == symbol:
            return max(int(value_range.lower), 2)
    return 2


def _dynamic_dims(ep: Any) -> list[DynamicDim]:
    ranges = {str(sym): value_range for sym, value_range in ep.range_constraints.items()}
    dims: list[DynamicDim] = []
    for node in _user_input_nodes(ep):
        value = node.meta.get("val")
        if not isinstance(value, torch.Tensor):
            continue
        for index, size in enumerate(value.shape):
            if isinstance(size, torch.SymInt):
                symbol = str(size)
                value_range = ranges.get(symbol)
                low = _bound(value_range.lower) if value_range is not None else None
                high = _bound(value_range.upper) if value_range is not None else None
                dims.append({"input": node.name, "dim": index, "symbol": symbol, "min": low, "max": high})
    return dims


def _bound(value: Any) -> int | None:
    """An int for a finite sympy bound, None for +/- infinity."""
    try:
        return int(value) if value.is_finite else None
    except (TypeError, AttributeError, OverflowError):
        return None


# ------------------------------------------------------------------ TorchScript
def _load_torchscript(path: str, inputs_file: str | None, input_shapes: list[str]) -> LoadedModel:
    try:
        script_module = torch.jit.load(path, map_location="cpu")
    except Exception as exc:  # noqa: BLE001
        refused = _refused_by_weights_only(exc)
        if refused is not None:
            raise refused from None
        raise LoadError(f"torch.jit.load could not load this TorchScript file: {_first_line(exc)}") from exc
    script_module.eval()
    names = [argument.name for argument in script_module.forward.schema.arguments[1:]]
    if inputs_file:
        example_inputs, source = load_inputs_file(inputs_file, names), f"from {PurePosixPath(inputs_file).name}"
    elif input_shapes:
        example_inputs, source = tensors_from_flags(input_shapes, names), "generated from --input-shape"
    else:
        flags = " ".join(f"--input-shape {name}=1x3x224x224:float32" for name in names)
        raise LoadError(
            f"A TorchScript file carries no input shapes. Give its inputs ({', '.join(names)}) with --inputs FILE "
            f"(a torch.save'd tensor, tuple or dict name->tensor) or with {flags} (your real sizes)."
        )
    specs: list[InputSpec] = [
        {"name": name, "shape": list(tensor.shape), "dtype": dtype_name(tensor.dtype)}
        for name, tensor in zip(names, example_inputs, strict=False)
        if isinstance(tensor, torch.Tensor)
    ]
    notes = [f"example inputs: {source}", "TorchScript records neither the saving torch version nor dynamic dims"]
    ep, conversion_error = _convert_to_exported_program(script_module, example_inputs)
    if conversion_error:
        notes.append(f"TorchScript -> ExportedProgram conversion failed: {conversion_error}")
    return LoadedModel(
        format="torchscript",
        module=_with_parameters_of(ep.module(), script_module) if ep is not None else script_module,
        exported_program=ep,
        script_module=script_module,
        example_inputs=example_inputs,
        input_specs=specs,
        dynamic_dims=[],
        saved_with_torch=None,
        runnable=(True, None),
        warnings=notes,
        conversion_error=conversion_error,
    )


def _with_parameters_of(module: Any, script_module: Any) -> Any:
    """TS2EPConverter turns every weight into a buffer; make the TorchScript module's parameters parameters again
    (same names, same tensors, requires_grad off as after loading), so training trains them and nothing else
    (batch-norm running statistics stay buffers)."""
    buffers = dict(module.named_buffers())
    for name, _ in script_module.named_parameters():
        tensor = buffers.get(name)
        if tensor is None or not tensor.is_floating_point():
            continue
        owner_name, _, attr = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        delattr(owner, attr)
        owner.register_parameter(attr, torch.nn.Parameter(tensor, requires_grad=False))
    return module


def _convert_to_exported_program(script_module: Any, example_inputs: tuple) -> tuple[Any | None, str | None]:
    """TS2EPConverter (private torch API, present in torch >= 2.5); (program, None) or (None, reason)."""
    try:
        from torch._export.converter import TS2EPConverter
    except ImportError:
        return None, f"torch {torch.__version__} has no TorchScript -> ExportedProgram converter"
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            return TS2EPConverter(script_module, example_inputs).convert(), None
    except Exception as exc:  # noqa: BLE001 - the converter fails in many ways on unusual TorchScript
        return None, _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
