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
from typing import Any

import typer

from advisor.cli import analyze_options as opt
from advisor.cli import model_options as model_opt
from advisor.cli.token_file import read_token
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


def analyze(
    model: opt.Model,
    local: opt.Local = True,
    server: opt.Server = None,
    token_file: opt.TokenFile = None,
    wait: opt.Wait = True,
    force: opt.Force = False,
    tag: opt.Tag = None,
    context_file: opt.ContextFile = None,
    stage: opt.StageFlag = None,
    model_changes: opt.ModelChangesFlag = None,
    workload: opt.WorkloadFlag = None,
    optimizer: opt.OptimizerFlag = None,
    target: opt.TargetFlag = None,
    fleet: opt.FleetFlag = None,
    expected_calls: opt.ExpectedCalls = None,
    latency_target_ms: opt.LatencyTarget = None,
    memory_budget_mb: opt.MemoryBudget = None,
    offline_export: opt.OfflineExport = None,
    resource_constrained: opt.ResourceConstrained = None,
    ships_cache: opt.ShipsCache = None,
    shape_traffic: opt.ShapeTraffic = None,
    max_graphs: opt.MaxGraphs = None,
    backends: opt.Backends = None,
    device: opt.Device = None,
    skip_measure: opt.SkipMeasure = False,
    inputs: model_opt.Inputs = None,
    calibration: opt.Calibration = None,
    input_shape: model_opt.InputShape = None,
    fmt: opt.Format = "text",
    out: opt.Out = None,
    export_to: opt.ExportTo = None,
    strict_export: model_opt.StrictExport = False,
) -> None:
    """Recommend Inductor or TorchAir (or another backend) for MODEL in your deployment, by measuring."""
    parameters = locals()  # the context flags, by the names _FLAG_FIELDS maps to context fields
    flags = {flag: parameters[flag] for flag in _FLAG_FIELDS} | {"shape_traffic": read_traffic(shape_traffic)}
    if fmt not in FORMATS:
        _fail(f"unknown --format {fmt!r}; choose one of {', '.join(FORMATS)}")
    from advisor.cli.source_front import is_source_spec, upload_ready

    source = is_source_spec(model)
    _check_model_arguments(model, source, inputs, input_shape, export_to, strict_export)
    context = _context(context_file, flags)
    _check_calibration(calibration)  # here too with --server: a refused file is not uploaded
    if server:
        _refuse_local_only(device, skip_measure, input_shape)
        token = read_token(token_file)
    else:
        _refuse_server_only(force, tag, local)
    model, source_report = _exported(model, source, context, export_to, strict_export)
    if server:
        code = _analyze_on_server(
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
            source_report=upload_ready(source_report) if source else None,
            calibration=calibration,
        )
        raise typer.Exit(code)
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
    _write_report(_rendered(analysis, source_report, fmt), out)


def _exported(
    model: Path, source: bool, context: Any, export_to: Path | None, strict_export: bool
) -> tuple[Path, dict | None]:
    """For file.py:factory: the ExportedProgram written here and the source-side report (a server measures the file
    and stores the report with it); for a model file: the file as it is, and no report."""
    if not source:
        return model, None
    from advisor.cli.source_front import export_for_analysis

    return export_for_analysis(str(model), context, export_to, strict_export=strict_export)


def _rendered(analysis: Any, source_report: dict | None, fmt: str) -> str:
    """The report in `fmt`; for file.py:factory, decided with what the source-side checks found too."""
    from advisor.cli.source_front import decide_with_source
    from advisor.core.report import render

    if source_report is not None:
        analysis = decide_with_source(analysis, source_report)
    return render(analysis, fmt)  # type: ignore[arg-type]


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
