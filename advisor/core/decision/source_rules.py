"""Caveats from the source-side report (advisor.core.source_report): what running the user's own code found.

Graph breaks and recompiles matter for every backend that captures through Dynamo (torch.compile with Inductor,
TorchAir's GE and ACL-graph modes), and an export failure matters for the edge / offline-export path. The
report comes from the submitting machine, not from a worker, and each caveat says so. The engine adds these to
its caveats when the inspection carries a `source_report` (advisor.core.decision.engine). Pure and torch-free.
"""

from __future__ import annotations

from typing import Any

from advisor.core.context import DeploymentContext
from advisor.core.source_report import SOURCE_LABEL, SourceBreak, SourceReport, source_report_or_none

FIRST_LINES = 3  # break lines named as "fix these first"
DYNAMO_BACKENDS = ("inductor", "torchair")  # the options that capture the model with Dynamo


def source_caveats(inspection: dict[str, Any] | None, chosen: Any, context: DeploymentContext) -> list[dict[str, str]]:
    """The caveats of the inspection's `source_report` for the chosen option (`Option` or None) in `context`."""
    report = source_report_or_none((inspection or {}).get("source_report"))
    if report is None:
        return []
    backend = getattr(chosen, "backend", None)
    caveats: list[dict[str, str]] = []
    if (item := graph_break_caveat(report, backend, context)) is not None:
        caveats.append(item)
    if (item := recompile_caveat(report, backend)) is not None:
        caveats.append(item)
    if (item := export_caveat(report, context)) is not None:
        caveats.append(item)
    return caveats


def graph_break_caveat(report: SourceReport, backend: str | None, context: DeploymentContext) -> dict[str, str] | None:
    breaks = report.graph_breaks
    if not breaks.analysed or not breaks.break_count or not breaks.breaks:
        return None
    files = list(dict.fromkeys(b.file or "an unknown file" for b in breaks.breaks))
    first = breaks.breaks[:FIRST_LINES]
    where = files[0] if len(files) == 1 else f"{len(files)} files"
    if backend == "torchair" or (backend is None and context.target == "npu"):
        cost = "TorchAir (GE) compiles each graph separately and runs Python between them"
    elif backend == "inductor":
        cost = "Inductor optimises each graph separately and runs Python between them"
    else:
        cost = "torch.compile (Inductor, and TorchAir's GE mode) would compile each graph separately"
    issue = (
        f"{breaks.break_count} graph break(s) in {where} ({breaks.graph_count} graphs; {SOURCE_LABEL}): {cost}. "
        f"Fix {_lines(first)} first: " + "; ".join(_break_text(b) for b in first) + "."
    )
    hints = list(dict.fromkeys(hint for b in first for hint in b.hints))
    fix = (
        "Dynamo's hints: " + " ".join(_sentence(h) for h in hints[:4])
        if hints
        else "Remove the Python-side work at those lines (data-dependent branches, .item(), printing, unsupported "
        "calls) or move it out of forward; `npu-advisor inspect FILE.py:factory` shows each break again."
    )
    return {"issue": issue, "fix": fix}


def recompile_caveat(report: SourceReport, backend: str | None) -> dict[str, str] | None:
    """Recompiles at other shapes: the failed guards, and whether marking the varying dims dynamic removed them."""
    recompiles = report.recompiles
    if not recompiles.analysed or recompiles.recompiles == 0:
        return None
    recompiled = [p for p in recompiles.points if p.recompiled]
    guards = list(dict.fromkeys(g for p in recompiled for g in p.guard_failures))
    shapes = "; ".join(", ".join(f"{n}={'x'.join(map(str, s))}" for n, s in p.shapes.items()) for p in recompiled[:3])
    issue = (
        f"The model compiled again at {len(recompiled)} of {len(recompiles.points)} other input shape(s) ({shapes}; "
        f"{SOURCE_LABEL})" + (f": guard failed: {'; '.join(guards[:3])}" if guards else "") + "."
    )
    marked = recompiles.marked_dynamic
    if marked is not None and marked.dims:
        dims = ", ".join(f"{d.input} dim {d.dim}" for d in marked.dims)
        calls = "; ".join(f"torch._dynamo.mark_dynamic({d.input}, {d.dim})" for d in marked.dims)
        if marked.recompiles == 0:
            fix = (
                f"Mark {dims} dynamic before the first call ({calls}), or pass dynamic_shapes when exporting: "
                "with them marked the same calls did not recompile."
            )
        elif marked.recompiles is None:
            fix = (
                f"Marking {dims} dynamic failed ({marked.error}): the model specialises on that size; pad inputs to "
                "a few fixed sizes (bucketing) and expect one compile per bucket."
            )
        else:
            guards = (
                "; ".join(marked.guard_failures[:2])
                or "the graph compiled with them dynamic does not serve every shape"
            )
            fix = f"Marking {dims} dynamic still recompiled {marked.recompiles} time(s) ({guards})"
            if report.graph_breaks.break_count:
                fix += (
                    ": the graph breaks split forward into functions Dynamo resumes with inputs of their own, which "
                    "are not marked; fix the graph breaks first, then mark the dims again."
                )
            else:
                fix += ": pad inputs to a few fixed sizes and expect one compile per size."
    else:
        fix = "Pad inputs to a few fixed sizes (bucketing) and count one compile per size in the break-even."
    if backend == "torchair":
        fix += " TorchAir's GE graph recompiles on each new static shape unless the dim is dynamic."
    return {"issue": issue, "fix": fix}


def export_caveat(report: SourceReport, context: DeploymentContext) -> dict[str, str] | None:
    """An export failure matters where the deployment needs an exported program: the edge / offline path."""
    export = report.export
    if not export.attempts or export.ok:
        return None
    if context.stage != "edge" and not context.needs_offline_export:
        return None
    failed = "; ".join(
        f"{'strict' if a.strict else 'non-strict'}: {(a.error or '').splitlines()[0] if a.error else 'failed'}"
        for a in export.attempts
        if not a.ok
    )
    if export.save_error:
        failed = f"{failed}; {export.save_error}" if failed else export.save_error
    issue = f"torch.export failed on your code ({SOURCE_LABEL}): {failed}."
    draft = export.draft
    if draft is not None and draft.problems:
        listed = "; ".join(f"{p.kind}{' at ' + p.location if p.location else ''}" for p in draft.problems[:FIRST_LINES])
        fix = (
            f"draft_export found {len(draft.problems)} problem(s): {listed}. Fix them (torch._check for "
            "data-dependent values, a fake kernel for a custom op), then export again; the edge/offline path needs "
            "an exported program."
        )
    elif draft is not None and draft.error:
        fix = f"draft_export failed as well ({draft.error.splitlines()[0]}); fix the first export error above."
    else:
        fix = "Fix the export error above; the edge/offline path needs an exported program."
    return {"issue": issue, "fix": fix}


def _lines(breaks: list[SourceBreak]) -> str:
    numbers = [str(b.line) for b in breaks if b.line is not None]
    if not numbers:
        return "these"
    return f"line {numbers[0]}" if len(numbers) == 1 else f"lines {', '.join(numbers[:-1])} and {numbers[-1]}"


def _break_text(item: SourceBreak) -> str:
    code = f" `{item.code}`" if item.code else ""
    return f"{item.where}{code}: {item.kind}"


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else f"{text}."
