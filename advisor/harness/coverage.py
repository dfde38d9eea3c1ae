"""Per-op coverage of the two graph compilers: Inductor (`torch.compile`) and TorchAir's GE mode.

Inductor coverage is read from the installed torch's own registries. TorchAir coverage is read from the live
converter registry where torchair really imports (an NPU node with CANN), and everywhere else from
`advisor/harness/data/torchair_coverage.json`, generated from the torch_npu wheel by `scripts/gen_torchair_coverage.py`.

Both TorchAir sources classify a converter the same way (`classify_converter`); the live reader also asks
torchair's own `fx_summary._get_converter_status` and keeps the more cautious of the two verdicts, because torchair's
check only recognises `raise NotImplementedError` as a partial marker.

TorchAir coverage describes the GE graph mode (`mode="max-autotune"`, the default). The `npugraph_ex` and
`reduce-overhead` modes capture the eager aclnn kernels into an ACL graph and use no GE converters, so converter
coverage does not limit them.

Op names everywhere are `str(OpOverload)`: "aten.addmm.default", "npu.npu_rms_norm.default".
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import json
import re
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from advisor.core.results import InductorStatus, OnnxExportStatus, TorchAirStatus

TABLE_PATH = Path(__file__).resolve().parent / "data" / "torchair_coverage.json"

# What torchair.fx_summary._get_converter_status returns, mapped onto our statuses.
_LIVE_STATUS: dict[str, TorchAirStatus] = {
    "未注册": "none",  # not registered
    "未实现": "stub",  # the converter only raises NotImplementedError
    "部分支持": "partial",  # raises for some argument combinations
    "已支持": "supported",
}

_STATUS_RANK: dict[TorchAirStatus, int] = {"none": 0, "stub": 1, "partial": 2, "supported": 3}

# A raise whose message says the converter cannot handle a case (as opposed to validating arguments).
_UNSUPPORTED_CASE = re.compile(
    r"not\s+(be\s+)?(implemented|support(ed)?)|unsupported|only\s+support|does\s+not\s+support", re.IGNORECASE
)

_AUTO_CONVERTER_NOTE = (
    "no explicit converter; TorchAir tries to auto-generate one from the node's CANN (an Ascend IR named after "
    "the op in CamelCase, inputs matching), so GE coverage is only known there (measure it on an NPU node)"
)
_BUILTIN_NONE_NOTE = "no TorchAir converter: GE-mode (max-autotune) compilation of a graph with this op fails"


# ------------------------------------------------------------------ resolving op names
def op_name(op: Any) -> str:
    """The name coverage lookups use: "aten.addmm.default" for an OpOverload (`str(op)`), "aten.addmm" for a
    packet, "higher_order.cond" for a higher-order op, "operator.add" for a Python builtin; strings are normalised
    ("aten::addmm" -> "aten.addmm", "torch.ops.aten.addmm.default" -> "aten.addmm.default")."""
    import torch

    if isinstance(op, str):
        return _normalise_name(op)
    if isinstance(op, torch._ops.HigherOrderOperator):
        return f"higher_order.{op.name()}"
    if isinstance(op, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(op)
    return _callable_name(op)


def resolve_op(name: str) -> Any | None:
    """The torch op object for "aten.addmm.default" / "npu.x.default" / "aten::addmm", or None if unknown here."""
    import torch

    parts = _normalise_name(name).split(".")
    if len(parts) < 2:
        return None
    namespace, op, *overload = parts
    try:
        packet = getattr(getattr(torch.ops, namespace), op)
        return getattr(packet, overload[0]) if overload else packet
    except (AttributeError, RuntimeError):
        return None


def _normalise_name(name: str) -> str:
    name = name.strip().removeprefix("torch.ops.")
    if "::" in name:
        namespace, rest = name.split("::", 1)
        name = f"{namespace}.{rest}"
    return name


# ------------------------------------------------------------------ Inductor
def has_fake_kernel(op: Any) -> bool:
    """Whether FakeTensor can run `op`, so Dynamo/export can trace it (`fake_tensor_handles` for an OpOverload).

    Without that, `torch.compile` breaks the graph at the op or fails on it.
    """
    import torch

    op = _as_op(op)
    if not isinstance(op, torch._ops.OpOverload):
        return True  # higher-order ops and Python callables are traced by Dynamo itself
    return fake_tensor_handles(op)


def fake_tensor_handles(op: Any) -> bool:
    """Whether FakeTensorMode (what Dynamo and export trace with) has a way to run `op`, checked against its own
    dispatch (`FakeTensorMode._dispatch_impl` / `dispatch`), in its order:

    - ops it special-cases: the lift functions (`aten.lift_fresh_copy`), its meta and direct handlers;
    - a Python meta (`torch._decomp.meta_table`) or a decomposition (`torch._decomp.decomposition_table`,
      or a CompositeImplicitAutograd kernel: `OpOverload.decompose`);
    - a prim's meta, a registered fake impl (`torch.library.register_fake`), FakeTensor's own implementations
      (`torch._subclasses.fake_impls.op_implementations_checks`: constructors, data-dependent ops, ...);
    - a Meta kernel of its own (registered for Meta, CompositeExplicitAutograd or its NonFunctional variant; the
      Meta backend fallback, which `fake_impls.has_meta` also counts, only raises), or for a custom op a trivial
      fake impl (`out=` / in-place ops);
    - for built-in namespaces, the fallback that runs the real kernel on zeros (static shapes).

    A `torch.library.custom_op` always has a Meta kernel that only raises until `register_fake` is called: it
    counts only with a fake impl or a CompositeImplicitAutograd kernel.
    """
    import torch
    from torch._subclasses import fake_impls
    from torch._subclasses.fake_tensor import FakeTensorMode

    if not isinstance(op, torch._ops.OpOverload):
        return True
    from torch._library.custom_ops import _maybe_get_opdef

    opdef = _maybe_get_opdef(op)
    if opdef is not None:
        return opdef._abstract_fn is not None or _has_kernel(op, "CompositeImplicitAutograd")
    if op in FakeTensorMode.lift_fns or op in _fake_tensor_handlers():
        return True
    from torch._decomp import decomposition_table, meta_table

    if op in meta_table or op in decomposition_table or _has_kernel(op, "CompositeImplicitAutograd"):
        return True
    if "prims::" in op._schema.name and hasattr(op, "prim_meta_impl"):
        return True
    from torch._library.simple_registry import singleton

    if singleton.find(op.name()).fake_impl.kernel is not None:
        return True
    if any(_safe_check(check, op) for check, _ in fake_impls.op_implementations_checks):
        return True
    if any(_has_kernel(op, key) for key in _META_KEYS):  # not fake_impls.has_meta: it counts the Meta fallback
        return True
    from torch._library.utils import can_generate_trivial_fake_impl

    if can_generate_trivial_fake_impl(op):
        return True
    return op.namespace in FakeTensorMode._can_run_unsafe_fallback_allowed_namespaces


_META_KEYS = ("Meta", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


@functools.cache
def _fake_tensor_handlers() -> frozenset[Any]:
    """The ops FakeTensorMode answers itself before dispatching (metadata queries such as prim.device)."""
    from torch._subclasses import fake_tensor

    handled: set[Any] = set()
    for name in ("_DISPATCH_META_HANDLERS", "_DISPATCH_HANDLE_DIRECTLY"):
        handled.update(getattr(fake_tensor, name, ()) or ())
    return frozenset(handled)


def _safe_check(check: Callable[[Any], bool], op: Any) -> bool:
    try:
        return bool(check(op))
    except Exception:  # noqa: BLE001 - a check written for other ops: it does not claim this one
        return False


def inductor_status(op: Any) -> InductorStatus:
    """How Inductor handles `op` (an OpOverload, a higher-order op, a Python callable or an op name).

    - lowered: Inductor has a lowering (generated code, or a library call such as `extern_kernels.addmm`);
    - decomposed: Inductor rewrites it into other ops first (see the decomposed graph for what they become);
    - fallback: runs the op's own kernel as an extern call (explicit `make_fallback`, or the implicit fallback
      for ops Inductor does not know): no fusion across it;
    - untraceable: no fake/Meta kernel, so Dynamo cannot trace it at all.

    The registries grow during a compile (ops that fell back get registered as fallbacks), which leaves
    the answer for them unchanged; classify before compiling anyway, the answer is cheaper then.
    """
    import torch

    op = _as_op(op)
    lowering, decompositions, implicit_fallbacks = _inductor_registries()
    if isinstance(op, torch._ops.HigherOrderOperator):
        # Not lowered directly: AOTAutograd/Inductor passes inline or rewrite it (wrap, auto_functionalized_v2, ...).
        return "lowered" if op in lowering.lowerings else "decomposed"
    if not isinstance(op, torch._ops.OpOverload):
        return "lowered"  # operator.getitem, SymInt arithmetic: handled natively
    if op in lowering.fallbacks:
        return "fallback"
    if op in lowering.lowerings or op.overloadpacket in lowering.lowerings:
        return "lowered"
    if op in decompositions or _has_kernel(op, "CompositeImplicitAutograd"):
        return "decomposed"
    if not has_fake_kernel(op):
        return "untraceable"
    return "fallback" if implicit_fallbacks else "untraceable"


@functools.cache
def _inductor_registries() -> tuple[Any, Mapping[Any, Any], bool]:
    """Inductor's lowering module, its decomposition table and the implicit-fallback flag (imported once: ~1.6 s)."""
    import torch._inductor.config as inductor_config
    from torch._inductor import lowering
    from torch._inductor.decomposition import select_decomp_table

    return lowering, select_decomp_table(), bool(inductor_config.implicit_fallbacks)


