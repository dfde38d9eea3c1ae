"""Renderings of one analysis (context + inspection + measurements + recommendation): text, Markdown, JSON.

`analysis` is `{"model_name", "context", "inspection", "measurements" (MeasurementRun), "recommendation"}`;
any part but the recommendation may be missing. The Markdown is what the service serves as report.md.
Torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from io import StringIO
from typing import Any, Literal

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from advisor.core import catalogue, claims, noise, quantized
from advisor.core import markdown_text as md
from advisor.core.breakdown_report import breakdown_heading, breakdown_line, shown_breakdowns
from advisor.core.common_scale import SCALED_HEADER, ComparableTime, comparable_times, scale_footnote
from advisor.core.context import ContextError, parse_context
from advisor.core.decision import format_calls
from advisor.core.early_answer import pending_note
from advisor.core.results import (
    BreakEven,
    Environment,
    GraphBreaks,
    Inspection,
    MeasurementRow,
    MeasurementRun,
    OpInfo,
    Recommendation,
    read,
)
from advisor.core.results.measurement import compile_is_bound
from advisor.core.shape_plan_text import plan_config, plan_lines
from advisor.core.shape_sweep import speedups_by_shape
from advisor.core.source_report import SOURCE_LABEL, inspection_source_lines

Format = Literal["text", "markdown", "json"]
FORMATS: tuple[str, ...] = ("text", "markdown", "json")
TEXT_WIDTH = 120
MEASUREMENT_COLUMNS = (
    "option",
    "status",
    "compile cold / warm",
    "median [95% CI]",
    "p99",
    "vs eager [95% CI]",
    "peak mem",
    "accuracy",
)
TRAINING_TITLE = "Measurements per training step (forward, loss, backward, optimizer step; gradient accuracy)"


def measurement_columns(run: MeasurementRun | None) -> tuple[str, ...]:
    """MEASUREMENT_COLUMNS, the time columns labelled as on eager's scale where the run has a reference eager
    (advisor.core.common_scale: the dashboard's scale) and per step for a training run."""
    step = "step " if run is not None and run.workload == "training" else ""
    relabel = {"peak mem": "training peak mem", "accuracy": "grad accuracy"} if step else {}
    if _run_times(run)[0] is not None:
        relabel |= {"median [95% CI]": f"{step}median [95% CI], {SCALED_HEADER}", "p99": f"{step}p99 (same scale)"}
    elif step:
        relabel |= {"median [95% CI]": "step median [95% CI]", "p99": "step p99"}
    return tuple(relabel.get(column, column) for column in MEASUREMENT_COLUMNS)


def _run_times(run: MeasurementRun | None) -> tuple[float | None, dict[str, ComparableTime]]:
    """advisor.core.common_scale.comparable_times of the run: the same numbers the dashboard and the CLI show."""
    return comparable_times(run.model_dump(exclude_unset=True)) if run is not None and run.measurements else (None, {})


def measurements_title(run: MeasurementRun | None) -> str:
    return TRAINING_TITLE if run is not None and run.workload == "training" else "Measurements"


def render(analysis: dict[str, Any], fmt: Format = "text") -> str:
    """One analysis as `text` (terminal), `markdown` or `json`."""
    if fmt == "json":
        plain = _plain(analysis)
        if inspection_source_lines(plain.get("inspection")):  # the submitter's report: said where it comes from
            plain = {**plain, "source_report_label": SOURCE_LABEL}
        return json.dumps(plain, indent=2, sort_keys=True, default=str) + "\n"
    if fmt == "markdown":
        return render_markdown(analysis)
    if fmt == "text":
        return render_text(analysis)
    raise ValueError(f"unknown report format {fmt!r}; choose one of {', '.join(FORMATS)}")


# ------------------------------------------------------------------------------------------- shared pieces
def _plain(analysis: dict[str, Any]) -> dict[str, Any]:
    """The analysis with its context as a plain dict, defaults filled in where it validates."""
    context = analysis.get("context")
    if hasattr(context, "model_dump"):
        return {**analysis, "context": context.model_dump()}
    try:
        return {**analysis, "context": parse_context(context).model_dump()}
    except ContextError:
        return analysis


@dataclass(frozen=True)
class _Parts:
    """The analysis' parts read as typed results (leniently: a stored analysis of an older version renders)."""

    rec: Recommendation
    raw_rec: dict[str, Any]  # for `headline`, which reads the plain dict
    context: dict[str, Any]
    run: MeasurementRun | None
    inspection: Inspection | None

    @classmethod
    def of(cls, analysis: dict[str, Any]) -> _Parts:
        raw_rec = analysis.get("recommendation") or {}
        return cls(
            rec=read(Recommendation, raw_rec) or Recommendation(),
            raw_rec=raw_rec if isinstance(raw_rec, dict) else {},
            context=analysis.get("context") or {},
            run=read(MeasurementRun, analysis.get("measurements")),
            inspection=read(Inspection, analysis.get("inspection")),
        )


def headline(rec: dict[str, Any], context: dict[str, Any]) -> str:
    target = str(context.get("target", "the target")).upper()
    if not rec.get("backend"):
        return f"No backend qualifies on {target}"
    return f"Use {catalogue.option_display(rec['backend'], rec.get('mode'))} on {target}"


def status_line(rec: Recommendation, environment: Environment | None, quality: dict[str, Any] | None = None) -> str:
    parts = [f"confidence {rec.confidence or '?'}"]
    if not rec.measured:
        parts.append("UNMEASURED (from the selection tree and op coverage)")
    else:
        env = environment or Environment()
        measured_on = env.measured_on or env.device or "unknown"
        label = "the TorchAir test double (not a real NPU)" if measured_on == "test-double" else measured_on
        parts.append(f"measured on {label}")
        if (quality or {}).get("whole_run"):
            parts.append("NOISY run (see the caveats)")
        elif (quality or {}).get("noisy"):
            parts.append(f"noisy rows: {', '.join(quality['noisy_rows'])}")  # type: ignore[index]
    if rec.tie:
        parts.append("tie within noise")
    parts.append(f"engine {rec.engine_version or '?'}")
    return " | ".join(parts)


def _num(value: Any, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{float(value):.{digits}g}{unit}"


def run_quality(run: MeasurementRun | None) -> dict[str, Any] | None:
    """The run's noise verdict (advisor.core.noise), None without measurements."""
    return noise.quality_of(run.model_dump(exclude_unset=True)) if run and run.measurements else None


def measurement_rows(run: MeasurementRun | None) -> list[tuple[str, ...]]:
    quality = run_quality(run) or {}
    noisy_rows, unresolved = quality.get("noisy_rows") or {}, set(quality.get("unresolved") or ())
    _, times = _run_times(run)
    rows = []
    for m in (run.measurements if run else None) or []:
        time = times.get(m.label)
        speedup_text = _speedup_text(m.speedup_vs_eager, m.speedup_ci)
        if m.label in unresolved and m.speedup_vs_eager is not None:
            speedup_text += ", unresolved"
        rows.append(
            (
                m.label,
                _status_cell(m),
                f"{'≤ ' if _seeded_note(m) else ''}{_num(m.compile_s_cold, ' s')} / {_num(m.compile_s_warm, ' s')}",
                _median_cell(m, time, noisy=m.label in noisy_rows),
                _num(time.p99_ms if time else None, " ms"),
                speedup_text,
                _num(m.peak_memory_mb, " MiB", 4),
                _accuracy_cell(m),
            )
        )
    return rows


def _median_cell(m: MeasurementRow, time: ComparableTime | None, *, noisy: bool) -> str:
    """ "12.3 ms [12.1-12.6]" on eager's scale (`time`; a row kept on its own times is named in the footnote), marked
    noisy and with the window it came from when that is not the first."""
    if time is None:
        return "-"
    median = f"{_num(time.median_ms, ' ms')} [{_num(time.ci_low_ms)}-{_num(time.ci_high_ms)}]"
    if noisy:
        median += " noisy"
    if (window := noise.latency_window(m)) != noise.FIRST_WINDOW:
        median += f" ({window})"
    return median


def _accuracy_cell(m: MeasurementRow) -> str:
    acc_text = "-" if not m.accuracy else ("pass" if m.accuracy.passed else "FAIL")
    if m.accuracy and (drift := quantized.drift_text(m.accuracy.quantized, None)) is not None:
        acc_text += f" ({drift})"  # an int8 row is judged by its drift, not by allclose
    return acc_text


def _status_cell(m: MeasurementRow) -> str:
    status = m.status or "?"
    if status == "skipped":
        return "skipped (see why not)"  # the reason is long and repeated under "Why not the others"
    if status != "ok" and m.reason:
        status = f"{status}: {m.reason}"
    if m.eliminated:  # racing stopped timing it: its numbers are those measured until then
        status += "; eliminated (see below)"  # the reason is long: listed under "Stopped timing early"
    return status


def comparable_note(run: MeasurementRun | None) -> str | None:
    """Under the measurements table: the scale its time columns are on (common_scale.scale_footnote, the reference
    eager median named), and where some process saw a different machine (its eager off the run's middle eager by more
    than noise.EAGER_DRIFT_MAX_RATIO) how far off it was - why its own median is not in the table. None without a
    reference eager."""
    reference, times = _run_times(run)
    footnote = scale_footnote(reference, times)
    if footnote is None or run is None:
        return None
    plain = run.model_dump(exclude_unset=True)
    outliers = noise.eager_outliers(plain)
    if not outliers:
        return footnote
    medians = noise.eager_medians(plain)
    seen = ", ".join(f"{label} {_num(medians[label], ' ms')}" for label in outliers)
    return (
        f"{footnote} Eager ran at {seen} in those rows' processes against a reference eager of "
        f"{_num(reference, ' ms')}: their own medians were timed on a differently loaded machine."
    )


_BREAKDOWN_PARTS = (("export_s", "export"), ("session_s", "session creation"), ("first_call_s", "first call"))


def compile_breakdown_lines(run: MeasurementRun | None) -> list[str]:
    """Where an export backend's cold compile went (its export, session creation, first call): the compile time a
    user waits for includes the export, so say what it is made of; and which cold compiles are bounds, not
    measurements (a compile that started from another option's kernels: advisor.harness.measurement.seeded_cache)."""
    lines = []
    for m in (run.measurements if run else None) or []:
        if note := _seeded_note(m):
            lines.append(f"{m.label}: {note}")
        parts = m.compile_breakdown or {}
        named = [f"{name} {_num(parts[key], ' s')}" for key, name in _BREAKDOWN_PARTS if parts.get(key) is not None]
        if named and m.compile_s_cold is not None:
            warm = f"; warm {_num(m.compile_s_warm, ' s')} loads the saved file" if m.compile_s_warm is not None else ""
            lines.append(f"{m.label}: cold {_num(m.compile_s_cold, ' s')} = {' + '.join(named)}{warm}")
    return lines


def _seeded_note(m: MeasurementRow) -> str | None:
    seeded = m.compile_seeded.model_dump(exclude_none=True) if m.compile_seeded is not None else None
    return seeded_compile_note(m.compile_s_cold, seeded)


def seeded_compile_note(cold_s: float | None, seeded: Mapping[str, Any] | None) -> str | None:
    """What a cold compile that is a bound, not a measurement, is made of (MeasurementRow.compile_seeded); None for
    a measured one."""
    if not compile_is_bound(seeded) or cold_s is None:
        return None
    source = seeded.get("from_option") or "another option"
    return (
        f"cold at most {_num(cold_s, ' s')}, not measured cold - it compiled in {_num(seeded.get('measured_s'), ' s')} "
        f"starting from the kernels {source} had built in this analysis; a cold compile also builds those, which "
        f"took {source} {_num(seeded.get('floor_cold_s'), ' s')} in all"
    )


def generation_lines(run: MeasurementRun | None) -> list[str]:
    """A generation run's phases per option: prefill (time to first token) and a decode step (time per output
    token), each with its side-by-side speedup and compile, tokens/s and whether the greedy tokens match eager's."""
    lines = []
    for m in (run.measurements if run else None) or []:
        g = m.generation
        if g is None or m.status not in ("ok", "fail_accuracy"):
            continue
        parts = []
        for name, phase in (("prefill", g.prefill), ("decode", g.decode)):
            if phase is not None and phase.latency is not None:
                speed = f", {phase.speedup_vs_eager:.2f}x vs eager" if phase.speedup_vs_eager is not None else ""
                compiled = f", compile {_num(phase.compile_s, ' s')}" if phase.compile_s else ""
                parts.append(f"{name} {_num(phase.latency.median_ms, ' ms')}{speed}{compiled}")
        if g.decode_steps is not None and g.decode_steps.median_ms is not None:
            parts.append(f"{_num(g.decode_steps.median_ms, ' ms')} per token over {g.decode_steps.n} steps")
        if g.tokens_per_s is not None:
            parts.append(f"{g.tokens_per_s:,.0f} tokens/s")
        if g.tokens_match is not None:
            parts.append(
                f"{g.decode_tokens} greedy tokens "
                + ("match eager's" if g.tokens_match else f"differ from token {g.first_mismatch}")
            )
        lines.append(f"{m.label}: " + "; ".join(parts))
    return lines


def _prompt_tokens(run: MeasurementRun | None) -> str:
    counts = {m.generation.prompt_tokens for m in (run.measurements if run else None) or [] if m.generation}
    return ", ".join(str(c) for c in sorted(c for c in counts if c is not None)) or "?"


def sweep_lines(run: MeasurementRun | None) -> list[str]:
    """A heading and one line per option: its speedup vs eager at each swept shape ("-" where it did not run)."""
    shapes, series = speedups_by_shape(run)
    if not shapes or not series:
        return []
    lines = ["\nSpeedup vs eager by input shape (" + "; ".join(shapes) + "):"]
    for option, values in series.items():
        lines.append(f"{option}: " + ", ".join("-" if v is None else f"{v:.2f}x" for v in values))
    return lines


def _speedup_text(speedup: float | None, interval: list[float] | None) -> str:
    """ "2.00x [1.90-2.10] faster": the speedup, its 95% CI and the order the CI supports against eager
    (advisor.core.claims); without a CI the point estimate alone, which claims nothing."""
    if speedup is None:
        return "-"
    if not interval or len(interval) != 2:
        return f"{speedup:.2f}x"
    low, high = claims.fmt_bound(interval[0]), claims.fmt_bound(interval[1])
    return f"{speedup:.2f}x [{low}-{high}] {claims.order(interval)}"


def break_even_sentence(be: BreakEven | None) -> str | None:
    """The break-even in words. On the side-by-side scale the per-call saving is said, not the two normalised
    latencies: an option's one quoted latency is its row's (the table's, advisor.core.noise.latency_window)."""
    if not be or not (be.fast_compile and be.fast_run):  # none, or an older shape without the two options
        return None
    unit = be.unit or "calls"
    kind = be.compile_kind or "cold"
    if be.latency_basis == "side_by_side" and be.latency_a_ms is not None and be.latency_b_ms is not None:
        text = (
            f"{be.fast_compile} compiles in {_num(be.compile_a_s, ' s')} and {be.fast_run} in "
            f"{_num(be.compile_b_s, ' s')} ({kind} compile times); side by side with eager, {be.fast_run} saves "
            f"{_num(be.latency_a_ms - be.latency_b_ms, ' ms')} per {unit.removesuffix('s')} over {be.fast_compile} "
            "(eager's median divided by each option's side-by-side speedup"
        )
    else:
        text = (
            f"{be.fast_compile} compiles in {_num(be.compile_a_s, ' s')} and runs at "
            f"{_num(be.latency_a_ms, ' ms')}; {be.fast_run} compiles in {_num(be.compile_b_s, ' s')} "
            f"and runs at {_num(be.latency_b_ms, ' ms')} ({kind} compile times"
        )
    text += f"). N* = {format_calls(be.n_star)} {unit} per compile"
    text += f"; you expect {be.expected:,}." if be.expected else f"; expected {unit} per compile were not given."
    return text


def inspection_lines(inspection: Inspection | None) -> list[str]:
    if not inspection:
        return ["No inspection."]
    count = inspection.parameters.count if inspection.parameters else None
    flops = inspection.flops
    lines = [
        f"Format: {inspection.format} (saved with torch {inspection.saved_with_torch or '?'}); "
        f"{count or 0:,} parameters; " + (f"{flops:,} FLOPs per call" if flops else "FLOPs unknown"),
    ]
    if inspection.custom_ops:
        items = ", ".join(
            f"{op.name} (Inductor: {_coverage(op, 'inductor')}, TorchAir: {_coverage(op, 'torchair')}"
            + (f", ONNX export: {onnx})" if (onnx := _coverage(op, "onnx")) else ")")
            for op in inspection.custom_ops
        )
        lines.append(f"Custom ops: {items}")
    else:
        lines.append("Custom ops: none (only aten/prims ops).")
    breaks = inspection.graph_breaks or GraphBreaks()
    if breaks.analysed:
        lines.append(f"Graph breaks under torch.compile: {breaks.count or 0}")
    else:
        lines.append(f"Graph breaks: not analysed ({breaks.note or 'no reason given'})")
    if inspection.dynamic_dims:
        lines.append(
            "Dynamic dims: " + ", ".join(f"{d.input}[{d.dim}] {d.min}..{d.max}" for d in inspection.dynamic_dims)
        )
    return lines + inspection_source_lines(inspection)  # from FILE.py:factory, when the analysis started there


def _coverage(op: OpInfo, compiler: str) -> str | None:
    return getattr(op.coverage, compiler) if op.coverage else None


def environment_line(run: MeasurementRun | None) -> str | None:
    env = run.environment if run else None
    if not env:
        return None
    keys = (
        "device",
        "device_name",
        "cpu_model",
        "torch_threads",
        "measured_on",
        "torch_version",
        "torch_npu_version",
        "cann_version",
        "host",
    )
    parts = [f"{k}={getattr(env, k)}" for k in keys if getattr(env, k)]
    for when, reading in (env.load or {}).items():
        if isinstance(reading, dict) and reading.get("load") is not None and reading.get("cores"):
            parts.append(f"load {when} timing={reading['load']:.2f} on {reading['cores']} cores")
    return ", ".join(parts)


# ------------------------------------------------------------------------------------------- text
def render_text(analysis: dict[str, Any]) -> str:
    analysis = _plain(analysis)
    parts = _Parts.of(analysis)
    rec, run = parts.rec, parts.run
    out = StringIO()
    # markup off: model names, op names, input names and reasons are user text, never rich markup
    console = Console(
        file=out, width=TEXT_WIDTH, color_system=None, force_terminal=False, highlight=False, markup=False
    )

    console.rule(f"npu-advisor: {analysis.get('model_name', 'model')}")
    console.print(Text(headline(parts.raw_rec, parts.context), style="bold"))
    console.print(status_line(rec, run.environment if run else None, run_quality(run)))
    if (ranked := pending_note(run)) is not None:
        console.print(ranked)
    console.print()
    console.print(rec.summary or "")
    for section in _TEXT_SECTIONS:
        section(console, parts)
    console.rule("Config to paste")
    out.write((rec.snippet or "").rstrip() + "\n")
    return out.getvalue()


def _indented(console: Console, line: str | Text, indent: int) -> None:
    console.print(Padding(line, (0, 0, 0, indent), expand=False))


def _text_measurements(console: Console, parts: _Parts) -> None:
    run = parts.run
    rows = measurement_rows(run)
    if rows:
        table = Table(title=measurements_title(run), title_justify="left", show_lines=False)
        for column in measurement_columns(run):
            table.add_column(column, overflow="fold", no_wrap=column == "option")
        for row in rows:
            table.add_row(*row)
        console.print()
        console.print(table)
    if (note := comparable_note(run)) is not None:
        console.print(note, soft_wrap=True)  # one line: its numbers are never split from what they are
    for line in compile_breakdown_lines(run):
        console.print(f"Compile time of {line}")


def _text_generation(console: Console, parts: _Parts) -> None:
    generation = generation_lines(parts.run)
    if generation:
        console.print(
            f"\nGeneration (prompt of {_prompt_tokens(parts.run)} tokens; decode = one token at the next position):"
        )
        for line in generation:
            _indented(console, Text(f"- {line}"), 2)


def _text_sweep(console: Console, parts: _Parts) -> None:
    for line in sweep_lines(parts.run):
        console.print(Text(line))  # input names come from the user's context: never read as rich markup


def _text_shape_plan(console: Console, parts: _Parts) -> None:
    lines = plan_lines(parts.rec.shape_plan)
    if lines:
        console.print(Text("\nShape plan for the traffic:"))
        for line in lines:
            _indented(console, Text(f"- {line}"), 2)
        console.print(Text("Config for this plan:\n" + plan_config(parts.rec.shape_plan, _target(parts))))


def _target(parts: _Parts) -> str:
    return str(parts.context.get("target") or "npu")


def _text_breakdowns(console: Console, parts: _Parts) -> None:
    breakdowns = shown_breakdowns(parts.run, parts.rec)
    if breakdowns:
        console.print(f"\nWhere the time goes {breakdown_heading(breakdowns[0][1])}:")
        for label, breakdown in breakdowns:
            backend = label.split(":", 1)[0]
            _indented(console, Text(f"- {breakdown_line(label, breakdown, backend=backend)}"), 2)


def _text_break_even(console: Console, parts: _Parts) -> None:
    sentence = break_even_sentence(parts.rec.break_even)
    if sentence:
        console.print(f"\nBreak-even: {sentence}")


def _text_why_not(console: Console, parts: _Parts) -> None:
    if parts.rec.why_not:
        console.print("\nWhy not the others:")
        for label, reason in parts.rec.why_not.items():
            _indented(console, f"- {label}: {reason}", 2)


def stopped_early_rows(run: MeasurementRun | None) -> dict[str, str]:
    """The options racing stopped timing (advisor.core.decision.racing), each with why: "eliminated: ..." (behind)
    or "stopped ahead: ..." (its window, once clearly ahead); their numbers are those measured until then."""
    out: dict[str, str] = {}
    for m in (run.measurements or []) if run else []:
        if m.eliminated:
            out[m.label] = f"eliminated: {m.eliminated}"
        elif m.stopped_ahead:
            out[m.label] = f"stopped ahead: {m.stopped_ahead}"
    return out


ELIMINATED_HEADING = "Stopped timing early (racing: the answer was no longer open for them)"


def _text_eliminated(console: Console, parts: _Parts) -> None:
    if stopped := stopped_early_rows(parts.run):
        console.print(f"\n{ELIMINATED_HEADING}:")
        for label, reason in stopped.items():
            _indented(console, f"- {label}: {reason}", 2)


def _text_layered(console: Console, parts: _Parts) -> None:
    if parts.rec.layered:
        console.print("\nLayered deployment:")
        for role, part in parts.rec.layered.items():
            console.print(f"  - {role} ({', '.join(part.devices or ())}): {part.backend}:{part.mode} - {part.why}")


def _text_path(console: Console, parts: _Parts) -> None:
    console.print("\nHow it was decided:")
    for number, step in enumerate(parts.rec.path or [], 1):
        _indented(console, f"{number}. {step.question}", 2)
        _indented(console, f"-> {step.outcome}", 5)


def _text_caveats(console: Console, parts: _Parts) -> None:
    if parts.rec.caveats:
        console.print("\nCaveats and fixes:")
        for caveat in parts.rec.caveats:
            _indented(console, f"- {caveat.issue}", 2)
            _indented(console, f"fix: {caveat.fix}", 4)


def _text_model(console: Console, parts: _Parts) -> None:
    console.print("\nModel:")
    for line in inspection_lines(parts.inspection):
        console.print(f"  {line}")


def _text_environment(console: Console, parts: _Parts) -> None:
    env = environment_line(parts.run)
    if env:
        console.print(f"\nEnvironment: {env}")


# the text report's sections after the summary, in order (the config snippet closes it)
_TEXT_SECTIONS: tuple[Callable[[Console, _Parts], None], ...] = (
    _text_measurements,
    _text_generation,
    _text_sweep,
    _text_shape_plan,
    _text_breakdowns,
    _text_break_even,
    _text_why_not,
    _text_eliminated,
    _text_layered,
    _text_path,
    _text_caveats,
    _text_model,
    _text_environment,
)


# ------------------------------------------------------------------------------------------- markdown
def _cell(value: Any) -> str:
    return md.inline(value, table=True)


def render_markdown(analysis: dict[str, Any]) -> str:
    analysis = _plain(analysis)
    parts = _Parts.of(analysis)
    rec, run = parts.rec, parts.run
    lines = [
        f"# npu-advisor report: {md.inline(analysis.get('model_name', 'model'))}",
        "",
        f"**{md.inline(headline(parts.raw_rec, parts.context))}**",
        "",
        f"_{md.inline(status_line(rec, run.environment if run else None, run_quality(run)))}_",
        "",
        *([f"> {md.inline(ranked)}", ""] if (ranked := pending_note(run)) is not None else []),
        md.line(rec.summary or ""),
        "",
    ]
    for section in _MARKDOWN_SECTIONS:
        lines += section(parts)
    return "\n".join(lines)


def _md_section(heading: str, body: list[str]) -> list[str]:
    """A `## heading`, a blank line, the body and a blank line."""
    return [f"## {heading}", "", *body, ""]


def _md_measurements(parts: _Parts) -> list[str]:
    run = parts.run
    rows = measurement_rows(run)
    if not rows:
        return []
    lines = [
        f"## {measurements_title(run)}",
        "",
        "| " + " | ".join(measurement_columns(run)) + " |",
        "|" + "---|" * len(MEASUREMENT_COLUMNS),
    ]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    lines.append("")
    if (note := comparable_note(run)) is not None:
        lines += [md.line(note), ""]
    breakdown = compile_breakdown_lines(run)
    return lines + [f"Compile time of {md.inline(text)}  " for text in breakdown] + ([""] if breakdown else [])


def _md_generation(parts: _Parts) -> list[str]:
    generation = generation_lines(parts.run)
    if not generation:
        return []
    return _md_section(
        f"Generation (prompt of {_prompt_tokens(parts.run)} tokens)", [f"- {_cell(g)}" for g in generation]
    )


def _md_sweep(parts: _Parts) -> list[str]:
    sweep = sweep_lines(parts.run)
    if not sweep:
        return []
    body = [md.line(sweep[0].strip()), "", *(f"- {_cell(text)}" for text in sweep[1:])]
    return _md_section("Speedup by input shape", body)


def _md_shape_plan(parts: _Parts) -> list[str]:
    lines = plan_lines(parts.rec.shape_plan)
    if not lines:
        return []
    config = plan_config(parts.rec.shape_plan, _target(parts)).rstrip()
    body = [*(f"- {_cell(line)}" for line in lines), "", md.fence(config) + "python", config, md.fence(config)]
    return _md_section("Shape plan for the traffic", body)


def _md_breakdowns(parts: _Parts) -> list[str]:
    breakdowns = shown_breakdowns(parts.run, parts.rec)
    if not breakdowns:
        return []
    body = [
        f"- {md.code(label)}: "
        f"{_cell(breakdown_line('', breakdown, top=15, backend=label.split(':', 1)[0]).removeprefix(': '))}"
        for label, breakdown in breakdowns
    ]
    return _md_section("Where the time goes", [md.line(breakdown_heading(breakdowns[0][1])), "", *body])


def _md_break_even(parts: _Parts) -> list[str]:
    sentence = break_even_sentence(parts.rec.break_even)
    return _md_section("Break-even", [md.line(sentence)]) if sentence else []


def _md_why_not(parts: _Parts) -> list[str]:
    why_not = parts.rec.why_not
    body = [f"- {md.code(label)}: {md.inline(reason)}" for label, reason in (why_not or {}).items()]
    return _md_section("Why not the others", body) if why_not else []


def _md_eliminated(parts: _Parts) -> list[str]:
    stopped = stopped_early_rows(parts.run)
    body = [f"- {md.code(label)}: {md.inline(reason)}" for label, reason in stopped.items()]
    return _md_section(ELIMINATED_HEADING, body) if stopped else []


def _md_layered(parts: _Parts) -> list[str]:
    if not parts.rec.layered:
        return []
    body = [
        f"- **{md.inline(role)}** ({md.inline(', '.join(part.devices or ()))}): "
        f"{md.code(f'{part.backend}:{part.mode}')} - {md.inline(part.why)}"
        for role, part in parts.rec.layered.items()
    ]
    return _md_section("Layered deployment", body)


def _md_path(parts: _Parts) -> list[str]:
    steps = enumerate(parts.rec.path or [], 1)
    body = [f"{n}. **{md.inline(s.question)}** {md.inline(s.outcome)} (rule {md.code(s.rule)})" for n, s in steps]
    return _md_section("How it was decided", body)


def _md_caveats(parts: _Parts) -> list[str]:
    caveats = parts.rec.caveats
    body = [f"- {md.inline(c.issue)}  \n  **Fix:** {md.inline(c.fix)}" for c in caveats or ()]
    return _md_section("Caveats and fixes", body) if caveats else []


def _md_model(parts: _Parts) -> list[str]:
    # one flat list: a line's own indentation would make it a code block or a nested list in Markdown
    return _md_section("Model", [f"- {md.line(text.strip())}" for text in inspection_lines(parts.inspection)])


def _md_environment(parts: _Parts) -> list[str]:
    env = environment_line(parts.run)
    return _md_section("Environment", [md.line(env)]) if env else []


def _md_context(parts: _Parts) -> list[str]:
    if not parts.context:
        return []
    settings = ", ".join(
        f"{k}={len(v)} distinct shapes" if k == "shape_traffic" else f"{k}={v}"
        for k, v in parts.context.items()
        if v not in (None, [], False)
    )
    return _md_section("Deployment context", [md.line(settings or "defaults")])


def _md_snippet(parts: _Parts) -> list[str]:
    snippet = (parts.rec.snippet or "").rstrip()
    return _md_section("Config to paste", [md.fence(snippet) + "python", snippet, md.fence(snippet)])


# the markdown report's sections after the summary, in order
_MARKDOWN_SECTIONS: tuple[Callable[[_Parts], list[str]], ...] = (
    _md_measurements,
    _md_generation,
    _md_sweep,
    _md_shape_plan,
    _md_breakdowns,
    _md_break_even,
    _md_why_not,
    _md_eliminated,
    _md_layered,
    _md_path,
    _md_caveats,
    _md_model,
    _md_environment,
    _md_context,
    _md_snippet,
)
