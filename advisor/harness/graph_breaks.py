"""Graph breaks under `torch.compile`, from Dynamo's own `torch._dynamo.explain`.

explain runs the model for real (with Dynamo's "eager" backend, no Inductor compile), so callers only use
it on runnable models; it runs under `torch.no_grad()` with Dynamo's caches reset before and after. The answer is an
advisor.core.results.GraphBreaks, as a plain dict.
"""

from __future__ import annotations

import os
import re
from typing import Any

from advisor.core.text import first_line


def find_graph_breaks(
    fn: Any, args: tuple, kwargs: dict | None = None, *, script_module: Any | None = None
) -> dict[str, Any]:
    """Count and explain the graph breaks Dynamo hits when compiling `fn(*args, **kwargs)`.

    A break's location is the user's source line: Dynamo's innermost frame when it is a real file; when it is the
    generated code of a GraphModule (`<eval_with_key>.N`: `ep.module()`, also what a TorchScript file converts to),
    the graph node on that line, and the source line export recorded for it (`node.meta["stack_trace"]`) or, given
    the TorchScript module the graph was converted from, the line TorchScript kept in its debug info
    (`node.sourceRange()`: the traced call stack, or the scripted source) for the same op; else the location says
    it is generated code and names the op."""
    import torch._dynamo

    if isinstance(fn, torch.jit.ScriptModule):
        return not_analysed(
            "torch.compile cannot trace a TorchScript module (Dynamo skips it and runs it eagerly), and it could "
            "not be converted to an ExportedProgram"
        )
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            result = torch._dynamo.explain(fn)(*args, **(kwargs or {}))
    except Exception as exc:  # noqa: BLE001 - a hard Dynamo error is a finding, reported, not raised
        return not_analysed(f"torch.compile fails on this model (a hard error, not a graph break): {_summary(exc)}")
    finally:
        torch._dynamo.reset()
    if result.graph_count == 0:
        return not_analysed("Dynamo compiled nothing: it skipped the whole forward and would run it eagerly")
    sources = torchscript_sources(script_module) if script_module is not None else None
    reasons: list[dict[str, Any]] = [
        {"reason": first_line(reason.reason), "location": _location(reason.user_stack, fn, sources)}
        for reason in result.break_reasons
    ]
    return {
        "analysed": True,
        "count": result.graph_break_count,
        "graph_count": result.graph_count,
        "reasons": reasons,
    }


def not_analysed(note: str) -> dict[str, Any]:
    return {"analysed": False, "count": None, "graph_count": None, "reasons": [], "note": note}


def _location(user_stack: list[Any] | None, fn: Any = None, sources: list[tuple[str, str]] | None = None) -> str | None:
    """'file.py:12 in forward' of the innermost user frame; only the file's base name (no uploader paths)."""
    if not user_stack:
        return None
    frame = user_stack[-1]
    if not frame.filename.startswith(_GENERATED):
        return f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}"
    found = _generated_node(fn, frame.filename, frame.lineno)
    if found is None:
        return f"generated code ({frame.filename}:{frame.lineno}, not your source file)"
    module, node = found
    op = _op_name(node.target)
    original = _stack_trace_line(node.meta.get("stack_trace")) or _torchscript_line(module, node, sources)
    if original is not None:
        return f"{original} ({op})"
    return f"generated code ({frame.filename}:{frame.lineno}, not your source file) at {op}"


_GENERATED = "<eval_with_key>"  # torch.fx's name for the code it generates for a GraphModule
_TRACED_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<name>\S+)$")  # torch.jit.trace's call stack
_SOURCE_FILE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<name>\S+))?')


def _generated_node(fn: Any, filename: str, lineno: int) -> tuple[Any, Any] | None:
    """(GraphModule, node) whose generated code `filename`:`lineno` is, as Dynamo maps it back
    (torch/_dynamo/output_graph.py: `_lineno_map[lineno - forward.__code__.co_firstlineno]` is the node index)."""
    import torch

    modules = fn.modules() if isinstance(fn, torch.nn.Module) else ()
    for module in modules:
        if not isinstance(module, torch.fx.GraphModule):
            continue
        code = getattr(type(module).forward, "__code__", None)
        if code is None or code.co_filename != filename:
            continue
        index = (getattr(module, "_lineno_map", None) or {}).get(lineno - code.co_firstlineno)
        nodes = list(module.graph.nodes)
        if index is not None and 0 <= index < len(nodes):
            return module, nodes[index]
    return None


def _op_name(target: Any) -> str:
    return str(target) if not callable(target) or hasattr(target, "_schema") else getattr(target, "__name__", "?")


def _stack_trace_line(stack_trace: str | None) -> str | None:
    """'model.py:12 in forward': the innermost frame of a recorded stack trace."""
    frames = list(_SOURCE_FILE.finditer(stack_trace or ""))
    if not frames:
        return None
    last = frames[-1]
    return f"{os.path.basename(last['file'])}:{last['line']} in {last['name'] or '?'}"


def torchscript_sources(script_module: Any) -> list[tuple[str, str]]:
    """(op packet name, 'model.py:9 in forward') per operator call of the TorchScript graph, in graph order, where
    TorchScript kept the original line: a traced node's source range is the Python call stack at trace time (its
    innermost frame outside torch is the user's), a scripted node's starts with the original source file. Ops whose
    range is only the serialized code (`code/__torch__/...`) are generated and left out."""
    sources = []
    for node in _all_nodes(script_module.inlined_graph):
        kind = node.kind()
        if kind.startswith("prim::"):
            continue
        line = _original_line(str(node.sourceRange()))
        sources.append((kind.replace("::", "."), line or ""))
    return sources


def _all_nodes(graph: Any) -> list[Any]:
    nodes = []
    for node in graph.nodes():
        for block in node.blocks():
            nodes += _all_nodes(block)
        nodes.append(node)
    return nodes


def _original_line(source_range: str) -> str | None:
    text = source_range.strip()
    torch_dir = os.sep + "torch" + os.sep
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Serialized"):
            break  # what follows is the serialized code, not the user's
        traced = _TRACED_FRAME.match(line)
        if traced and torch_dir not in traced["file"]:
            return f"{os.path.basename(traced['file'])}:{traced['line']} in {traced['name']}"
        scripted = _SOURCE_FILE.search(line)
        if scripted and not scripted["file"].startswith("code/") and torch_dir not in scripted["file"]:
            return f"{os.path.basename(scripted['file'])}:{scripted['line']} in {scripted['name'] or 'forward'}"
    return None


def _torchscript_line(module: Any, node: Any, sources: list[tuple[str, str]] | None) -> str | None:
    """The TorchScript line of the same op call: the k-th call of op X in the graph is the k-th in TorchScript's."""
    if not sources:
        return None
    packet = ".".join(_op_name(node.target).split(".")[:2])
    same_op = [n for n in module.graph.nodes if n.op == "call_function" and n.target == node.target]
    nth = same_op.index(node) if node in same_op else -1
    lines = [line for name, line in sources if name == packet]
    if 0 <= nth < len(lines) and lines[nth]:
        return f"{lines[nth]}, from TorchScript's debug info"
    return None


def _summary(exc: BaseException) -> str:
    """The first meaningful line of a Dynamo error (they start with a generic wrapper line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if "no fake impl" in line or "fake" in line.lower()] or lines
    return f"{type(exc).__name__}: {useful[0]}" if useful else type(exc).__name__
