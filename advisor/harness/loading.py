"""Load a sniffed model file for introspection and measurement (CLI and worker children only: imports torch).

Everything that reads the upload runs with advisor.harness.safe_unpickle armed: any pickle anywhere in the archive
that names a global other than a tensor-rebuild function is refused (`PickledObjectRefused`, sandbox status
"rejected"), whatever the entry is called. On top of that every `torch.load` is forced to `weights_only=True`.
ExportedProgram: custom ops this process does not know are stubbed from the archive's own op signatures
first (see custom_op_stubs), and container types its input/output specs name but this process does not know (a
transformers ModelOutput, a registered dataclass or namedtuple) get stand-ins rebuilt from the spec, never by
importing the user's library (see pytree_outputs); then `torch.export.load`, whose own failure is reported with
the error torch only logs. Keyword inputs: the module every caller gets takes the inputs flat, in the order of
the program's inputs, and calls the model with its keyword arguments by keyword (model_inputs.KeywordCall).
TorchScript: `torch.jit.load` (TorchScript's own unpickler, which only builds TorchScript types), then
conversion to an ExportedProgram where the installed torch's TS2EPConverter manages. Ops that touch files or the
process (`torch.from_file`, advisor.core.denied_ops) are refused in the archive's text before loading and on every
loaded graph before anything runs; whatever else TorchScript code does when it runs only the OS sandbox stops
(advisor.harness.isolation).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import torch

from advisor.core.artifacts import ArtifactInfo, ArtifactRejected, sniff
from advisor.core.denied_ops import OpRefused, denied_reason, refusal
from advisor.core.text import first_line
from advisor.harness import custom_op_stubs, pytree_outputs
from advisor.harness.model_inputs import (
    InputsError,
    KeywordCall,
    dtype_name,
    generate_tensor,
    load_inputs_file,
    split_in_spec,
    tensors_from_flags,
)
from advisor.harness.safe_unpickle import PickledObjectRefused, refusing_pickled_objects

_WEIGHTS_ONLY_GLOBAL = re.compile(r"GLOBAL\s+([\w.]+)")
_LOCATE_MAX_ENTRY_BYTES = 256 << 20
_LOCATE_CHUNK = 1 << 20


class LoadError(RuntimeError):
    """A user-facing reason the model could not be loaded. `str()` is the message."""

    sandbox_status = "load_error"  # what advisor.harness.sandbox reports when a child raises it


@dataclass
class LoadedModel:
    """A loaded model; what only one format has defaults to its absence, so each loader names only its own."""

    format: str  # "exported_program" | "torchscript"
    module: Any  # ep.module(), or the ScriptModule when it could not be converted
    exported_program: Any | None
    example_inputs: tuple
    input_specs: list[dict[str, Any]]  # advisor.core.results.InputSpec, as plain dicts
    runnable: tuple[bool, str | None]
    script_module: Any | None = None  # TorchScript only
    dynamic_dims: list[dict[str, Any]] = field(default_factory=list)  # advisor.core.results.DynamicDim; none in TS
    saved_with_torch: str | None = None  # ExportedProgram only (TorchScript does not record it)
    stubbed_ops: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    conversion_error: str | None = None  # TorchScript only: why TS2EPConverter failed
    keyword_inputs: list[str] = field(default_factory=list)  # inputs the model takes by keyword (module wraps it)
    stand_in_types: list[str] = field(default_factory=list)  # container types rebuilt from the spec (pytree_outputs)
    # a generation archive's programs by name ("prefill", "decode"; GENERATION_FORMAT); empty for one-program files,
    # whose program is `exported_program`
    programs: dict[str, Any] = field(default_factory=dict)


def load_model(path: str, *, inputs_file: str | None = None, input_shapes: list[str] | None = None) -> LoadedModel:
    """Sniff, then load the model; raise `LoadError` with a readable message on any failure."""
    try:
        info = sniff(path)
    except OpRefused:
        raise  # a denied op or crashing code: status "rejected", as the upload would have been
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
    try:
        stand_ins = pytree_outputs.register_stand_ins(programs)
    except pytree_outputs.SpecError as exc:
        raise LoadError(f"torch.export.load cannot read this ExportedProgram safely: {exc}") from exc
    with warnings.catch_warnings(), _torch_log_records() as logged:
        warnings.simplefilter("ignore")
        try:
            ep, named = _read_programs(path, program_names(path))
        except LoadError:
            raise
        except Exception as exc:  # noqa: BLE001 - torch raises many types; the user needs one readable line
            refused = next(filter(None, map(_refused_by_weights_only, [exc, *_logged_errors(logged)])), None)
            if refused is not None:
                raise refused from None
            cause = _load_cause(exc, logged)
            raise LoadError(f"torch.export.load could not load this ExportedProgram: {cause}") from exc
    refuse_denied_ops_in_programs([ep, *named.values()])
    specs = _exported_input_specs(ep)
    names = [spec["name"] for spec in specs]
    keywords = [spec["name"] for spec in specs if spec.get("keyword")]
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
    if keywords:
        notes.append(
            f"keyword inputs: {', '.join(keywords)}: the model is called as model({_call_signature(specs)}), "
            "in eager and in every backend"
        )
    if stand_ins:
        notes.append(
            f"container types rebuilt from the archive's spec with the same fields, not imported (an "
            f"upload's library never is): {', '.join(stand_ins)}"
        )
    module = ep.module()
    split = split_in_spec(ep.call_spec.in_spec)
    if split is not None and (split.keywords or not split.flat):
        module = KeywordCall(module, split)
    return LoadedModel(
        format="exported_program",
        module=module,
        exported_program=ep,
        example_inputs=example_inputs,
        input_specs=specs,
        dynamic_dims=_dynamic_dims(ep),
        saved_with_torch=next((p.get("torch_version") for p in programs if p.get("torch_version")), None),
        runnable=runnable,
        stubbed_ops=stubbed,
        warnings=notes,
        keyword_inputs=keywords,
        stand_in_types=stand_ins,
        programs=named,
    )


GENERATION_FORMAT = (
    "a generation model is a PT2 archive (torch.export.pt2_archive package_pt2) with a program named 'decode' "
    "and optionally one named 'prefill'"
)


def program_names(path: str) -> list[str]:
    """The names of the programs in an ExportedProgram archive (`<archive>/models/<name>.json`), sorted."""
    with zipfile.ZipFile(path) as archive:
        return sorted(
            PurePosixPath(name).stem
            for name in archive.namelist()
            if len(PurePosixPath(name).parts) == 3
            and PurePosixPath(name).parts[1] == "models"
            and name.endswith(".json")
        )


def _read_programs(path: str, names: list[str]) -> tuple[Any, dict[str, Any]]:
    """The program to inspect and run (the only one, or a generation archive's 'decode'), and every program by
    name for a generation archive (else {}). Called with the pickle guards armed, like torch.export.load."""
    if len(names) <= 1:
        return torch.export.load(path), {}
    if "decode" not in names:
        raise LoadError(f"this archive holds the programs {', '.join(names)}; {GENERATION_FORMAT}")
    from torch.export.pt2_archive._package import load_pt2

    programs = dict(load_pt2(path).exported_programs)
    return programs["decode"], programs


def _call_signature(specs: list[dict[str, Any]]) -> str:
    return ", ".join(f"{spec['name']}=..." if spec.get("keyword") else spec["name"] for spec in specs)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _torch_log_records() -> Iterator[list[logging.LogRecord]]:
    """The warnings torch logs meanwhile (torch.export.load logs the real error, then raises "check the warnings
    above"). torch's loggers do not all propagate, so the handler goes on each of them."""
    handler = _Records()
    loggers = [logging.getLogger("torch")]
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("torch.") and isinstance(logger, logging.Logger) and not logger.propagate:
            loggers.append(logger)
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def _logged_errors(records: list[logging.LogRecord]) -> list[BaseException]:
    return [record.exc_info[1] for record in records if record.exc_info and record.exc_info[1] is not None]


def _load_cause(exc: BaseException, records: list[logging.LogRecord]) -> str:
    """The error torch logged while loading (its chain's innermost message), else the exception itself."""
    logged = _logged_errors(records)
    if not logged:
        messages = [record.getMessage() for record in records]
        detail = next((m for m in reversed(messages) if m.strip()), None)
        return f"{first_line(exc)} ({first_line(detail)})" if detail else first_line(exc)
    cause = logged[-1]
    innermost = cause
    seen = {id(cause)}
    while (nxt := innermost.__cause__ or innermost.__context__) is not None and id(nxt) not in seen:
        seen.add(id(nxt))
        innermost = nxt
    if innermost is cause:
        return first_line(cause)
    return f"{first_line(cause)} (caused by {first_line(innermost)})"


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


def _exported_input_specs(ep: Any) -> list[dict[str, Any]]:
    """One spec per tensor input, in the program's input order; `keyword` marks inputs passed by keyword."""
    split = split_in_spec(ep.call_spec.in_spec)
    positional_leaves = split.positional_leaves if split is not None else None
    specs: list[dict[str, Any]] = []
    for index, node in enumerate(_user_input_nodes(ep)):
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            shape = [int(dim) if isinstance(dim, int) else str(dim) for dim in value.shape]
            spec: dict[str, Any] = {"name": node.name, "shape": shape, "dtype": dtype_name(value.dtype)}
            if positional_leaves is not None and split is not None and split.keywords:
                spec["keyword"] = index >= positional_leaves
            specs.append(spec)
    return specs


def _exported_example_inputs(
    ep: Any, specs: list[dict[str, Any]], inputs_file: str | None, input_shapes: list[str]
) -> tuple[tuple, str]:
    names = [spec["name"] for spec in specs]
    if inputs_file:
        return load_inputs_file(inputs_file, names), f"from {PurePosixPath(inputs_file).name}"
    if input_shapes:
        return tensors_from_flags(input_shapes, names), "generated from --input-shape"
    stored = _stored_example_leaves(ep)
    if stored is not None:
        return stored, "stored in the archive"
    generator = torch.Generator().manual_seed(0)
    hints = [[dim if isinstance(dim, int) else _symbol_hint(ep, dim) for dim in spec["shape"]] for spec in specs]
    dtypes = [getattr(torch, spec["dtype"]) for spec in specs]
    tensors = tuple(generate_tensor(shape, dtype, generator) for shape, dtype in zip(hints, dtypes, strict=True))
    return tensors, "generated from the input specs (no example inputs stored in the archive)"


def _stored_example_leaves(ep: Any) -> tuple | None:
    """The archive's example (args, kwargs), flat in the order of the program's inputs (keywords in the order the
    program lists them); None when there are none, or keyword ones that do not fit the program's input spec."""
    from torch.utils._pytree import tree_flatten

    if ep.example_inputs is None:
        return None
    args, kwargs = ep.example_inputs
    split = split_in_spec(ep.call_spec.in_spec)
    if split is not None and set(kwargs or {}) == set(split.keywords):
        kwargs = {name: kwargs[name] for name in split.keywords}
    leaves, spec = tree_flatten((tuple(args), dict(kwargs or {})))
    if spec == ep.call_spec.in_spec:
        return tuple(leaves)
    return None if kwargs else tuple(args)


def _symbol_hint(ep: Any, symbol: str) -> int:
    for sym, value_range in ep.range_constraints.items():
        if str(sym) == symbol:
            return max(int(value_range.lower), 2)
    return 2


def _dynamic_dims(ep: Any) -> list[dict[str, Any]]:
    ranges = {str(sym): value_range for sym, value_range in ep.range_constraints.items()}
    dims: list[dict[str, Any]] = []
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


# ------------------------------------------------------------------ refused at the door, after loading
def refuse_denied_ops_in_programs(programs: list[Any]) -> None:
    """Raise `OpRefused` (status "rejected") if any node of any graph of these ExportedPrograms (higher-order
    ops' subgraphs included) calls an op that touches files or the process (advisor.core.denied_ops)."""
    for index, ep in enumerate(programs):
        for module_name, graph_module in ep.graph_module.named_modules():
            if not isinstance(graph_module, torch.fx.GraphModule):
                continue
            for node in graph_module.graph.nodes:
                if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
                    continue
                schema = node.target._schema
                reason = denied_reason(schema.name, _string_arguments(schema))
                if reason:
                    graph = f"graph {module_name or 'main'}" + (f" of program {index + 1}" if len(programs) > 1 else "")
                    raise refusal(
                        f"{schema.name}.{schema.overload_name or 'default'}", reason, f"node {node.name} ({graph})"
                    )


def refuse_denied_ops_in_script(script_module: Any) -> None:
    """Raise `OpRefused` if any method of the module or a submodule (`__setstate__`, exported methods and every
    function or method they call, inlined; `fork` subgraphs too) calls an op that touches files or the process."""
    for module_name, module in script_module.named_modules():
        for method_name in module._c._method_names():
            where = f"{module_name + '.' if module_name else ''}{method_name}"
            _refuse_in_graph(module._c._get_method(method_name).inlined_graph, where)


def _refuse_in_graph(graph: Any, where: str) -> None:
    for node in graph.nodes():
        for block in node.blocks():
            _refuse_in_graph(block, where)
        if node.hasAttribute("Subgraph") and node.kindOf("Subgraph") == "g":
            _refuse_in_graph(node.g("Subgraph"), where)
        try:
            schema = node.schema()
        except RuntimeError:
            schema = None
        name = node.kind()
        arguments = _string_arguments(schema) if schema is not None and not isinstance(schema, str) else []
        reason = denied_reason(name, arguments)
        if reason:
            raise refusal(name, reason, f"the TorchScript method {where}")


def _string_arguments(schema: Any) -> list[str]:
    return [argument.name for argument in schema.arguments if "str" in str(argument.type)]


# ------------------------------------------------------------------ TorchScript
def _load_torchscript(path: str, inputs_file: str | None, input_shapes: list[str]) -> LoadedModel:
    try:
        script_module = torch.jit.load(path, map_location="cpu")
    except Exception as exc:  # noqa: BLE001
        refused = _refused_by_weights_only(exc)
        if refused is not None:
            raise refused from None
        raise LoadError(f"torch.jit.load could not load this TorchScript file: {first_line(exc)}") from exc
    refuse_denied_ops_in_script(script_module)
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
    specs: list[dict[str, Any]] = [
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
        return None, first_line(exc)
