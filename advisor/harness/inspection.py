"""What is inside a model file: one JSON-serializable dict in the shape of advisor.core.results.Inspection.

Ops come from the exported graph (the TorchScript graph when conversion failed), each with its coverage by
Inductor and TorchAir, judged on the ops each compiler really receives for it (see
advisor/harness/decomposed_coverage.py); graph breaks from Dynamo's explain, only when the model can run
here; FLOPs on fake tensors. Nothing in the result carries source paths from the machine that exported the model.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch

from advisor.core.artifacts import BUILTIN_OP_NAMESPACES
from advisor.harness import coverage
from advisor.harness.decomposed_coverage import add_table_notes, judge_on_received_ops
from advisor.harness.flops import count_flops
from advisor.harness.graph_breaks import find_graph_breaks, not_analysed
from advisor.harness.loading import LoadedModel, load_model

_QUIET_LOGGERS = ("torch._dynamo", "torch._export", "torch.export", "torch.fx.experimental.symbolic_shapes")


def inspect_model(
    path: str, *, inputs_file: str | None = None, input_shapes: list[str] | None = None
) -> dict[str, Any]:
    """Load and inspect a model file. Raises `advisor.harness.loading.LoadError` with a readable message."""
    with _quiet_torch_logs():
        return inspect_loaded(load_model(path, inputs_file=inputs_file, input_shapes=input_shapes))


def inspect_loaded(loaded: LoadedModel) -> dict[str, Any]:
    """Inspect an already loaded model."""
    with _quiet_torch_logs():
        exported = loaded.exported_program is not None
        ops = [
            _op_info(name, op, count, loaded.stubbed_ops, exported)
            for name, (op, count) in _op_histogram(loaded).items()
        ]
        warnings = list(loaded.warnings)
        if loaded.exported_program is not None:
            warnings += judge_on_received_ops(loaded.exported_program, ops)
        else:  # a TorchScript graph cannot be decomposed here: the table's statuses stand
            add_table_notes(ops)
        warnings += [
            f"{op['name']} has no known fake (meta) kernel: Dynamo cannot trace it, so torch.compile breaks the "
            "graph around it or fails (register one with torch.library.register_fake)"
            for op in ops
            if not op["has_fake_kernel"]
        ]
        runnable, why_not = loaded.runnable
        flops = count_flops(loaded.module, loaded.example_inputs, allow_real_run=runnable)
        if flops is None:
            warnings.append("FLOPs could not be counted for this model")
        return {
            "format": loaded.format,
            "saved_with_torch": loaded.saved_with_torch,
            "parameters": _parameter_totals(loaded),
            "flops": flops,
            "inputs": loaded.input_specs,
            "ops": ops,
            "custom_ops": [op for op in ops if op["namespace"] not in BUILTIN_OP_NAMESPACES],
            "graph_breaks": _graph_breaks(loaded),
            "dynamic_dims": loaded.dynamic_dims,
            "torchair_coverage": coverage.torchair_source(),
            "runnable": {"ok": runnable, "reason": why_not},
            "warnings": warnings,
        }


# ------------------------------------------------------------------ ops
def _op_histogram(loaded: LoadedModel) -> dict[str, tuple[Any, int]]:
    """name -> (op object or None, call count), most frequent first."""
    counts: Counter[str] = Counter()
    objects: dict[str, Any] = {}
    if loaded.exported_program is not None:
        for graph_module in loaded.exported_program.graph_module.modules():
            if not isinstance(graph_module, torch.fx.GraphModule):
                continue
            for node in graph_module.graph.nodes:
                if node.op == "call_function" and isinstance(
                    node.target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)
                ):
                    name = _target_name(node.target)
                    counts[name] += 1
                    objects[name] = node.target
    else:
        for name in _torchscript_op_names(loaded.script_module.inlined_graph):
            if name not in objects:
                objects[name] = coverage.resolve_op(name)
                if objects[name] is not None and not _is_dispatcher_op(objects[name]):
                    loaded.warnings.append(f"TorchScript-only scalar op {name} is not listed")
            if objects[name] is None or _is_dispatcher_op(objects[name]):
                counts[name] += 1
    return {name: (objects[name], count) for name, count in counts.most_common()}


def _is_dispatcher_op(op: Any) -> bool:
    """False for TorchScript-only ops (scalar math such as aten::gt.float_int) that have no dispatcher entry."""
    try:
        torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CPU")
    except (RuntimeError, AttributeError):
        return False
    return True


def _target_name(target: Any) -> str:
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    return str(target)


def _torchscript_op_names(graph: Any) -> Iterator[str]:
    """'aten.add.Tensor' for every operator call in a TorchScript graph and its nested blocks (prim:: skipped)."""
    for node in graph.nodes():
        for block in node.blocks():
            yield from _torchscript_op_names(block)
        if node.kind().startswith("prim::"):
            continue
        try:
            schema_name = str(node.schema()).split("(", 1)[0]
        except RuntimeError:
            schema_name = node.kind()
        if schema_name in ("", "(no schema)"):
            schema_name = node.kind()
        namespace, _, rest = schema_name.partition("::")
        yield f"{namespace}.{rest}" if "." in rest else f"{namespace}.{rest}.default"


def _op_info(name: str, op: Any, count: int, stubbed: list[str], exported: bool = False) -> dict[str, Any]:
    """One op's entry. `has_fake_kernel` only from evidence: a built-in op of an ExportedProgram was run on fake
    tensors when the program was exported (export traces with FakeTensor, and draft_export infers fake kernels
    only for custom ops), so it has one; other ops are checked against FakeTensor's own dispatch
    (`coverage.fake_tensor_handles`); a loader stub's fake kernel says nothing about the real vendor op."""
    if op is None:
        inductor, fake = "untraceable", False
    elif name in stubbed:
        # The stub's own fake kernel says nothing about the real op: ask what the vendor package ships.
        fake = _vendor_has_meta(name)
        inductor = coverage.inductor_status(op) if fake else "untraceable"
    else:
        fake = (exported and _is_builtin(op)) or coverage.has_fake_kernel(op)
        inductor = coverage.inductor_status(op)
        if fake and inductor == "untraceable":  # inductor_status asks has_fake_kernel, not the export's evidence
            inductor = "fallback"
    info = {
        "name": name,
        "namespace": name.split(".")[0],
        "count": count,
        "has_fake_kernel": fake,
        "coverage": {"inductor": inductor, "torchair": coverage.torchair_status(name)},
    }
    if op is not None and name not in stubbed and name.split(".")[0] not in BUILTIN_OP_NAMESPACES:
        # whether the ONNX export can take it (a stub says nothing of the real op): plan pruning reads it
        onnx = coverage.onnx_export_status(op)
        if onnx is not None:
            info["coverage"]["onnx"] = onnx
    return info


