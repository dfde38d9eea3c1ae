"""`npu-advisor analyze MODEL`: inspect, measure and decide, then print the report.

`--local` (the default) does everything on this machine through advisor.harness.pipeline (as the worker does):
inspection in a sandboxed child, measurement (one child per backend and mode), then the decision engine.
`--server URL` hands the same job to a team server through `advisor.cli.remote.analyze_remote`. Nothing here
imports torch; the children do.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import typer

from advisor.cli.token_file import read_token
from advisor.core.context import Fleet, ModelChanges, Optimizer, Stage, Target, Workload
from advisor.core.progress import ProgressEvent
from advisor.core.report import FORMATS

EXIT_FAILED = 1
EXIT_USAGE = 2

# CLI flag value -> DeploymentContext field; a flag that is not given leaves the field alone.
_FLAG_FIELDS = {
    "stage": "stage",
    "model_changes": "model_changes",
    "workload": "workload",
    "optimizer": "optimizer",
    "target": "target",
    "fleet": "fleet",
    "expected_calls": "expected_calls_per_compile",
    "latency_target_ms": "latency_target_ms",
    "memory_budget_mb": "memory_budget_mb",
    "offline_export": "needs_offline_export",
    "resource_constrained": "resource_constrained",
    "ships_cache": "ships_compile_cache",
    "max_graphs": "max_graphs",
    "shape_traffic": "shape_traffic",
}


def _choices(field_type: Any) -> str:
    """`a | b | c`: every value a context field accepts, read from its Literal so --help lists each one."""
    return " | ".join(get_args(field_type))


def analyze(
    model: Path = typer.Argument(
        ...,
        help="a TorchScript (.pt) or ExportedProgram (.pt2) file, or your code: path/to/file.py:factory or "
        "package.module:factory (exported here, then analysed; graph breaks, recompiles and export problems too)",
    ),
    local: bool = typer.Option(True, "--local/--no-local", help="run everything on this machine (the default)"),
    server: str | None = typer.Option(None, "--server", help="a team server URL: analyse there instead"),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="file holding the API token for --server (mode 0600); default: $ADVISOR_TOKEN"
    ),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="with --server: follow the analysis to the end"),
    force: bool = typer.Option(
        False, "--force", help="with --server: measure again even if an identical analysis exists"
    ),
    tag: str | None = typer.Option(
        None, "--tag", help="with --server: the model suite this analysis belongs to (summarised at /suites/TAG)"
    ),
    context_file: Path | None = typer.Option(None, "--context", help="deployment context as a JSON file"),
    stage: str | None = typer.Option(None, help=_choices(Stage)),
    model_changes: str | None = typer.Option(None, "--model-changes", help=_choices(ModelChanges)),
    workload: str | None = typer.Option(
        None, help=f"{_choices(Workload)} (generation: a causal LM's prefill and decode)"
    ),
    optimizer: str | None = typer.Option(None, help=f"training only: {_choices(Optimizer)} (default sgd)"),
    target: str | None = typer.Option(None, help=f"the production device: {_choices(Target)}"),
    fleet: str | None = typer.Option(None, help=f"{_choices(Fleet)} (mixed: developed on CPU/GPU, served on NPU)"),
    expected_calls: int | None = typer.Option(None, "--expected-calls", help="calls served per compile"),
    latency_target_ms: float | None = typer.Option(None, "--latency-target-ms", help="p99 latency target"),
    memory_budget_mb: float | None = typer.Option(None, "--memory-budget-mb", help="peak memory budget in MiB"),
    offline_export: bool | None = typer.Option(
        None, "--offline-export/--no-offline-export", help="the model must be exported to run without Python"
    ),
    resource_constrained: bool | None = typer.Option(
        None,
        "--resource-constrained/--not-resource-constrained",
        help="the serving device is short of memory or compute",
    ),
    ships_cache: bool | None = typer.Option(
        None, "--ships-cache/--no-ships-cache", help="the deployment ships a warm compile cache"
    ),
    shape_traffic: Path | None = typer.Option(
        None,
        "--shape-traffic",
        help='JSON Lines of observed calls ({"ids": [1, 61], "count": 3} per line): plan dynamic vs static vs '
        "bucketed graphs for them",
    ),
    max_graphs: int | None = typer.Option(
        None, "--max-graphs", help="graph budget of the shape plan (default: the target's: npu 64, cpu/cuda 8)"
    ),
    backends: list[str] | None = typer.Option(
        None, "--backends", help="backends to measure, e.g. inductor,torchair:npugraph_ex"
    ),
    device: str | None = typer.Option(None, "--device", help="where to measure here (default: the target)"),
    skip_measure: bool = typer.Option(False, "--skip-measure", help="inspect only: an unmeasured recommendation"),
    inputs: Path | None = typer.Option(None, "--inputs", help="example inputs saved with torch.save"),
    calibration: Path | None = typer.Option(
        None, "--calibration", help="int8 options: calibration samples, an .npz of input0, input1, ... (no pickle)"
    ),
    input_shape: list[str] | None = typer.Option(None, "--input-shape", help="NAME=1x3x224x224:float32, per input"),
    fmt: str = typer.Option("text", "--format", help=f"report format: {' | '.join(FORMATS)}"),
    out: Path | None = typer.Option(None, "--out", help="write the report to this file instead of stdout"),
    export_to: Path | None = typer.Option(
        None,
        "--export-to",
        help="for a file.py:factory model, where the ExportedProgram is written (default ./<file>-<factory>.pt2)",
    ),
    strict_export: bool = typer.Option(
        False,
        "--strict-export",
        help="for a file.py:factory model, torch.export strict too when non-strict succeeds (default: strict "
        "only where non-strict fails)",
    ),
) -> None:
    """Recommend Inductor or TorchAir (or another backend) for MODEL in your deployment, by measuring."""
    flags = {
        "stage": stage,
        "model_changes": model_changes,
        "workload": workload,
        "optimizer": optimizer,
        "target": target,
        "fleet": fleet,
        "expected_calls": expected_calls,
        "latency_target_ms": latency_target_ms,
        "memory_budget_mb": memory_budget_mb,
        "offline_export": offline_export,
        "resource_constrained": resource_constrained,
        "ships_cache": ships_cache,
        "max_graphs": max_graphs,
        "shape_traffic": read_traffic(shape_traffic),
    }
    if fmt not in FORMATS:
        _fail(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
    from advisor.cli.source_front import decide_with_source, export_for_analysis, is_source_spec, upload_ready

    source = is_source_spec(model)
    _check_model_arguments(model, source, inputs, input_shape, export_to, strict_export)
    context = _context(context_file, flags)
    _check_calibration(calibration)  # here too with --server: a refused file is not uploaded
    if server:
        _refuse_local_only(device, skip_measure, input_shape)
        token = read_token(token_file)
        source_report = None
        if source:  # exported here; the server measures the file and stores the source-side report with it
            model, source_report = export_for_analysis(str(model), context, export_to, strict_export=strict_export)
            source_report = upload_ready(source_report)
        raise typer.Exit(
            _analyze_on_server(
                model=model,
                context=context.model_dump(),
                server=server,
                token=token,
                wait=wait,
                fmt=fmt,
                inputs=inputs,
                backends=_split(backends),
                force=force,
                tag=tag,
                out=out,
                source_report=source_report,
                calibration=calibration,
            )
        )
    _refuse_server_only(force, tag, local)
    source_report = None
    if source:
        model, source_report = export_for_analysis(str(model), context, export_to, strict_export=strict_export)
    analysis = analyze_locally(
        model,
        context,
        backends=_split(backends),
        device=device or context.target,
        skip_measure=skip_measure,
        inputs=inputs,
        input_shapes=input_shape,
        calibration=calibration,
    )
    if source_report is not None:
        analysis = decide_with_source(analysis, source_report)
    from advisor.core.report import render

    _write_report(render(analysis, fmt), out)  # type: ignore[arg-type]


def _check_model_arguments(
    model: Path,
    source: bool,
    inputs: Path | None,
    input_shape: list[str] | None,
    export_to: Path | None,
    strict_export: bool,
) -> None:
    """A model file must exist; the inputs flags apply to a model file, the export flags to file.py:factory."""
    if not source and not model.is_file():
        _fail(f"{model} does not exist or is not a file")
    if source and (inputs or input_shape):
        _fail("--inputs and --input-shape do not apply to file.py:factory (the factory returns the inputs)")
    if not source and (export_to is not None or strict_export):
        _fail("--export-to and --strict-export apply to path/to/file.py:factory only")


def _refuse_local_only(device: str | None, skip_measure: bool, input_shape: list[str] | None) -> None:
    """With --server: the flags that only a local analysis can honour stop here."""
    local_only = {"--device": device, "--skip-measure": skip_measure or None, "--input-shape": input_shape or None}
    if given := [flag for flag, value in local_only.items() if value is not None]:
        _fail(f"{', '.join(given)} apply to --local only (the server's worker measures on its own device)")


def _refuse_server_only(force: bool, tag: str | None, local: bool) -> None:
    """Without --server: the flags that only a team server can honour stop here, and so does --no-local."""
    if force:
        _fail("--force applies to --server only (a local analysis always measures)")
    if tag:
        _fail("--tag applies to --server only (suites live on a team server)")
    if not local:
        _fail("choose --local or --server URL")


def _write_report(report: str, out: Path | None) -> None:
    if out:
        out.write_text(report)
        typer.echo(f"report written to {out}", err=True)
    else:
        typer.echo(report, nl=False)


def _check_calibration(calibration: Path | None) -> None:
    """A calibration file that is not a bounded, pickle-free .npz stops here, before anything is measured."""
    if calibration is None:
        return
    from advisor.core.calibration import CalibrationRefused, check_file

    try:
        check_file(calibration)
    except CalibrationRefused as exc:
        _fail(f"{calibration}: {exc}")


def analyze_locally(
    model: Path,
    context: Any,
    *,
    backends: list[str] | None,
    device: str,
    skip_measure: bool,
    inputs: Path | None,
    input_shapes: list[str] | None,
    calibration: Path | None = None,
) -> dict[str, Any]:
    """Inspect (sandboxed), measure and decide on this machine (advisor.harness.pipeline); returns the analysis
    dict for `render`."""
    from advisor.core.artifacts import ArtifactRejected, sniff

    try:
        sniff(model)
    except ArtifactRejected as exc:
        _fail(str(exc))
    from advisor.harness.pipeline import AnalysisRequest, run_analysis

    request = AnalysisRequest(
        model=str(model),
        device=device,
        inputs=str(inputs) if inputs else None,
        input_shapes=input_shapes,
        backends=backends,
        workload=context.workload,
        optimizer=context.optimizer,
        decode_tokens=context.decode_tokens,
        accuracy_tolerance=context.accuracy_tolerance.model_dump() if context.accuracy_tolerance else None,
        measure=not skip_measure,
        calibration=str(calibration) if calibration else None,
    )
    outcome = run_analysis(request, _ProgressLines(device), context=context, on_ranked=_print_ranked(context))
    if (stop := outcome.failure) is not None:
        if stop.step == "inspect":
            _fail(f"inspection failed ({stop.status}): {stop.reason or 'no details'}", EXIT_FAILED)
        _fail(stop.reason or stop.status)
    return {
        "model_name": model.name,
        "context": context.model_dump(),
        "inspection": outcome.inspection,
        "measurements": outcome.measurements,
        "recommendation": outcome.recommendation,
    }


def _print_ranked(context: Any) -> Callable[[Any], None]:
    """The pipeline's `on_ranked`: the answer as one stderr line as soon as the options are ranked (the report,
    with the recommended option's details, follows when they are measured: advisor.core.early_answer)."""
    from advisor.core.early_answer import ranked_line

    def show(outcome: Any) -> None:
        if outcome.recommendation is not None:
            typer.echo(ranked_line(outcome.recommendation, context.model_dump(), outcome.measurements), err=True)

    return show


