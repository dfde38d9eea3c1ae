"""What an ExportedProgram written from the user's source carries of the submitting machine: only their project.

`torch.export` records, on every graph node, the Python stack that produced it (`node.meta["stack_trace"]`): each
frame's absolute file path, line, function and source line - the user's files, but also torch's and every library's
under the virtual environment, the home directory, the interpreter's prefix. `npu-advisor analyze file.py:factory
--server` uploads that program, and every user of the server can download it. Before the program is saved,
`make_portable(program, root)` rewrites each stack trace to the frames inside the user's project (`project_root`),
their paths made relative to it; every other frame (site-packages, dist-packages, the interpreter's prefixes, torch,
npu-advisor, anything outside the project) is dropped with its source line, and a trace left with no frame is
removed. Nothing else of a node's metadata names a file: `nn_module_stack` holds module class names, `torch_fn`
function names. The source report names the factory the same way (`portable_spec`).

Torch is only needed for the program itself; the path rules are plain functions.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from typing import Any

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<name>.*))?$')
_PACKAGE_DIRS = frozenset({"site-packages", "dist-packages"})


def project_root(spec: str) -> str:
    """The user's project for a factory spec: the current directory when `path/file.py` is inside it, else the file's
    own directory; for `package.module:factory`, the current directory. Never `/` or the home directory itself (a
    path relative to those would still name the user's other directories): then the file's directory, or the
    directory that holds the top-level package."""
    target = spec.rpartition(":")[0]
    cwd = os.path.abspath(os.getcwd())
    too_wide = {os.path.abspath(os.sep), os.path.abspath(os.path.expanduser("~"))}
    if target.endswith(".py"):
        directory = os.path.dirname(os.path.abspath(target))
        inside = directory == cwd or directory.startswith(cwd + os.sep)
        return cwd if inside and cwd not in too_wide else directory
    if cwd not in too_wide:
        return cwd
    found = importlib.util.find_spec(target.split(".")[0]) if target else None
    if found is not None and found.submodule_search_locations:
        return os.path.dirname(os.path.abspath(next(iter(found.submodule_search_locations))))
    if found is not None and found.origin:
        return os.path.dirname(os.path.abspath(found.origin))
    return cwd


def project_path(filename: str, root: str) -> str | None:
    """`filename` relative to `root` when it is a file of the user's project; None for anything else (a generated
    `<...>` name, a file outside `root`, a package installed under it, the interpreter's or torch's own files)."""
    if not filename or filename.startswith("<"):
        return None
    path = os.path.abspath(filename)
    root = os.path.abspath(root)
    if not path.startswith(root + os.sep):
        return None
    relative = os.path.relpath(path, root)
    if _PACKAGE_DIRS & set(relative.split(os.sep)) or _under_interpreter_or_tools(path):
        return None
    return relative


def _under_interpreter_or_tools(path: str) -> bool:
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *_tool_dirs()}
    return any(path.startswith(os.path.abspath(prefix) + os.sep) for prefix in prefixes if prefix)


def _tool_dirs() -> list[str]:
    """torch's and npu-advisor's own directories (also where they are installed from a source checkout)."""
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    found = importlib.util.find_spec("torch")
    if found and found.origin:
        dirs.append(os.path.dirname(os.path.abspath(found.origin)))
    return dirs


def portable_spec(spec: str, root: str) -> str:
    """The factory spec as the report names it: `path/file.py:factory` relative to the project (the base name for a
    file outside it); `package.module:factory` as it is."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target.endswith(".py"):
        return spec
    return f"{project_path(target, root) or os.path.basename(target)}:{name}"


def portable_stack_trace(trace: str, root: str) -> str | None:
    """`trace` with only the project's frames (relative paths, each with its source lines); None when none is left.
    Text that belongs to no frame is dropped."""
    kept: list[str] = []
    keep = False
    for text in trace.splitlines():
        frame = _FRAME.match(text)
        if frame is None:
            if keep:
                kept.append(text)  # the frame's source line (and any marker line under it)
            continue
        relative = project_path(frame["file"], root)
        keep = relative is not None
        if keep:
            name = f", in {frame['name']}" if frame["name"] is not None else ""
            kept.append(f'  File "{relative}", line {frame["line"]}{name}')
    return "\n".join(kept).removeprefix("  ") or None


def make_portable(program: Any, root: str) -> None:
    """Rewrite every node's stack trace in `program` (an ExportedProgram: its graph and every nested graph, e.g. a
    `torch.cond` branch) with `portable_stack_trace`, in place, before it is saved."""
    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        for node in getattr(graph, "nodes", ()):
            trace = node.meta.get("stack_trace")
            if not isinstance(trace, str):
                continue
            portable = portable_stack_trace(trace, root)
            if portable is None:
                del node.meta["stack_trace"]
            else:
                node.meta["stack_trace"] = portable