def _as_op(op: Any) -> Any:
    """The op object to classify: names are resolved, a packet ("aten::linear" in TorchScript) stands for its
    default overload (or its first one)."""
    import torch

    if isinstance(op, str):
        resolved = resolve_op(op)
        if resolved is None:
            raise ValueError(f"unknown operator {op!r}: it is not registered in this process")
        op = resolved
    if isinstance(op, torch._ops.OpOverloadPacket):
        overloads = op.overloads()
        if overloads:
            return getattr(op, "default" if "default" in overloads else overloads[0])
    return op


def _has_kernel(op: Any, dispatch_key: str) -> bool:
    import torch

    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), dispatch_key)


# ------------------------------------------------------------------ ONNX export
def onnx_export_status(op: Any) -> OnnxExportStatus | None:
    """How `torch.onnx.export(dynamo=True)` (the ONNX Runtime options' export) takes a custom op:

    - decomposed: it has a CompositeImplicitAutograd kernel, which the exporter's decompositions inline into the
      ops it calls (aten ops it translates);
    - translated: the exporter's registry (onnxscript's torchlib) has a translation for it (quantized_decomposed::,
      torchvision:: ops);
    - none: neither - an opaque op (a `torch.library.custom_op`, a vendor's npu:: op): the export fails on it.

    None where this process cannot tell: not an OpOverload, or the exporter's packages are missing. The translations
    come from a table (`_onnx_translated_ops`), read once per process."""
    import torch

    op = _as_op(op)
    if not isinstance(op, torch._ops.OpOverload):
        return None
    if _has_kernel(op, "CompositeImplicitAutograd"):
        return "decomposed"
    translated = _onnx_translated_ops()
    if translated is None:
        return None
    return "translated" if str(op) in translated else "none"