class _ProgressLines:
    """The pipeline's progress events as stderr lines: one per step, and one per stage of each measured variant."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.last = ""

    def __call__(self, event: ProgressEvent) -> None:
        if event.backend is None:
            if event.step == "inspect" and event.phase != "done":
                typer.echo("inspecting the model ...", err=True)
            elif event.step == "measure":
                typer.echo(
                    f"measuring on {self.device} (one process per backend and mode; compiling takes a while) ...",
                    err=True,
                )
            return
        line = f"  {event.backend}:{event.mode} {event.phase}"
        if line != self.last:  # one line per stage, not per timed block
            self.last = line
            typer.echo(line, err=True)


def _context(context_file: Path | None, flags: dict[str, Any]) -> Any:
    """The context file's fields, overridden by the flags that were given; invalid -> field-by-field errors."""
    from advisor.core.context import ContextError, parse_context

    data: dict[str, Any] = {}
    if context_file is not None:
        try:
            data = json.loads(context_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            _fail(f"cannot read the context file {context_file}: {exc}")
    if isinstance(data, dict):
        data.update({_FLAG_FIELDS[flag]: value for flag, value in flags.items() if value is not None})
    try:
        return parse_context(data)
    except ContextError as exc:
        lines = "\n".join(f"  {e['field'] or 'context'}: {e['message']}" for e in exc.errors)
        _fail(f"invalid deployment context:\n{lines}")


def read_traffic(path: Path | None) -> list[dict[str, Any]] | None:
    """The --shape-traffic file aggregated (advisor.core.shape_traffic); a bad file fails here, nothing submitted."""
    if path is None:
        return None
    from advisor.core.shape_traffic import MAX_TRAFFIC_BYTES, TrafficError, parse_traffic_text

    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_TRAFFIC_BYTES + 1)
        return parse_traffic_text(data)
    except OSError as exc:
        return _fail(f"cannot read the shape traffic {path}: {exc.strerror or exc}")
    except TrafficError as exc:
        return _fail(f"--shape-traffic {path}: {exc}")


def _analyze_on_server(**remote: Any) -> int:
    """Hand the analysis to a team server: the keyword arguments of `advisor.cli.remote.analyze_remote`."""
    try:
        from advisor.cli.remote import analyze_remote
    except ImportError:
        _fail("server mode is not installed in this copy of npu-advisor; use --local")
    return analyze_remote(**remote)


def _split(values: list[str] | None) -> list[str] | None:
    """--backends a,b --backends c -> [a, b, c]; None when not given (measure every backend)."""
    if not values:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _fail(message: str, code: int = EXIT_USAGE) -> Any:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)