def _is_builtin(op: Any) -> bool:
    """aten / prims / ... (torch's own namespaces); higher-order ops count as built in."""
    from torch._library.utils import is_builtin

    return not isinstance(op, torch._ops.OpOverload) or is_builtin(op)


def _vendor_has_meta(name: str) -> bool:
    """Whether torch_npu registers a fake kernel for a stubbed op, per the TorchAir table (False if unknown)."""
    has_npu_meta = getattr(coverage.active_torchair_coverage(), "has_npu_meta", None)
    return bool(has_npu_meta(name)) if has_npu_meta else False


# ------------------------------------------------------------------ parameters, graph breaks
def _parameter_totals(loaded: LoadedModel) -> dict[str, int]:
    if loaded.script_module is not None:
        parameters = list(loaded.script_module.parameters())
    else:
        ep = loaded.exported_program
        parameters = [ep.state_dict[name] for name in ep.graph_signature.parameters if name in ep.state_dict]
    unique = {(p.untyped_storage().data_ptr(), p.storage_offset(), tuple(p.shape)): p for p in parameters}
    return {
        "count": sum(p.numel() for p in unique.values()),
        "bytes": sum(p.numel() * p.element_size() for p in unique.values()),
    }


def _graph_breaks(loaded: LoadedModel) -> dict[str, Any]:
    runnable, why_not = loaded.runnable
    if not runnable:
        return not_analysed(f"graph breaks need a real run of the model, which is not possible here: {why_not}")
    if loaded.exported_program is None:
        return not_analysed(
            f"the TorchScript graph could not be converted to an ExportedProgram ({loaded.conversion_error}) and "
            "torch.compile cannot trace TorchScript itself; the ops listed are the TorchScript graph's"
        )
    return find_graph_breaks(loaded.module, loaded.example_inputs, script_module=loaded.script_module)


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """Dynamo and export log graph breaks and deserialization notes as warnings; the result reports them."""
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
