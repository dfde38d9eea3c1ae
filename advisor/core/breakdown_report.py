"""Which rows' time breakdowns a report shows (eager and the recommended option), and how they read as text.

The breakdowns themselves are measured in the child (advisor.harness.measurement.profiler_pass); the report, the
Markdown and the dashboard show eager's and the recommended option's, the JSON keeps every row's. Torch-free.
"""

from __future__ import annotations

from advisor.core.catalogue import EAGER_LABEL, display_name, option_label, outside_profiler
from advisor.core.results import MeasurementRow, MeasurementRun, Recommendation, TimeBreakdown


def shown_breakdowns(run: MeasurementRun | None, rec: Recommendation | None) -> list[tuple[str, TimeBreakdown]]:
    """(label, breakdown) for eager and the recommended option, in that order, where each has one."""
    chosen = option_label(rec.backend, rec.mode) if rec and rec.backend else None
    shown = []
    for row in (run.measurements if run else None) or []:
        if (row.backend == "eager" or row.label == chosen) and _has_breakdown(row):
            shown.append((row.label, row.time_breakdown))
    shown.sort(key=lambda item: item[0] != EAGER_LABEL)
    return shown  # type: ignore[return-value]


def _has_breakdown(row: MeasurementRow) -> bool:
    breakdown = row.time_breakdown
    return breakdown is not None and (bool(breakdown.entries) or bool(breakdown.error) or bool(breakdown.note))


def breakdown_heading(breakdown: TimeBreakdown) -> str:
    calls = f", {breakdown.calls} calls after the timed window" if breakdown.calls else ""
    return f"({breakdown.source or 'torch.profiler'}{calls}; profiler overhead included, so shares, not times)"


def breakdown_facts(breakdown: TimeBreakdown) -> list[str]:
    """The compiled-only facts: generated kernels and the ops Inductor fell back to; what the profiler cannot see."""
    facts = []
    if breakdown.error:
        facts.append(breakdown.error)
    if breakdown.fused_kernels is not None:
        facts.append(f"{breakdown.fused_kernels} generated kernel{'s' if breakdown.fused_kernels != 1 else ''}")
    if breakdown.fallback_ops:
        facts.append("fell back to eager kernels: " + ", ".join(breakdown.fallback_ops))
    if breakdown.note:
        facts.append(breakdown.note)
    return facts


def outside_profiler_note(backend: str | None) -> str | None:
    """What a profile of `backend` is when its runtime runs outside torch.profiler (ONNX Runtime, OpenVINO): said
    instead of its entries, which are only the glue around the call; None for a backend the profiler sees into."""
    if not outside_profiler(backend):
        return None
    return (
        f"{display_name(str(backend))} runs its own kernels outside PyTorch's profiler: a profile sees only the glue "
        "around the call into it (input conversion, the session call), not where its time goes - use the runtime's "
        "own profiler for that"
    )


def breakdown_line(label: str, breakdown: TimeBreakdown, top: int = 6, backend: str | None = None) -> str:
    """`eager: aten::addmm 41%, aten::gelu 22%, ...; other 9%` plus the facts, one line per option; for a `backend`
    whose runtime runs outside the profiler, that note instead of its glue entries."""
    if (note := outside_profiler_note(backend)) is not None:
        return f"{label}: {note}"
    entries = (breakdown.entries or [])[:top]
    parts = [f"{e.name} {_percent(e.share)}" + (f" ({e.kind})" if e.kind not in (None, "op") else "") for e in entries]
    rest = sum(e.share or 0.0 for e in (breakdown.entries or [])[top:]) + (breakdown.other_share or 0.0)
    if entries and rest >= 0.005:
        parts.append(f"other {_percent(rest)}")
    text = f"{label}: " + (", ".join(parts) if parts else "no ops seen")
    facts = breakdown_facts(breakdown)
    return text + (f"; {'; '.join(facts)}" if facts else "")


def _percent(share: float | None) -> str:
    return "?" if share is None else f"{share * 100:.0f}%"
