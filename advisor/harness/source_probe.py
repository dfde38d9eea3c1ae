"""Child side of `npu-advisor inspect|analyze path/file.py:factory`: the user's own model, from their own code.

Runs in a child process of its own (advisor.cli.source_front starts it with advisor.harness.sandbox, unconfined:
it is the user's code on the user's machine), so a factory that raises, hangs or crashes the interpreter is a
status, never the CLI's end. `probe_source` builds the model with the factory, then:

- graph breaks: what Dynamo captures on the real Python code at the example inputs (the recompile check's first
  call, with the capture `torch._dynamo.explain` makes; explain itself where that call is not made); each break's
  kind, Dynamo's explanation and hints (the lines of its own message), the user's file:line and the source line's
  text, deduplicated, in the order of the files' first break and then by line;
- recompiles: the model compiled by Dynamo (a counting backend, nothing lowered) and called at the example shapes,
  then at each other shape (the context's shape sweep or shape ranges, else a second batch size), with the guard
  failures Dynamo logs (`TORCH_LOGS=recompiles`'s records), then at the example shapes again; whether marking the
  varying dims dynamic (`torch._dynamo.mark_dynamic`) removes them is read from those calls (`marked_dynamic`:
  the graph Dynamo recompiles with those dims dynamic, its guards, the frames it resumes after graph breaks), or,
  where they do not tell, from the same calls made again with the dims marked;
- export: `torch.export.export` non-strict (torch's default), then strict where non-strict failed or its program
  could not be saved (always with `strict_export`); when both fail, `torch.export.draft_export`'s report of every
  problem with its location. A program that exported is written with `torch.export.save` to a temporary file next
  to `export_to` and renamed onto it only once complete, so a failed save never leaves a partial file; its nodes'
  stack traces keep only the frames of the user's project, paths relative (advisor.harness.portable_program).

The report is plain JSON, validated against advisor.core.source_report.SourceReport before it is returned.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import logging
import os
import re
import sys
import sysconfig
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from advisor.core.source_report import (
    MAX_BREAKS,
    MAX_CODE,
    MAX_GUARDS,
    MAX_HINTS,
    MAX_PROBLEMS,
    MAX_SHORT,
    clip,
    parse_source_report,
)
from advisor.harness.portable_program import make_portable, portable_spec, project_root
from advisor.harness.sandbox import StageError

FACTORY_FORM = (
    "a factory returns the model and its example inputs: (model, args), (model, args, kwargs), "
    "(model, args, kwargs, dynamic_shapes), or a dict with the keys model, args, kwargs, dynamic_shapes"
)


# ------------------------------------------------------------------------------------------------ the factory
def load_factory(spec: str) -> Callable[[], Any]:
    """`path/to/file.py:factory` (the file is run as a module, its directory first on the import path, as
    `python file.py` would have it) or `package.module:factory` (imported from the current directory or the
    import path)."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name.isidentifier():
        raise StageError("load_error", f"{spec!r} is not path/file.py:factory or package.module:factory")
    try:
        if target.endswith(".py"):
            path = os.path.abspath(target)
            if not os.path.isfile(path):
                raise StageError("load_error", f"{target} does not exist or is not a file")
            directory = os.path.dirname(path)
            if directory not in sys.path:
                sys.path.insert(0, directory)
            module_name = f"_advisor_user_{os.path.splitext(os.path.basename(path))[0]}"
            loader_spec = importlib.util.spec_from_file_location(module_name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise StageError("load_error", f"cannot load {target} as a Python module")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[module_name] = module
            loader_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(target)
    except StageError:
        raise
    except BaseException as exc:  # noqa: BLE001 - the user's module failed to import: say where
        raise StageError("runtime_error", f"importing {target} failed: {_user_error(exc)}") from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise StageError("load_error", f"{target} has no function {name!r}")
    return factory


def build(spec: str) -> tuple[Any, tuple, dict, Any]:
    """(model, args, kwargs, dynamic_shapes) from the factory; a factory that raises is a readable StageError."""
    factory = load_factory(spec)
    try:
        made = factory()
    except BaseException as exc:  # noqa: BLE001 - the user's code: reported, never fatal
        raise StageError("runtime_error", f"the factory {spec} raised {_user_error(exc)}") from None
    import torch  # after the factory: one that fails early is reported without the cost of importing torch

    if isinstance(made, dict):
        unknown = set(made) - {"model", "args", "kwargs", "dynamic_shapes"}
        if "model" not in made or unknown:
            raise StageError("load_error", f"the factory returned a dict with keys {sorted(made)}; {FACTORY_FORM}")
        parts = (made["model"], made.get("args", ()), made.get("kwargs") or {}, made.get("dynamic_shapes"))
    elif isinstance(made, tuple) and 2 <= len(made) <= 4:
        parts = (*made, *([{}, None][len(made) - 2 :]))
    else:
        raise StageError("load_error", f"the factory returned {type(made).__name__}; {FACTORY_FORM}")
    model, args, kwargs, dynamic_shapes = parts
    if not isinstance(model, torch.nn.Module):
        raise StageError("load_error", f"the factory's model is a {type(model).__name__}, not a torch.nn.Module")
    if isinstance(args, torch.Tensor):
        args = (args,)
    if not isinstance(args, tuple | list) or not isinstance(kwargs, dict):
        raise StageError("load_error", f"the factory's args must be a tuple and kwargs a dict; {FACTORY_FORM}")
    return model, tuple(args), dict(kwargs), dynamic_shapes


def _user_error(exc: BaseException) -> str:
    """`Type: message (at file.py:12 in f)`: the exception and the user's own innermost line - in their files, not
    an installed library's - then, when the error was raised deeper, in a library (`from transformers import X`
    failing inside transformers), `; raised in transformers/...:N in f`. Frames of this package and torch are
    never named; a traceback without an own frame names the innermost library one."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_user_file(f.filename)]
    own = [f for f in frames if not _is_installed(f.filename)]
    where = ""
    if own:
        where = f" (at {_frame(own[-1])}" + (f"; raised in {_frame(frames[-1])})" if frames[-1] is not own[-1] else ")")
    elif frames:
        where = f" (at {_frame(frames[-1])})"
    message = str(exc).strip().splitlines()
    return clip(f"{type(exc).__name__}: {message[0] if message else ''}{where}", 1000) or ""


def _frame(frame: traceback.FrameSummary) -> str:
    return f"{_display_path(frame.filename)}:{frame.lineno} in {frame.name}"


def _is_installed(filename: str) -> bool:
    """A file of the interpreter's own library or an installed distribution (site-packages, dist-packages), not
    the user's own code."""
    global _LIBRARY_DIRS
    if not _LIBRARY_DIRS:
        paths = sysconfig.get_paths()
        found = {os.path.abspath(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
        _LIBRARY_DIRS = tuple(d + os.sep for d in sorted(found))
    path = os.path.abspath(filename)
    parts = path.split(os.sep)
    return path.startswith(_LIBRARY_DIRS) or "site-packages" in parts or "dist-packages" in parts


# ------------------------------------------------------------------------------------------------ the probe
def probe_source(
    spec: str,
    *,
    sweep: dict[str, Any] | None = None,
    export_to: str | None = None,
    export: bool = True,
    temp_tag: str = "npu-advisor",
    strict_export: bool = False,
) -> dict[str, Any]:
    """The source-side report (advisor.core.source_report.SourceReport, as JSON) of the factory's model; writes the
    ExportedProgram to `export_to` when given and the export succeeded. `sweep`: advisor.core.shape_sweep's spec
    (`{"points": [...]}` or `{"ranges": [...]}`), None for a second batch size. `strict_export`: export strict as well
    when non-strict succeeded (otherwise strict is tried only where non-strict failed)."""
    model, args, kwargs, dynamic_shapes = build(spec)
    project = project_root(spec)
    import torch

    names = input_names(model, args, kwargs)
    recompile_report, break_messages, first_call = recompiles(model, args, kwargs, names, sweep)
    logged = logged_break_reasons(break_messages)
    report: dict[str, Any] = {
        "version": 1,
        "factory": clip(portable_spec(spec, project), MAX_SHORT),
        "torch_version": torch.__version__[:64],
        "recompiles": recompile_report,
        "graph_breaks": breaks_of(first_call, logged) if first_call else graph_breaks(model, args, kwargs, logged),
        "export": export_report(
            model, args, kwargs, dynamic_shapes, export_to, temp_tag, strict_too=strict_export, project=project
        )
        if export
        else {"attempts": []},
    }
    return parse_source_report(report).model_dump(mode="json")


def input_names(model: Any, args: tuple, kwargs: dict) -> list[str]:
    """Each positional input's name as `forward` declares it (`arg0`, ... where it cannot be bound)."""
    try:
        params = [
            p.name
            for p in inspect.signature(model.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(len(args))]


# ------------------------------------------------------------------------------------------------ graph breaks
def graph_breaks(
    model: Any, args: tuple, kwargs: dict, logged: dict[tuple[str, int], str] | None = None
) -> dict[str, Any]:
    """`torch._dynamo.explain`'s breaks, deduplicated and ordered; `logged`: Dynamo's whole message per (file, line)
    from its graph-break log (logged_break_reasons), used where explain's reason is only a short one
    (a data-dependent branch reads "generic_jump TensorVariable()" there)."""
    import torch
    import torch._dynamo

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            result = torch._dynamo.explain(model)(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a hard Dynamo error is a finding
        return _hard_error(exc)
    finally:
        torch._dynamo.reset()
    return _ordered_breaks(result.graph_count, result.graph_break_count, result.break_reasons, logged)


def _ordered_breaks(
    graph_count: int, break_count: int, reasons: list[Any], logged: dict[tuple[str, int], str] | None
) -> dict[str, Any]:
    """Each distinct break once (kind, file, line) with how often it was hit, ordered by file and line."""
    found: dict[tuple, dict[str, Any]] = {}
    for reason in reasons:
        item = describe_break(reason.reason, reason.user_stack, logged or {})
        key = (item["kind"], item["file"], item["line"])
        if key in found:
            found[key]["count"] += 1
        else:
            found[key] = item
    files: list[str | None] = []
    for item in found.values():
        if item["file"] not in files:
            files.append(item["file"])
    ordered = sorted(found.values(), key=lambda b: (files.index(b["file"]), b["line"] if b["line"] is not None else 0))
    return {"analysed": True, "graph_count": graph_count, "break_count": break_count, "breaks": ordered[:MAX_BREAKS]}


class FirstCall:
    """What Dynamo captured on the recompile check's first call (at the example shapes, after a reset): the same
    capture `torch._dynamo.explain` makes (a backend that keeps each graph and its `compile_subgraph_reason`), so the
    graph breaks come from it instead of a trace of their own."""

    def __init__(self) -> None:
        self.graph_count = 0
        self.break_reasons: list[Any] = []
        self.error: BaseException | None = None

    def record(self, gm: Any) -> None:
        self.graph_count += 1
        reason = getattr(gm, "compile_subgraph_reason", None)
        if reason is not None and getattr(reason, "graph_break", False):
            self.break_reasons.append(reason)


def breaks_of(first: FirstCall, logged: dict[tuple[str, int], str] | None = None) -> dict[str, Any]:
    """The graph-break report of the first call's capture (as `graph_breaks` reads `explain`'s)."""
    if first.error is not None:
        return _hard_error(first.error)
    return _ordered_breaks(first.graph_count, max(first.graph_count - 1, 0), first.break_reasons, logged)


def _hard_error(exc: BaseException) -> dict[str, Any]:
    return {
        "analysed": False,
        "note": clip(f"torch.compile fails on this model (a hard error, not a graph break): {_first_lines(exc)}"),
    }


def describe_break(
    reason: str, user_stack: list[Any] | None, logged: dict[tuple[str, int], str] | None = None
) -> dict[str, Any]:
    """One break: Dynamo's message split into its kind (its first line), explanation and hints; the innermost frame
    of the user's code (outside torch) with its source text."""
    frames = list(user_stack or [])
    user = [f for f in frames if _is_user_file(f.filename)] or frames
    lines = _reason_lines(_logged_reason(reason, frames, logged))
    kind = lines[0] if lines else "graph break"
    explanation = next((ln.removeprefix("Explanation:").strip() for ln in lines if ln.startswith("Explanation:")), None)
    hints = [ln.removeprefix("Hint:").strip() for ln in lines if ln.startswith("Hint:")]
    return {
        "kind": clip(kind, MAX_SHORT),
        "reason": clip("\n".join(ln for ln in lines if not ln.startswith(("Explanation:", "Hint:")))),
        **_frame_fields(user[-1] if user else None),
        "explanation": clip(explanation),
        "hints": [clip(h) for h in dict.fromkeys(hints)][:MAX_HINTS],
        "count": 1,
    }


def _logged_reason(reason: str, frames: list[Any], logged: dict[tuple[str, int], str] | None) -> str:
    """Dynamo's logged message for the break at the innermost frame (explanation and hints included) when the
    reason has no hints of its own."""
    if "Hint:" not in str(reason) and frames:
        innermost = frames[-1]
        reason = (logged or {}).get((os.path.abspath(innermost.filename), innermost.lineno)) or reason
    return reason


def _reason_lines(reason: str) -> list[str]:
    """The message's non-blank lines, without the wrapper line Dynamo's log puts before the kind."""
    lines = [line.strip() for line in str(reason).splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(_WRAPPER)] or lines


def _frame_fields(frame: Any | None) -> dict[str, Any]:
    """Where the break is in the user's code: file, line, function and the line's source text."""
    if frame is None:
        return {"file": None, "line": None, "function": None, "code": None}
    code = (getattr(frame, "line", None) or "").strip()
    return {
        "file": clip(_display_path(frame.filename), MAX_SHORT),
        "line": frame.lineno,
        "function": clip(frame.name, MAX_SHORT),
        "code": clip(code, MAX_CODE) or None,
    }


_WRAPPER = "Encountered graph break when attempting to trace"  # the line Dynamo's log puts before the kind
_SKIPPED_DIRS: tuple[str, ...] = ()
_LIBRARY_DIRS: tuple[str, ...] = ()  # the interpreter's library and where distributions are installed


def _is_user_file(filename: str) -> bool:
    """Not torch's own code, not this package's, not the interpreter's frozen or generated modules."""
    global _SKIPPED_DIRS
    if not _SKIPPED_DIRS:
        found = importlib.util.find_spec("torch")  # where torch lives, without importing it
        torch_dir = os.path.dirname(os.path.abspath(found.origin)) if found and found.origin else None
        advisor_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        _SKIPPED_DIRS = tuple(d + os.sep for d in (torch_dir, advisor_dir) if d)
    if filename.startswith("<"):
        return False
    return not os.path.abspath(filename).startswith(_SKIPPED_DIRS)


def _display_path(filename: str) -> str:
    """Relative to the current directory when inside it; else relative to the import path entry that holds it (e.g.
    `transformers/models/gpt2/modeling_gpt2.py`); else the base name."""
    if filename.startswith("<"):
        return filename
    path = os.path.abspath(filename)
    roots = [os.getcwd(), *sorted((p for p in sys.path if p and os.path.isdir(p)), key=len, reverse=True)]
    for root in roots:
        root = os.path.abspath(root)
        if path.startswith(root + os.sep):
            return os.path.relpath(path, root)
    return os.path.basename(path)


def _first_lines(exc: BaseException, count: int = 3, sep: str = " ") -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {sep.join(lines[:count])}" if lines else type(exc).__name__


# ------------------------------------------------------------------------------------------------ recompiles
class _RecordHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.records.append(record.getMessage())


# torch._logging's artifact loggers: what TORCH_LOGS=recompiles and TORCH_LOGS=graph_breaks print
RECOMPILES_LOGGER = "torch._dynamo.guards.__recompiles"
GRAPH_BREAKS_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"


@contextlib.contextmanager
def dynamo_records() -> Iterator[tuple[_RecordHandler, _RecordHandler]]:
    """(recompile records, graph-break records): what `TORCH_LOGS=recompiles,graph_breaks` prints, as records."""
    import torch._logging

    handlers = (_RecordHandler(), _RecordHandler())
    loggers = (logging.getLogger(RECOMPILES_LOGGER), logging.getLogger(GRAPH_BREAKS_LOGGER))
    torch._logging.set_logs(recompiles=True, graph_breaks=True)
    for logger, handler in zip(loggers, handlers, strict=True):
        logger.addHandler(handler)
    try:
        yield handlers
    finally:
        for logger, handler in zip(loggers, handlers, strict=True):
            logger.removeHandler(handler)
        torch._logging.set_logs()


_BREAK_AT = re.compile(r"^Graph break .*in user code at (?P<file>.+):(?P<line>\d+)$")


def logged_break_reasons(messages: list[str]) -> dict[tuple[str, int], str]:
    """(absolute file, line) -> Dynamo's whole message for the graph break logged there ("Graph break in user code at
    FILE:LINE / Graph Break Reason: ... / User code traceback: ..."), explanation and hints included."""
    found: dict[tuple[str, int], str] = {}
    for message in messages:
        lines = message.splitlines()
        at = _BREAK_AT.match(lines[0].strip()) if lines else None
        if at is None or len(lines) < 2 or not lines[1].startswith("Graph Break Reason:"):
            continue
        body = [lines[1].removeprefix("Graph Break Reason:").strip()]
        for line in lines[2:]:
            if line.startswith("User code traceback:"):
                break
            body.append(line)
        found.setdefault((os.path.abspath(at["file"]), int(at["line"])), "\n".join(body))
    return found


def guard_failures(messages: list[str]) -> list[str]:
    """The failed guards of Dynamo's "Recompiling function ... triggered by the following guard failure(s)" records."""
    failures: list[str] = []
    for message in messages:
        for line in message.splitlines():
            line = line.strip()
            if line.startswith("- "):
                text = line[2:].strip()
                if text and text not in failures:
                    failures.append(clip(text) or "")
    return failures[:MAX_GUARDS]


def sweep_shapes(
    base: dict[str, list[int]], names: list[str], sweep: dict[str, Any] | None
) -> list[dict[str, list[int]]]:
    """The shapes to call the model at besides the example's: the sweep's points (inputs not named keep their shape),
    the ranges' ends and middle, or else the batch dim (dim 0 of every input) at twice its size (2 for a batch of 1)."""
    if sweep and sweep.get("points"):
        points = _point_shapes(base, sweep["points"])
    elif sweep and sweep.get("ranges"):
        points = _range_shapes(base, sweep["ranges"])
    else:
        points = [_doubled_batch(base)]
    return [p for p in points if p != base][:8]


def _point_shapes(base: dict[str, list[int]], sweep_points: list[dict[str, Any]]) -> list[dict[str, list[int]]]:
    """The sweep's points; an input a point does not name keeps its example shape."""
    points = []
    for point in sweep_points:
        shapes = {name: list(base[name]) for name in base}
        shapes.update({name: list(shape) for name, shape in point.items() if name in base})
        points.append(shapes)
    return points


def _range_shapes(base: dict[str, list[int]], sweep_ranges: list[dict[str, Any]]) -> list[dict[str, list[int]]]:
    """The ranges' sizes (ends and middle), the i-th size of every range in the i-th point."""
    from advisor.core.shape_sweep import range_sizes

    ranges = [r for r in sweep_ranges if r["input"] in base and r["dim"] < len(base[r["input"]])]
    sizes = {(r["input"], r["dim"]): range_sizes(r["min"], r["max"]) for r in ranges}
    count = max((len(v) for v in sizes.values()), default=0)
    points = []
    for index in range(count):
        shapes = {name: list(shape) for name, shape in base.items()}
        for (name, dim), values in sizes.items():
            shapes[name][dim] = values[min(index, len(values) - 1)]
        points.append(shapes)
    return points


def _doubled_batch(base: dict[str, list[int]]) -> dict[str, list[int]]:
    """Every input's dim 0 at twice its size (2 for a batch of 1)."""
    shapes = {name: list(shape) for name, shape in base.items()}
    for shape in shapes.values():
        if shape:
            shape[0] = shape[0] * 2 if shape[0] > 1 else 2
    return shapes


def resized(tensor: Any, shape: list[int]) -> Any:
    """`tensor` tiled and cut to `shape`: the same values (token ids stay valid ids), another size."""
    if list(tensor.shape) == list(shape):
        return tensor.clone()
    reps = [-(-new // old) if old else 1 for new, old in zip(shape, tensor.shape, strict=True)]
    tiled = tensor.repeat(*reps) if reps else tensor
    return tiled[tuple(slice(0, n) for n in shape)].clone()


def recompiles(
    model: Any, args: tuple, kwargs: dict, names: list[str], sweep: dict[str, Any] | None
) -> tuple[dict[str, Any], list[str], FirstCall | None]:
    """The recompile report; the graph-break messages Dynamo logged on the way (with its explanation and hints,
    which `explain`'s reasons lack for some kinds of break); and what the first call captured (`explain`'s capture,
    so the graph breaks need no trace of their own), None when no call was made."""
    import torch
    import torch._dynamo

    named = {**dict(zip(names, args, strict=True)), **kwargs}
    # every tensor, at the top level or nested in dicts, lists and tuples, by its path ("batch.input_ids")
    base = {path: list(value.shape) for path, value in tensor_leaves(named).items()}
    if not base:
        return {"analysed": False, "note": "the example inputs hold no tensor"}, [], None
    shapes = sweep_shapes(base, names, sweep)

    def inputs_at(point: dict[str, list[int]], dims: list[tuple[str, int]] = ()) -> tuple[tuple, dict]:
        values = resized_leaves(named, point)
        leaves = tensor_leaves(values)
        for name, dim in dims:
            torch._dynamo.mark_dynamic(leaves[name], dim)
        return tuple(values[n] for n in names), {k: values[k] for k in kwargs}

    first = FirstCall()
    # the example shapes, each other shape, then the example shapes again (which graph serves them: see marked_dynamic)
    calls, break_messages = _calls(
        model, [base, *shapes, base] if shapes else [base], inputs_at, [], first=first, probe_last=bool(shapes)
    )
    if not shapes:
        note = "no other shape to call the model at"
        return {"analysed": False, "note": note, "base_shapes": base}, break_messages, first
    again = calls.pop()
    points = [
        {
            "shapes": point,
            "recompiled": call.compiled > 0,
            "graphs_compiled": call.compiled,
            "guard_failures": call.guard_failures,
            "error": call.error,
        }
        for point, call in zip(shapes, calls[1:], strict=True)
    ]
    varying = _varying_dims(base, shapes)
    marked = None
    if varying and any(p["recompiled"] for p in points):
        marked = marked_dynamic(calls, again)
        if marked is None:  # the calls do not tell: make them again with the dims marked
            marked = _marked_by_calling(model, [base, *shapes], inputs_at, varying)
        marked = {"dims": [{"input": name, "dim": dim} for name, dim in varying], **marked}
    report = {"analysed": True, "base_shapes": base, "points": points, "marked_dynamic": marked}
    if sweep:  # the shapes a plan serves: what a static or bucket plan compiles at them
        report["static"] = static_replay(model, [base, *shapes], inputs_at)
    return report, break_messages, first


def static_replay(model: Any, shapes: list[dict[str, list[int]]], inputs_at: Callable) -> dict[str, Any]:
    """Each shape called twice on a fresh compiled model with automatic dynamic shapes off (what `dynamic=False`
    gives): the graphs each shape compiled, and the shapes whose second call compiled again."""
    import torch._dynamo

    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, assume_static_by_default=True):
        calls, _ = _calls(model, [*shapes, *shapes], inputs_at, [])
    first, second = calls[: len(shapes)], calls[len(shapes) :]
    return {
        "shapes": len(shapes),
        "graphs_per_shape": [call.compiled for call in first],
        "compiled_again": [shape for shape, call in zip(shapes, second, strict=True) if call.compiled > 0],
        "error": next((call.error for call in calls if call.error), None),
    }


def _path_text(path: tuple) -> str:
    """A pytree key path as the traffic names it: `batch.input_ids`, `inputs.0`."""
    parts = []
    for entry in path:
        for attribute in ("key", "idx", "name"):
            if hasattr(entry, attribute):
                parts.append(str(getattr(entry, attribute)))
                break
    return ".".join(parts)


def tensor_leaves(named: dict[str, Any]) -> dict[str, Any]:
    """Every tensor in `named` (input name -> value), nested ones too, by path."""
    import torch
    from torch.utils._pytree import tree_flatten_with_path

    leaves, _ = tree_flatten_with_path(named)
    return {_path_text(path): leaf for path, leaf in leaves if isinstance(leaf, torch.Tensor)}


def resized_leaves(named: dict[str, Any], point: dict[str, list[int]]) -> dict[str, Any]:
    """`named` with each tensor whose path `point` names resized to its shape (nested ones in place)."""
    import torch
    from torch.utils._pytree import tree_map_with_path

    def at(path: tuple, leaf: Any) -> Any:
        where = _path_text(path)
        return resized(leaf, point[where]) if isinstance(leaf, torch.Tensor) and where in point else leaf

    return tree_map_with_path(at, named)


def _varying_dims(base: dict[str, list[int]], shapes: list[dict[str, list[int]]]) -> list[tuple[str, int]]:
    """(input, dim) of every dim some swept shape changes."""
    return [
        (name, dim)
        for name, shape in base.items()
        for dim in range(len(shape))
        if any(point[name][dim] != shape[dim] for point in shapes)
    ]


def _marked_by_calling(
    model: Any, shapes: list[dict[str, list[int]]], inputs_at: Callable, varying: list[tuple[str, int]]
) -> dict[str, Any]:
    """The calls made again on a fresh compiled model with the varying dims marked dynamic: its recompiles (None on
    an error), guard failures and first error."""
    literal, _ = _calls(model, shapes, inputs_at, varying)
    first_error = next((call.error for call in literal if call.error), None)
    return {
        "recompiles": None if first_error else sum(1 for call in literal[1:] if call.compiled > 0),
        "guard_failures": [f for call in literal[1:] for f in call.guard_failures][:MAX_GUARDS],
        "error": first_error,
    }


_GUARD_FRAME = re.compile(r"^(?P<frame>\d+)/(?P<compile>\d+):")  # a failed guard's graph: frame / its compile


def marked_dynamic(calls: list[Call], again: Call) -> dict[str, Any] | None:
    """Whether marking the varying dims dynamic before the first call removes the recompiles, read from the calls
    already made instead of making them all again with the dims marked (each dynamic trace of a large model takes
    seconds). At the first shape that differs Dynamo recompiles the model's frame with the dims that changed dynamic
    (automatic dynamic shapes): the graph a mark gives from the start. So, call by call, marked:
    - the model's own frame (the first graph's) compiles again only where it did here after that first recompile
      (that graph's guards failed), and at that first one when the graph does not serve the example shapes: called
      again at them last, Dynamo ran the example shapes' own graph (it checks the most recently used graph first);
    - a frame Dynamo resumes after a graph break takes inputs of its own, which a mark does not reach: where one
      compiled here, it compiles with the dims marked too.
    Its guard failures are Dynamo's, logged at those calls. None when the calls do not tell (no compile ids, an
    error in a call): the caller then makes the calls again with the dims marked."""
    top = calls[0].frames[0] if calls and calls[0].frames else None
    if top is None or again.error or any(call.error or None in call.frames for call in [*calls, again]):
        return None
    served = not again.frames and top not in again.ran_frames_from_first_call
    recompiles, failures, first_recompile = 0, [], None
    for index, call in enumerate(calls[1:], 1):
        top_again = top in call.frames and first_recompile is not None
        if top in call.frames and first_recompile is None:
            first_recompile = index
        resumed = any(frame != top for frame in call.frames)
        if resumed or top_again or (index == first_recompile and not served):
            recompiles += 1
            failures += _marked_failures(call.guard_failures, top, top_again)
    return {"recompiles": recompiles, "guard_failures": failures[:MAX_GUARDS], "error": None}


def _marked_failures(failures: list[str], top: int, top_again: bool) -> list[str]:
    """The guard failures a call would log with the dims marked: those of the frames resumed after graph breaks, and
    the model's own frame's where it compiled again, but never its example-shapes graph's (`top/0`): marked, there
    is no such graph."""
    kept = []
    for failure in failures:
        found = _GUARD_FRAME.match(failure)
        if found is None:
            continue
        frame, compiled = int(found["frame"]), int(found["compile"])
        if frame != top or (top_again and compiled != 0):
            kept.append(failure)
    return kept


class Call:
    """One call of the compiled model: how many graphs it compiled and the frames they belong to (Dynamo's compile
    ids; None where torch does not say), the guard failures Dynamo logged, the error it raised, and the frames of the
    graphs compiled on the first call that ran in it."""

    def __init__(self) -> None:
        self.compiled = 0
        self.frames: list[int | None] = []
        self.guard_failures: list[str] = []
        self.error: str | None = None
        self.ran_frames_from_first_call: set[int | None] = set()


class _Stopped(Exception):  # noqa: N818 - not an error: a call stopped once it told what it was made for
    """Raised by a compiled graph instead of running it (see `_calls`)."""


def _calls(
    model: Any,
    shapes: list[dict[str, list[int]]],
    inputs_at: Callable,
    dims: list[tuple[str, int]],
    first: FirstCall | None = None,
    *,
    probe_last: bool = False,
) -> tuple[list[Call], list[str]]:
    """One `Call` per shape, in order, of one fresh compiled model; and the graph-break messages Dynamo logged.
    `first`: filled with the first call's capture (its graphs and their break reasons).

    Only the compiles matter here, not the outputs, so a graph is not run where running it tells nothing more: after
    a first call that compiled the model as one graph (no graph break: no frame of the model's code comes after it), a
    later call stops when its graph is about to run, its compiles and guard failures recorded; and with `probe_last`
    the last call stops at the first graph it runs (which graph Dynamo chose is all it is made for)."""
    import torch
    import torch._dynamo

    results: list[Call] = []
    graphs: list[tuple[int | None, int]] = []  # (frame, call that compiled it) per graph
    capturing = first is not None
    stop_runs = False

    def counting_backend(gm: Any, example_inputs: Any) -> Any:
        index, call = len(graphs), results[-1]
        frame = _frame_id()
        graphs.append((frame, len(results) - 1))
        call.compiled += 1
        call.frames.append(frame)
        if capturing and first is not None:
            first.record(gm)
        forward = gm.forward

        def run(*args: Any, **kwargs: Any) -> Any:
            if graphs[index][1] == 0:
                results[-1].ran_frames_from_first_call.add(graphs[index][0])
            if stop_runs or (probe_last and len(results) == len(shapes)):
                raise _Stopped
            return forward(*args, **kwargs)

        return run

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counting_backend)
    try:
        with dynamo_records() as (records, breaks), torch.no_grad():
            for point in shapes:
                call, seen = Call(), len(records.records)
                results.append(call)
                try:
                    args, kwargs = inputs_at(point, dims)
                    compiled(*args, **kwargs)
                except _Stopped:
                    pass
                except Exception as exc:  # noqa: BLE001 - e.g. a dim marked dynamic that the model specializes
                    call.error = clip(_first_lines(exc, 6))
                    if capturing and first is not None:
                        first.error = exc
                if capturing:
                    stop_runs = len(graphs) == 1 and call.error is None  # one graph: nothing runs after it
                capturing = False
                call.guard_failures = guard_failures(records.records[seen:])
    finally:
        torch._dynamo.reset()
    return results, breaks.records


def _frame_id() -> int | None:
    """The frame Dynamo is compiling (its compile id's frame_id); None where torch does not say."""
    try:
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
        return int(compile_id.frame_id) if compile_id is not None else None
    except Exception:  # noqa: BLE001 - a private API: without it the calls are made again with the dims marked
        return None


# ------------------------------------------------------------------------------------------------ export
def export_report(
    model: Any,
    args: tuple,
    kwargs: dict,
    dynamic_shapes: Any,
    export_to: str | None,
    temp_tag: str = "npu-advisor",
    *,
    strict_too: bool = False,
    project: str | None = None,
) -> dict[str, Any]:
    """torch.export non-strict (its default) and, where that fails or its program cannot be saved, strict; both
    always with `strict_too` (`--strict-export`). When neither exports, draft_export's report. The first program that
    saves is written to `export_to` (completely or not at all), its stack traces reduced to the files of the user's
    `project` (default: the current directory), relative to it (advisor.harness.portable_program)."""
    import torch

    attempts: list[dict[str, Any]] = []
    report: dict[str, Any] = {"attempts": attempts}
    exported = False
    save_errors: list[str] = []
    for strict in (False, True):
        if strict and exported and (report.get("written") or not export_to) and not strict_too:
            break  # non-strict exported (and saved): strict would only repeat it, at several times the cost
        started = time.perf_counter()
        try:
            program = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
            error = None
        except Exception as exc:  # noqa: BLE001 - a failed export is a finding
            program, error = None, clip(_first_lines(exc, 8, "\n"))
        attempts.append(
            {"strict": strict, "ok": error is None, "error": error, "seconds": round(time.perf_counter() - started, 3)}
        )
        if program is None:
            continue
        exported = True
        if export_to and not report.get("written"):
            try:
                make_portable(program, project or os.getcwd())
                save_atomically(program, export_to, temp_tag)
            except Exception as exc:  # noqa: BLE001 - e.g. SerializeError: Failed serializing node flat_apply
                save_errors.append(f"{'strict' if strict else 'non-strict'}: {_first_lines(exc, 4)}")
            else:
                report["written"] = clip(os.path.basename(export_to), MAX_SHORT)
    if not exported:
        report["draft"] = draft_report(model, args, kwargs, dynamic_shapes)
    elif export_to and not report.get("written"):
        report["save_error"] = clip("torch.export.save failed (no file was left): " + "; ".join(save_errors))
    return report


def temporary_prefix(path: str, tag: str) -> str:
    """Where the temporary files of one run's save of `path` start: the parent removes whatever is left under it
    when the child was killed during the save (advisor.cli.source_front)."""
    absolute = os.path.abspath(path)
    return os.path.join(os.path.dirname(absolute), f".{os.path.basename(absolute)}.{tag}.")


def save_atomically(program: Any, path: str, tag: str = "npu-advisor") -> None:
    """torch.export.save to a temporary file in the same directory, renamed onto `path` once complete; the temporary
    file is removed whatever happens, so a failed save leaves nothing (and an older `path` as it was)."""
    import torch

    prefix = temporary_prefix(path, tag)
    handle, temporary = tempfile.mkstemp(prefix=os.path.basename(prefix), suffix=".pt2", dir=os.path.dirname(prefix))
    os.close(handle)
    try:
        torch.export.save(program, temporary)
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # as a plain save would leave it, not mkstemp's 0600
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


def draft_report(model: Any, args: tuple, kwargs: dict, dynamic_shapes: Any) -> dict[str, Any]:
    """`torch.export.draft_export`'s report: every problem it worked around, with its location."""
    import torch

    try:
        program = torch.export.draft_export(model, args, kwargs, dynamic_shapes=dynamic_shapes)
    except Exception as exc:  # noqa: BLE001
        return {"ran": True, "ok": False, "error": clip(_first_lines(exc, 8, "\n"))}
    report = getattr(program, "_report", None)
    failures = list(getattr(report, "failures", None) or [])
    problems = [_draft_problem(failure, report) for failure in failures[:MAX_PROBLEMS]]
    return {"ran": True, "ok": True, "problems": problems}


def _draft_problem(failure: Any, report: Any) -> dict[str, Any]:
    """One of draft_export's problems: its kind, its own words (without the stack traces) and the innermost frame of
    the user's code in its user stack."""
    kind = getattr(getattr(failure, "failure_type", None), "name", None) or type(failure).__name__
    filenames = dict(getattr(report, "str_to_filename", None) or {})
    with contextlib.suppress(Exception):  # a file name torch's structured log interned earlier (explain, compile)
        from torch._logging.structured import INTERN_TABLE

        filenames = {number: name for name, number in INTERN_TABLE.items()} | filenames
    try:
        text = failure.print(filenames)
    except Exception:  # noqa: BLE001 - the report's own formatting, best effort
        text = str(getattr(failure, "data", "") or failure)
    return {
        "kind": clip(kind.lower(), MAX_SHORT),
        "message": clip(_without_stacks(str(text))) or kind,
        "location": clip(_user_frame(failure, filenames), MAX_SHORT),
    }


def _without_stacks(text: str) -> str:
    """draft_export's words for a problem: its lines up to the stack traces, then from "As a result" on."""
    kept, skipping = [], False
    for line in (line.strip() for line in text.splitlines()):
        if not line:
            continue
        if "stacktrace" in line:
            skipping = True
        elif line.startswith(("As a result", "Because of this", "Please add", "Please refer")):
            skipping = False
        if not skipping and not line.startswith("Please refer"):
            kept.append(line)
    return "\n".join(kept)


def _user_frame(failure: Any, filenames: dict) -> str | None:
    """'model.py:14 in forward': the innermost frame of the failure's user stack that is the user's code."""
    data = getattr(failure, "data", None) or {}
    for frame in reversed(list(data.get("user_stack") or []) if isinstance(data, dict) else []):
        name = filenames.get(frame.get("filename")) if isinstance(frame, dict) else None
        if isinstance(name, str) and _is_user_file(name):
            return f"{_display_path(name)}:{frame.get('line')} in {frame.get('name')}"
    return None
