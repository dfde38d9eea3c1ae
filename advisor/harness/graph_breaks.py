"""Graph breaks under `torch.compile`, from Dynamo's own `torch._dynamo.explain`.

explain runs the model for real (with Dynamo's "eager" backend, no Inductor compile), so callers only use
it on runnable models; it runs under `torch.no_grad()` with Dynamo's caches reset before and after.
"""

from __future__ import annotations

import os
from typing import Any

from advisor.core.schema import GraphBreak, GraphBreaks
from advisor.core.text import first_line


def find_graph_breaks(fn: Any, args: tuple, kwargs: dict | None = None) -> GraphBreaks:
    """Count and explain the graph breaks Dynamo hits when compiling `fn(*args, **kwargs)`."""
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
    reasons: list[GraphBreak] = [
        {"reason": first_line(reason.reason), "location": _location(reason.user_stack)}
        for reason in result.break_reasons
    ]
    return {
        "analysed": True,
        "count": result.graph_break_count,
        "graph_count": result.graph_count,
        "reasons": reasons,
    }


def not_analysed(note: str) -> GraphBreaks:
    return {"analysed": False, "count": None, "graph_count": None, "reasons": [], "note": note}


def _location(user_stack: list[Any] | None) -> str | None:
    """'file.py:12 in forward' of the innermost user frame; only the file's base name (no uploader paths)."""
    if not user_stack:
        return None
    frame = user_stack[-1]
    return f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}"


def _summary(exc: BaseException) -> str:
    """The first meaningful line of a Dynamo error (they start with a generic wrapper line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if "no fake impl" in line or "fake" in line.lower()] or lines
    return f"{type(exc).__name__}: {useful[0]}" if useful else type(exc).__name__
