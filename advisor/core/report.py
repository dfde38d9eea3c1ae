"""Renderings of one analysis (context + inspection + measurements + recommendation): text, Markdown, JSON.

`analysis` is `{"model_name", "context", "inspection", "measurements" (MeasurementRun), "recommendation"}`;
any part but the recommendation may be missing. The Markdown is what the service serves as report.md.
Torch-free.
"""

from __future__ import annotations

import json
from io import StringIO
from typing import Any, Literal

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from advisor.core import noise
from advisor.core.context import ContextError, parse_context
from advisor.core.decision.break_even import format_calls
from advisor.core.decision.candidates import DISPLAY_NAMES, TORCHAIR_EXPORT_MODE

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


def measurement_columns(run: dict[str, Any] | None) -> tuple[str, ...]:
    """MEASUREMENT_COLUMNS, with the time columns labelled per step for a training run."""
    if (run or {}).get("workload") != "training":
        return MEASUREMENT_COLUMNS
    relabel = {
        "median [95% CI]": "step median [95% CI]",
        "p99": "step p99",
        "peak mem": "training peak mem",
        "accuracy": "grad accuracy",
    }
    return tuple(relabel.get(column, column) for column in MEASUREMENT_COLUMNS)


def measurements_title(run: dict[str, Any] | None) -> str:
    return TRAINING_TITLE if (run or {}).get("workload") == "training" else "Measurements"


def render(analysis: dict[str, Any], fmt: Format = "text") -> str:
    """One analysis as `text` (terminal), `markdown` or `json`."""
    if fmt == "json":
        return json.dumps(_plain(analysis), indent=2, sort_keys=True, default=str) + "\n"
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


def headline(rec: dict[str, Any], context: dict[str, Any]) -> str:
    target = str(context.get("target", "the target")).upper()
    if not rec.get("backend"):
        return f"No backend qualifies on {target}"
    if rec.get("mode") == TORCHAIR_EXPORT_MODE:
        what = "TorchAir's offline export (torchair.dynamo_export, then atc)"
    else:
        name = DISPLAY_NAMES.get(rec["backend"], rec["backend"])
        what = (
            name if rec.get("mode") in (None, "default") or rec["backend"] == "eager" else f"{name}, mode {rec['mode']}"
        )
    return f"Use {what} on {target}"


def status_line(rec: dict[str, Any], environment: dict[str, Any], quality: dict[str, Any] | None = None) -> str:
    parts = [f"confidence {rec.get('confidence', '?')}"]
    if not rec.get("measured"):
        parts.append("UNMEASURED (from the selection tree and op coverage)")
    else:
        measured_on = environment.get("measured_on") or environment.get("device") or "unknown"
        label = "the TorchAir test double (not a real NPU)" if measured_on == "test-double" else measured_on
        parts.append(f"measured on {label}")
        if (quality or {}).get("whole_run"):
            parts.append("NOISY run (see the caveats)")
        elif (quality or {}).get("noisy"):
            parts.append(f"noisy rows: {', '.join(quality['noisy_rows'])}")  # type: ignore[index]
    if rec.get("tie"):
        parts.append("tie within noise")
    parts.append(f"engine {rec.get('engine_version', '?')}")
    return " | ".join(parts)