ONNX_TABLE_PATH = Path(__file__).resolve().parent / "data" / "onnx_translated_custom_ops.json"


@functools.cache
def _onnx_translated_ops() -> frozenset[str] | None:
    """The ops outside aten/prims that `torch.onnx.export(dynamo=True)` has a translation for, by name
    ("ns.op.overload"), from the table ONNX_TABLE_PATH (quantized_decomposed::, torchvision::, ...). A table, not the
    exporter's registry: building that imports onnxscript (~1.8 s), which every inspection of a custom-op model
    would pay on the answer's critical path. `live_onnx_translated_ops` reads the registry; a test holds the table
    to it for the installed torch (tests/harness/test_onnx_custom_ops.py), and `python -m
    advisor.harness.coverage --write-onnx-table` rewrites it. None without the exporter's packages (unknown)."""
    if importlib.util.find_spec("onnxscript") is None:
        return None
    try:
        names = json.loads(ONNX_TABLE_PATH.read_text())["translated"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return frozenset(str(name) for name in names)


def live_onnx_translated_ops() -> frozenset[str] | None:
    """The same set read from the exporter's registry (`ONNXRegistry.from_torchlib`'s sources: torch's own torchlib
    and onnxscript's), by name, because the registry resolves its names to ops when it is built and leaves out those
    not registered yet (a quantized_decomposed:: op before torch.ao's module that defines it is imported). Only the
    custom namespaces' ops (not aten/prims, not Python builtins). None where this torch's private registry API no
    longer reads as expected."""
    from advisor.core.artifacts import BUILTIN_OP_NAMESPACES
    from advisor.core.decision.cheap_evidence import OP_NAME

    try:
        from torch.onnx._internal.exporter import _registration

        names = {str(meta.fx_target) for meta in _registration._torchlib_registry.get_torchlib_ops()}
        for meta in _registration.onnxscript_apis.get_torchlib_ops():
            namespace, _, rest = str(meta.qualified_name).partition("::")
            names.add(f"{namespace}.{rest}" if "." in rest else f"{namespace}.{rest}.default")
    except Exception:  # noqa: BLE001 - a torch without this exporter, a broken onnxscript: unknown
        return None
    if not _ONNX_SENTINEL_OPS <= names:
        return None
    not_custom = BUILTIN_OP_NAMESPACES | {"_operator", "math"}  # aten/prims, and Python's own functions
    return frozenset(n for n in names if OP_NAME.fullmatch(n) and n.split(".")[0] not in not_custom)


_ONNX_SENTINEL_OPS = frozenset({"aten.relu.default", "aten.addmm.default"})  # any exporter translates these


def write_onnx_table(path: Path = ONNX_TABLE_PATH) -> None:
    """Rewrite the table from the installed exporter's registry."""
    import torch

    live = live_onnx_translated_ops()
    if live is None:
        raise SystemExit("the ONNX exporter's registry could not be read (is onnxscript installed?)")
    table = {"torch": torch.__version__.split("+")[0], "translated": sorted(live)}
    path.write_text(json.dumps(table, indent=1) + "\n")


# ------------------------------------------------------------------ TorchAir
class TorchAirCoverage(Protocol):
    def status(self, op_name: str) -> TorchAirStatus: ...
    def note(self, op_name: str) -> str | None: ...
    def source(self) -> dict[str, Any]: ...


class TorchAirTable:
    """TorchAir converter coverage from the table generated from a torch_npu wheel (no CANN needed)."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._ops: Mapping[str, TorchAirStatus] = data.get("ops", {})
        self._npu_meta: frozenset[str] = frozenset(data.get("npu_meta", ()))
        self.torch_npu_version: str | None = data.get("torch_npu_version")
        self.wheel: str | None = data.get("wheel")

    @classmethod
    def load(cls, path: Path = TABLE_PATH) -> TorchAirTable:
        """The table at `path` (read once per path); an empty table (everything "none") if it is missing."""
        return _load_table(path)

    def status(self, op_name: str) -> TorchAirStatus:
        name = _normalise_name(op_name)
        for candidate in _lookup_names(name):
            if candidate in self._ops:
                return self._ops[candidate]
        return "none"

    def note(self, op_name: str) -> str | None:
        return _note_for(op_name, self.status(op_name))

    def has_npu_meta(self, op_name: str) -> bool | None:
        """Whether torch_npu registers a Python Meta/fake kernel for an `npu::` op (None for other namespaces)."""
        name = _normalise_name(op_name)
        if not name.startswith("npu."):
            return None
        if name.count(".") == 1:  # a packet: any overload
            return any(meta.startswith(f"{name}.") for meta in self._npu_meta)
        return name in self._npu_meta

    def source(self) -> dict[str, Any]:
        return {"source": "table", "torch_npu_version": self.torch_npu_version}


class LiveTorchAirRegistry:
    """TorchAir converter coverage read from an imported torchair (only possible where CANN is installed)."""

    def __init__(self, torchair: Any, torch_npu_version: str | None = None) -> None:
        self._status_of: Callable[[Any], str] = torchair.fx_summary._get_converter_status
        converter_module = torchair._ge_concrete_graph.fx2ge_converter
        self._builtin_converters: Mapping[Any, Any] = getattr(converter_module, "_CONVERTERS", {})
        self.torch_npu_version = torch_npu_version

    def status(self, op_name: str) -> TorchAirStatus:
        """torchair's own verdict, lowered to the table's rule where the source shows more (see the module doc)."""
        converter = self._converter(op_name)
        if converter is None:
            return "none"
        verdicts = [_LIVE_STATUS[v] for v in [self._status_of(converter)] if v in _LIVE_STATUS]
        from_source = _classify_converter_object(converter)
        if from_source is not None:
            verdicts.append(from_source)
        return min(verdicts, key=_STATUS_RANK.__getitem__) if verdicts else "partial"

    def note(self, op_name: str) -> str | None:
        return _note_for(op_name, self.status(op_name))

    def source(self) -> dict[str, Any]:
        return {"source": "live", "torch_npu_version": self.torch_npu_version}

    def _converter(self, op_name: str) -> Any | None:
        name = _normalise_name(op_name)
        for candidate in _lookup_names(name):
            op = resolve_op(candidate)
            converter = getattr(op, "_ge_converter", None) if op is not None else None
            if converter is not None:
                return converter
        for target, converter in self._builtin_converters.items():
            if name in (str(target), _callable_name(target)):
                return converter
        return None


def classify_converter(func: ast.FunctionDef | ast.AsyncFunctionDef) -> TorchAirStatus:
    """The status of one TorchAir converter function from its source (the rule the coverage table uses).

    - stub: the body (after the docstring) is a single `raise` ("... ge_converter is not implemented!"
      / "... is not supported!"): every call fails;
    - partial: it converts some cases, but raises `NotImplementedError` (torchair's own partial marker, see
      `torchair.fx_summary._get_converter_status`) or an error whose message says a case is not implemented /
      not supported / unsupported / only supported for ... (e.g. int8 matmul, training-mode batch norm);
      raises that only validate arguments ("padding length should be at least 2") do not count;
    - supported: anything else.
    """
    body = [stmt for stmt in func.body if not _is_docstring(stmt)]
    if len(body) == 1 and isinstance(body[0], ast.Raise):
        return "stub"
    for node in ast.walk(func):
        if isinstance(node, ast.Raise) and node.exc is not None and _raises_unsupported_case(node.exc):
            return "partial"
    return "supported"


def _raises_unsupported_case(exc: ast.expr) -> bool:
    called = exc.func if isinstance(exc, ast.Call) else exc
    if isinstance(called, ast.Name) and called.id == "NotImplementedError":
        return True
    texts = [node.value for node in ast.walk(exc) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return any(_UNSUPPORTED_CASE.search(text) for text in texts)


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _classify_converter_object(converter: Any) -> TorchAirStatus | None:
    """`classify_converter` on a live converter function's source, or None when the source cannot be read."""
    try:
        source = textwrap.dedent(inspect.getsource(inspect.unwrap(converter)))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return None
    funcs = [node for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    return classify_converter(funcs[0]) if funcs else None


def torchair_status(op_name: str) -> TorchAirStatus:
    """TorchAir GE-mode coverage of an op: supported / partial / stub (converter raises) / none (no converter).

    For aten/prims ops `none` means GE-mode compilation fails; for `npu::` ops see `torchair_note`.
    """
    return active_torchair_coverage().status(op_name)


def worst_torchair_status(statuses: Iterable[TorchAirStatus]) -> TorchAirStatus:
    """The least covered of `statuses` (supported > partial > stub > none); "supported" when there are none."""
    return min(statuses, key=_STATUS_RANK.__getitem__, default="supported")


def torchair_note(op_name: str) -> str | None:
    """A caveat that qualifies `torchair_status` (e.g. auto-generated converters for custom ops), or None."""
    return active_torchair_coverage().note(op_name)


def torchair_may_auto_convert(op_name: str) -> bool:
    """A custom (not aten/prims) op without an explicit converter: TorchAir tries to auto-generate one from the
    Ascend IRs of the NPU node's CANN, so whether GE mode covers it is unknown until compiled there."""
    namespace = _normalise_name(op_name).split(".", 1)[0]
    return namespace not in ("aten", "prims") and torchair_status(op_name) == "none"


def torchair_source() -> dict[str, Any]:
    """Where `torchair_status` answers come from ("live" registry or "table") and the torch_npu version."""
    return active_torchair_coverage().source()


def torch_npu_registers_meta(op_name: str) -> bool | None:
    """Whether the torch_npu release of the coverage table registers a Python Meta/fake kernel for an `npu::` op.

    Useful where the op in hand is a loader stub (no torch_npu here): without such a kernel Dynamo cannot trace
    the op on an NPU node either. None for non-`npu` ops or when no table is available.
    """
    table = TorchAirTable.load()
    return table.has_npu_meta(op_name) if table.torch_npu_version else None


@functools.cache
def active_torchair_coverage() -> TorchAirCoverage:
    """The live registry when a real torch_npu is imported and torchair loads, else the generated table."""
    live = _load_live_registry()
    return live if live is not None else TorchAirTable.load()


def _load_live_registry() -> LiveTorchAirRegistry | None:
    torch_npu = sys.modules.get("torch_npu")
    if torch_npu is None or getattr(torch_npu, "__advisor_test_double__", False):
        return None
    try:
        importlib.import_module("torchair")
        torchair = sys.modules["torchair"]
        importlib.import_module("torchair.fx_summary")
        importlib.import_module("torchair._ge_concrete_graph.fx2ge_converter")
    except Exception:  # without CANN the converter modules cannot load; the table still answers
        return None
    try:  # npu:: converters are otherwise imported on first use (fx2ge_converter._get_converter)
        importlib.import_module("torchair._ge_concrete_graph.ge_converter.custom")
    except ImportError:
        pass
    return LiveTorchAirRegistry(torchair, getattr(torch_npu, "__version__", None))


@functools.cache
def _load_table(path: Path) -> TorchAirTable:
    try:
        return TorchAirTable(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return TorchAirTable({})


def _lookup_names(name: str) -> tuple[str, ...]:
    """An overload falls back to its packet ("aten.amax.out" -> "aten.amax"), a packet to its default overload."""
    parts = name.split(".")
    if len(parts) > 2:
        return (name, ".".join(parts[:2]))
    if len(parts) == 2:
        return (name, f"{name}.default")
    return (name,)


def _callable_name(target: Any) -> str:
    module = getattr(target, "__module__", None) or ""
    return f"{module.lstrip('_')}.{getattr(target, '__name__', '')}"


def _note_for(op_name: str, status: TorchAirStatus) -> str | None:
    if status != "none":
        return None
    namespace = _normalise_name(op_name).split(".", 1)[0]
    return _BUILTIN_NONE_NOTE if namespace in ("aten", "prims") else _AUTO_CONVERTER_NOTE


if __name__ == "__main__":  # python -m advisor.harness.coverage --write-onnx-table
    if sys.argv[1:] == ["--write-onnx-table"]:
        write_onnx_table()
    else:
        raise SystemExit("usage: python -m advisor.harness.coverage --write-onnx-table")
