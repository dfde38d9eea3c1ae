"""`npu-advisor measure MODEL`: compile and time the model under each backend, here, side by side with eager."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from advisor.cli import model_options as model_opt
from advisor.cli.errors import one_line_errors
from advisor.core import claims
from advisor.core.common_scale import SCALED_HEADER, ComparableTime, comparable_times, scale_footnote
from advisor.core.context import DEFAULT_DECODE_TOKENS, DEFAULT_OPTIMIZER, DEFAULT_WORKLOAD, MAX_DECODE_TOKENS
from advisor.core.report import seeded_compile_note

_UNIT = {"training": "step", "inference": "call"}
_STATUS_STYLE = {
    "ok": "green",
    "fail_accuracy": "red",
    "unavailable": "dim",
    "timeout": "yellow",
    "crashed": "red",
    "oom": "red",
    "compile_error": "red",
    "runtime_error": "red",
}


def measure(
    model: Path = typer.Argument(..., help="a TorchScript (.pt) or ExportedProgram (.pt2) file"),
    backends: list[str] | None = typer.Option(
        None,
        "--backends",
        "-b",
        help="backend[:mode] to measure, repeatable or comma-separated (default: every backend); eager is always "
        "measured as the baseline",
    ),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or npu"),
    workload: str = typer.Option(
        DEFAULT_WORKLOAD,
        "--workload",
        help="inference (forward under no_grad), training (forward, loss, backward, optimizer step) or generation "
        "(a prefill + decode archive: time to first token and per output token)",
    ),
    optimizer: str = typer.Option(DEFAULT_OPTIMIZER, "--optimizer", help="training only: sgd or adamw"),
    decode_tokens: int = typer.Option(
        DEFAULT_DECODE_TOKENS, "--decode-tokens", min=1, max=MAX_DECODE_TOKENS, help="generation only: greedy tokens"
    ),
    inputs: model_opt.Inputs = None,
    input_shape: model_opt.InputShape = None,
    as_json: bool = typer.Option(False, "--json", help="print the MeasurementRun as JSON"),
    timeout_s: float = typer.Option(900.0, "--timeout", help="seconds each (backend, mode) child may take"),
    memory_limit_mb: int = typer.Option(16384, "--memory-limit-mb", help="address-space limit per child"),
    max_time_s: float = typer.Option(5.0, "--max-time", help="cap on each steady-state timing window, seconds"),
    atol: float | None = typer.Option(
        None, "--atol", min=0, help="accuracy check's absolute tolerance (default: per dtype, 1e-4 for float32)"
    ),
    rtol: float | None = typer.Option(
        None, "--rtol", min=0, help="accuracy check's relative tolerance (default: per dtype)"
    ),
) -> None:
    """Measure compile time, latency (with 95% CIs), speedup vs eager, memory and accuracy for each backend."""
    from advisor.harness.measurement import MeasureError, TimingPolicy, measure_model

    if device not in ("cpu", "cuda", "npu"):
        typer.echo(f"error: unknown device '{device}' (cpu, cuda or npu)", err=True)
        raise typer.Exit(2)
    if workload not in ("inference", "training", "generation") or optimizer not in ("sgd", "adamw"):
        typer.echo(
            f"error: --workload is inference, training or generation (got '{workload}'), --optimizer is sgd or adamw "
            f"(got '{optimizer}')",
            err=True,
        )
        raise typer.Exit(2)
    names = [name.strip() for item in backends or [] for name in item.split(",") if name.strip()] or None
    console = Console(stderr=True)
    progress = _ProgressView()
    with one_line_errors("measurement", expected=(MeasureError,)):
        with Live(progress.render(), console=console, refresh_per_second=4, transient=True) as live:

            def on_progress(event: dict) -> None:
                progress.update(event)
                live.update(progress.render())

            run = measure_model(
                str(model),
                backends=names,
                device=device,
                inputs_file=str(inputs) if inputs else None,
                input_shapes=input_shape,
                progress=on_progress,
                timeout_s=timeout_s,
                memory_limit_mb=memory_limit_mb,
                timing=TimingPolicy(max_time_s=max_time_s, min_time_s=min(0.5, max_time_s)),
                workload=workload,
                optimizer=optimizer,
                decode_tokens=decode_tokens,
                accuracy_tolerance={"atol": atol, "rtol": rtol} if atol is not None or rtol is not None else None,
            )
    if as_json:
        typer.echo(json.dumps(run, indent=2))
    else:
        print_run(run, Console())


class _ProgressView:
    """One line per (backend, mode): its current stage and how many timed iterations so far."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], dict] = {}

    def update(self, event: dict) -> None:
        key = (event.get("backend", "?"), event.get("mode", "?"))
        self.rows[key] = {**self.rows.get(key, {}), **event}

    def render(self) -> Table:
        table = Table(title="measuring", title_justify="left", box=None)
        for column in ("backend", "mode", "stage", "iterations"):
            table.add_column(column)
        for (backend, mode), event in self.rows.items():
            stage = event.get("status") or event.get("stage", "")
            table.add_row(backend, mode, stage, str(event.get("iterations") or ""))
        return table