def _num(value: Any, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{float(value):.{digits}g}{unit}"


def run_quality(run: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's noise verdict (advisor.core.noise), None without measurements."""
    return noise.quality_of(run) if run and run.get("measurements") else None


def measurement_rows(run: dict[str, Any] | None) -> list[tuple[str, ...]]:
    quality = run_quality(run) or {}
    noisy_rows, unresolved = quality.get("noisy_rows") or {}, set(quality.get("unresolved") or ())
    rows = []
    for m in (run or {}).get("measurements") or []:
        lat = m.get("latency") or {}
        label = f"{m.get('backend')}:{m.get('mode', 'default')}"
        if lat:
            median = f"{_num(lat.get('median_ms'), ' ms')} [{_num(lat.get('ci_low_ms'))}-{_num(lat.get('ci_high_ms'))}]"
            if label in noisy_rows:
                median += " noisy"
        else:
            median = "-"
        speedup = m.get("speedup_vs_eager")
        speedup_text = _speedup_text(speedup, m.get("speedup_ci"))
        if label in unresolved and speedup is not None:
            speedup_text += " unresolved"
        accuracy = m.get("accuracy")
        acc_text = "-" if not accuracy else ("pass" if accuracy.get("passed") else "FAIL")
        status = m.get("status", "?")
        if status != "ok" and m.get("reason"):
            status = f"{status}: {m['reason']}"
        rows.append(
            (
                label,
                status,
                f"{_num(m.get('compile_s_cold'), ' s')} / {_num(m.get('compile_s_warm'), ' s')}",
                median,
                _num(lat.get("p99_ms"), " ms"),
                speedup_text,
                _num(m.get("peak_memory_mb"), " MiB", 4),
                acc_text,
            )
        )
    return rows


def _speedup_text(speedup: float | None, interval: list[float] | None) -> str:
    if speedup is None:
        return "-"
    if not interval or len(interval) != 2:
        return f"{speedup:.2f}x"
    return f"{speedup:.2f}x [{interval[0]:.2f}-{interval[1]:.2f}]"


def break_even_sentence(be: dict[str, Any] | None) -> str | None:
    if not be:
        return None
    unit = be.get("unit", "calls")
    text = (
        f"{be['fast_compile']} compiles in {_num(be.get('compile_a_s'), ' s')} and runs at "
        f"{_num(be.get('latency_a_ms'), ' ms')}; {be['fast_run']} compiles in {_num(be.get('compile_b_s'), ' s')} "
        f"and runs at {_num(be.get('latency_b_ms'), ' ms')} ({be.get('compile_kind', 'cold')} compile times"
    )
    if be.get("latency_basis") == "side_by_side":
        text += "; latencies are eager's median divided by each option's side-by-side speedup"
    text += f"). N* = {format_calls(be.get('n_star'))} {unit} per compile"
    expected = be.get("expected")
    text += f"; you expect {expected:,}." if expected else f"; expected {unit} per compile were not given."
    return text


def inspection_lines(inspection: dict[str, Any] | None) -> list[str]:
    if not inspection:
        return ["No inspection."]
    params = inspection.get("parameters") or {}
    flops = inspection.get("flops")
    lines = [
        f"Format: {inspection.get('format')} (saved with torch {inspection.get('saved_with_torch') or '?'}); "
        f"{params.get('count', 0):,} parameters; " + (f"{flops:,} FLOPs per call" if flops else "FLOPs unknown"),
    ]
    custom = inspection.get("custom_ops") or []
    if custom:
        items = ", ".join(
            f"{op['name']} (Inductor: {op['coverage']['inductor']}, TorchAir: {op['coverage']['torchair']})"
            for op in custom
        )
        lines.append(f"Custom ops: {items}")
    else:
        lines.append("Custom ops: none (only aten/prims ops).")
    breaks = inspection.get("graph_breaks") or {}
    if breaks.get("analysed"):
        lines.append(f"Graph breaks under torch.compile: {breaks.get('count', 0)}")
    else:
        lines.append(f"Graph breaks: not analysed ({breaks.get('note', 'no reason given')})")
    dims = inspection.get("dynamic_dims") or []
    if dims:
        lines.append(
            "Dynamic dims: " + ", ".join(f"{d['input']}[{d['dim']}] {d.get('min')}..{d.get('max')}" for d in dims)
        )
    return lines


def environment_line(run: dict[str, Any] | None) -> str | None:
    env = (run or {}).get("environment")
    if not env:
        return None
    keys = ("device", "device_name", "measured_on", "torch_version", "torch_npu_version", "cann_version", "host")
    return ", ".join(f"{k}={env[k]}" for k in keys if env.get(k))


# ------------------------------------------------------------------------------------------- text
def render_text(analysis: dict[str, Any]) -> str:
    analysis = _plain(analysis)
    rec = analysis.get("recommendation") or {}
    context = analysis.get("context") or {}
    run = analysis.get("measurements")
    out = StringIO()
    console = Console(file=out, width=TEXT_WIDTH, color_system=None, force_terminal=False, highlight=False)

    console.rule(f"npu-advisor: {analysis.get('model_name', 'model')}")
    console.print(Text(headline(rec, context), style="bold"))
    console.print(status_line(rec, (run or {}).get("environment") or {}, run_quality(run)))
    console.print()
    console.print(rec.get("summary", ""))

    rows = measurement_rows(run)
    if rows:
        table = Table(title=measurements_title(run), title_justify="left", show_lines=False)
        for column in measurement_columns(run):
            table.add_column(column, overflow="fold", no_wrap=column == "option")
        for row in rows:
            table.add_row(*row)
        console.print()
        console.print(table)
    sentence = break_even_sentence(rec.get("break_even"))
    if sentence:
        console.print(f"\nBreak-even: {sentence}")
    if rec.get("why_not"):
        console.print("\nWhy not the others:")
        for label, reason in rec["why_not"].items():
            console.print(Padding(f"- {label}: {reason}", (0, 0, 0, 2), expand=False))
    if rec.get("layered"):
        console.print("\nLayered deployment:")
        for role, part in rec["layered"].items():
            console.print(
                f"  - {role} ({', '.join(part['devices'])}): {part['backend']}:{part['mode']} - {part['why']}"
            )
    console.print("\nHow it was decided:")
    for number, step in enumerate(rec.get("path") or [], 1):
        console.print(Padding(f"{number}. {step['question']}", (0, 0, 0, 2), expand=False))
        console.print(Padding(f"-> {step['outcome']}", (0, 0, 0, 5), expand=False))
    if rec.get("caveats"):
        console.print("\nCaveats and fixes:")
        for caveat in rec["caveats"]:
            console.print(Padding(f"- {caveat['issue']}", (0, 0, 0, 2), expand=False))
            console.print(Padding(f"fix: {caveat['fix']}", (0, 0, 0, 4), expand=False))
    console.print("\nModel:")
    for line in inspection_lines(analysis.get("inspection")):
        console.print(f"  {line}")
    env = environment_line(run)
    if env:
        console.print(f"\nEnvironment: {env}")
    console.rule("Config to paste")
    out.write(rec.get("snippet", "").rstrip() + "\n")
    return out.getvalue()


# ------------------------------------------------------------------------------------------- markdown
def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(analysis: dict[str, Any]) -> str:
    analysis = _plain(analysis)
    rec = analysis.get("recommendation") or {}
    context = analysis.get("context") or {}
    run = analysis.get("measurements")
    lines = [
        f"# npu-advisor report: {analysis.get('model_name', 'model')}",
        "",
        f"**{headline(rec, context)}**",
        "",
        f"_{status_line(rec, (run or {}).get('environment') or {}, run_quality(run))}_",
        "",
        rec.get("summary", ""),
        "",
    ]
    rows = measurement_rows(run)
    if rows:
        lines += [
            f"## {measurements_title(run)}",
            "",
            "| " + " | ".join(measurement_columns(run)) + " |",
            "|" + "---|" * len(MEASUREMENT_COLUMNS),
        ]
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
        lines.append("")
    sentence = break_even_sentence(rec.get("break_even"))
    if sentence:
        lines += ["## Break-even", "", sentence, ""]
    if rec.get("why_not"):
        lines += ["## Why not the others", ""]
        lines += [f"- `{label}`: {reason}" for label, reason in rec["why_not"].items()]
        lines.append("")
    if rec.get("layered"):
        lines += ["## Layered deployment", ""]
        lines += [
            f"- **{role}** ({', '.join(part['devices'])}): `{part['backend']}:{part['mode']}` - {part['why']}"
            for role, part in rec["layered"].items()
        ]
        lines.append("")
    lines += ["## How it was decided", ""]
    lines += [
        f"{n}. **{step['question']}** {step['outcome']} (rule `{step['rule']}`)"
        for n, step in enumerate(rec.get("path") or [], 1)
    ]
    lines.append("")
    if rec.get("caveats"):
        lines += ["## Caveats and fixes", ""]
        lines += [f"- {c['issue']}  \n  **Fix:** {c['fix']}" for c in rec["caveats"]]
        lines.append("")
    lines += ["## Model", ""] + [f"- {line}" for line in inspection_lines(analysis.get("inspection"))] + [""]
    env = environment_line(run)
    if env:
        lines += ["## Environment", "", env, ""]
    if context:
        settings = ", ".join(f"{k}={v}" for k, v in context.items() if v not in (None, [], False))
        lines += ["## Deployment context", "", settings or "defaults", ""]
    lines += ["## Config to paste", "", "```python", rec.get("snippet", "").rstrip(), "```", ""]
    return "\n".join(lines)