def print_run(run: dict, console: Console) -> None:
    env = run["environment"]
    where = env.get("measured_on", "?")
    label = {"test-double": "a torch_npu TEST DOUBLE (not NPU numbers)", "not-measured": "nothing (not measured)"}
    console.print(
        f"Measured on {label.get(where, where)}: {env.get('device_name', env.get('device', '?'))}, "
        f"torch {env.get('torch_version', '?')}" + (f", CANN {env['cann_version']}" if env.get("cann_version") else "")
    )
    console.print(results_table(run))
    training = next((row["training"] for row in run["measurements"] if row.get("training")), None)
    if training:
        console.print(
            f"Training step: loss = {training['loss']}, optimizer {training['optimizer']}; times, "
            "throughput and peak memory are per step (gradients and optimizer state included), "
            "accuracy is that of the gradients after one step"
        )
        if training.get("train_mode_note"):
            console.print(f"[yellow]{training['train_mode_note']}[/yellow]")
    for row in run["measurements"]:
        if row["status"] != "ok" and row.get("reason"):
            console.print(f"[bold]{row['backend']}:{row['mode']}[/bold] {row['status']}: {row['reason']}")
        elif row.get("accuracy") and row["accuracy"].get("reason"):
            console.print(f"[dim]{row['backend']}:{row['mode']} note: {row['accuracy']['reason']}[/dim]")
    noisy = [
        f"{r['backend']}:{r['mode']}" for r in run["measurements"] if (r.get("latency") or {}).get("verdict") == "noisy"
    ]
    if noisy:
        console.print(
            f"[yellow]noisy timings (IQR > 10% of the median): {', '.join(noisy)}; "
            "compare speedups, not absolute times[/yellow]"
        )
    drifted = [
        f"{r['backend']}:{r['mode']} {r['latency']['drift']:.0%}"
        for r in run["measurements"]
        if (r.get("latency") or {}).get("drift") and r["latency"]["drift"] > DRIFT_NOTE_ABOVE
    ]
    if drifted:
        console.print(
            f"[yellow]the machine's speed moved during timing (p10-p90 of the ~50 ms blocks' medians): "
            f"{', '.join(drifted)}; the CIs do not include this; the side-by-side speedups "
            "are far less affected[/yellow]"
        )


# drift (advisor.core.stats.drift) above this gets a line under the table
DRIFT_NOTE_ABOVE = 0.05


def results_table(run: dict) -> Table:
    """The measured rows, their times on one eager's scale (advisor.core.common_scale: the numbers report.md and the
    dashboard quote); a row's own median is in the JSON only."""
    reference, times = comparable_times(run)
    unit = _UNIT.get(run["workload"], "call")
    scale = SCALED_HEADER if reference is not None else "ms"
    table = Table(title=f"{run['workload']} on {run['environment'].get('device', '?')}", title_justify="left")
    for column, justify in (
        ("backend:mode", "left"),
        ("status", "left"),
        ("compile s cold/warm", "right"),
        (f"{unit} median {scale} [95% CI]", "right"),
        ("p99 (same scale)" if reference is not None else "p99 ms", "right"),
        ("speedup", "right"),
        ("peak MB", "right"),
        ("accuracy", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    table.caption = scale_footnote(reference, times)
    for row in run["measurements"]:
        time = times.get(f"{row['backend']}:{row['mode']}") if row.get("latency") else None
        table.add_row(
            f"{row['backend']}:{row['mode']}",
            Text(row["status"], style=_STATUS_STYLE.get(row["status"], "")),
            f"{'≤' if seeded_compile_note(row.get('compile_s_cold'), row.get('compile_seeded')) else ''}"
            f"{_number(row.get('compile_s_cold'), '.2f')}"
            f"/{_number(row.get('compile_s_warm'), '.2f')}",
            _latency(time),
            _number(time.p99_ms) if time else "-",
            _speedup(row),
            _number(row.get("peak_memory_mb"), ".0f"),
            _accuracy(row.get("accuracy")),
        )
    return table


def _latency(time: ComparableTime | None) -> str:
    """On eager's scale; a row kept on its own times is named in the caption (common_scale.scale_footnote)."""
    if time is None:
        return "-"
    return f"{_number(time.median_ms)} [{_number(time.ci_low_ms)}-{_number(time.ci_high_ms)}]"


def _number(value: float | None, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


def _speedup(row: dict) -> str:
    if row.get("speedup_vs_eager") is None:
        return "-"
    ci = row.get("speedup_ci")
    # the order the interval supports against eager, by the one rule every report reads (advisor.core.claims)
    if not ci:
        return f"{row['speedup_vs_eager']:.2f}x"
    return f"{row['speedup_vs_eager']:.2f}x [{claims.fmt_bound(ci[0])}-{claims.fmt_bound(ci[1])}] {claims.order(ci)}"


def _accuracy(accuracy: dict | None) -> Text | str:
    if not accuracy:
        return "-"
    verdict = "pass" if accuracy["passed"] else "FAIL"
    return Text(f"{verdict} {accuracy['max_abs_err']:.0e}", style="green" if accuracy["passed"] else "red")


def register(app: typer.Typer) -> None:
    app.command("measure")(measure)
