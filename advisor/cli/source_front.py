"""`npu-advisor inspect|analyze path/to/file.py:factory` (or `package.module:factory`): start from the user's code.

The factory runs in a child process of its own (advisor.harness.source_probe through advisor.harness.sandbox's
`run_in_sandbox`, unconfined: it is the user's own code on the user's own machine), so a factory that raises,
hangs or crashes is reported in one line, never a traceback of this process. The child reports graph breaks,
recompiles and torch.export's outcome (advisor.core.source_report) and, when an export succeeded and a path was
given, writes the ExportedProgram there (completely or not at all). `analyze --local` then runs the usual analysis
on that file and decides with the source-side report (advisor.core.decision.source_rules); `analyze --server` uploads
the file with the report (`upload_ready`), and the server stores it, shows it and decides with it. Torch-free.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import uuid
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from advisor.core.source_report import SOURCE_LABEL, SourceReport, parse_source_report, report_lines

SOURCE_TIMEOUT_S = 600.0
PROBE_TARGET = "advisor.harness.source_probe:probe_source"  # the child that runs the factory
_SPEC = re.compile(r"^(?:(?P<file>.+\.py)|(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)):(?P<factory>[A-Za-z_]\w*)$")
# what run_in_sandbox sets for every child; the user's environment must not override it
_SANDBOX_KEYS = {"PYTHONPATH", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "ADVISOR_COMPILE_CACHE_DIR"}


def factory_environment() -> dict[str, str]:
    """The environment the factory's child runs with: the user's, less anything that looks like a secret and what
    run_in_sandbox sets for every child."""
    from advisor.harness.sandbox import scrubbed_environment

    return {k: v for k, v in scrubbed_environment(allow_list=False).items() if k not in _SANDBOX_KEYS}


def is_source_spec(model: Path | str) -> bool:
    """`file.py:factory` or `package.module:factory`, and not the name of an existing file."""
    text = str(model)
    return _SPEC.match(text) is not None and not os.path.isfile(text)


def default_export_path(spec: str) -> Path:
    """`<file or module>-<factory>.pt2` in the current directory."""
    found = _SPEC.match(spec)
    assert found is not None
    stem = Path(found["file"]).stem if found["file"] else found["module"].rsplit(".", 1)[-1]
    return Path(f"{stem}-{found['factory']}.pt2")


def probe(
    spec: str,
    *,
    sweep: dict[str, Any] | None = None,
    export_to: Path | None = None,
    timeout_s: float | None = None,
    memory_limit_mb: int | None = None,
    strict_export: bool = False,
) -> dict[str, Any]:
    """The source-side report of the factory's model, from a child process; exits (1, or 2 for a spec that does not
    name a loadable factory) with one line when the child fails, hangs or crashes. `strict_export`: torch.export
    strict as well where non-strict exported it (otherwise strict only where non-strict failed)."""
    from advisor.harness.isolation import NO_ISOLATION
    from advisor.harness.sandbox import run_in_sandbox

    if export_to is not None and not export_to.parent.resolve().is_dir():
        fail(f"cannot write {export_to}: {export_to.parent} is not a directory", 2)
    target = str(export_to.resolve()) if export_to else None
    tag = f"npu-advisor-{uuid.uuid4().hex[:12]}"
    try:
        done = run_in_sandbox(
            PROBE_TARGET,
            {"spec": spec, "sweep": sweep, "export_to": target, "temp_tag": tag, "strict_export": strict_export},
            timeout_s=timeout_s or SOURCE_TIMEOUT_S,
            memory_limit_mb=memory_limit_mb,
            stage="your model code",
            extra_env=factory_environment(),
            isolation=NO_ISOLATION,  # the user's own code on the user's own machine: their trust
        )
    finally:
        if target is not None:
            remove_leftovers(target, tag)
    if done.status != "ok":
        reason = done.reason or f"the source analysis failed ({done.status})"
        fail(reason, 2 if done.status == "load_error" else 1)
    try:
        return parse_source_report(done.value).model_dump(mode="json")
    except Exception as exc:  # noqa: BLE001 - a child that returned something else is a failure, said in one line
        fail(f"the source analysis returned an invalid report: {str(exc).splitlines()[0]}", 1)
    raise AssertionError("unreachable")


def remove_leftovers(target: str, tag: str) -> None:
    """The temporary files of a save the child did not finish (killed, crashed, timed out): never a partial file."""
    from advisor.harness.source_probe import temporary_prefix

    prefix = temporary_prefix(target, tag)
    for leftover in glob.glob(glob.escape(prefix) + "*"):
        with contextlib.suppress(OSError):
            os.unlink(leftover)


def fail(message: str, code: int) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


# ---------------------------------------------------------------------------------------------- printing
def print_source_report(data: dict[str, Any], console: Console) -> None:
    """The readable form; every text from the user's code or torch is escaped (never read as markup)."""
    report = SourceReport.model_validate(data)
    console.print(
        f"[bold]Your code[/bold]: {escape(report.factory)} (torch {escape(report.torch_version or '?')}; "
        f"{SOURCE_LABEL})"
    )
    for line in report_lines(report):
        console.print(escape(line), highlight=False)


# ---------------------------------------------------------------------------------------------- the commands
def inspect_source(
    spec: str,
    *,
    as_json: bool,
    export_to: Path | None,
    timeout_s: float,
    memory_limit_mb: int | None,
    strict_export: bool = False,
    sweep: dict[str, Any] | None = None,
) -> None:
    """`npu-advisor inspect file.py:factory`: the source-side report (and the ExportedProgram with --export-to);
    `sweep`: the shapes to call it at (advisor.core.shape_sweep.sweep_spec, e.g. of --shape-traffic)."""
    import json

    report = probe(
        spec,
        sweep=sweep,
        export_to=export_to,
        timeout_s=timeout_s,
        memory_limit_mb=memory_limit_mb,
        strict_export=strict_export,
    )
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        print_source_report(report, Console())


def export_for_analysis(
    spec: str, context: Any, export_to: Path | None, *, strict_export: bool = False
) -> tuple[Path, dict[str, Any]]:
    """Probe the factory at the context's shapes and export it; the written file and the report. No exported
    program (every export failed, or saving it did): the report on stderr and exit 1."""
    from advisor.core.shape_sweep import sweep_spec

    path = export_to or default_export_path(spec)
    report = probe(spec, sweep=sweep_spec(context), export_to=path, strict_export=strict_export)
    print_source_report(report, Console(stderr=True))
    if not SourceReport.model_validate(report).export.written:
        fail("the model could not be exported, so there is no program to measure; fix the problems above", 1)
    return path, report


def upload_ready(report: dict[str, Any]) -> dict[str, Any]:
    """The report as `--server` uploads it (the API's `source_report` field, at most MAX_UPLOAD_BYTES of JSON): cut to
    fit when it is longer (advisor.core.source_report.fit_for_upload; a line on stderr says so)."""
    from advisor.core.source_report import MAX_UPLOAD_BYTES, fit_for_upload

    fitted = fit_for_upload(report)
    if fitted is not report:
        typer.echo(
            f"the source-side report is longer than the server takes ({MAX_UPLOAD_BYTES // 1024} KiB): the first "
            f"items of its lists are uploaded ({fitted['graph_breaks'].get('note') or 'see inspect for all'})",
            err=True,
        )
    typer.echo(f"the report above is uploaded with the program ({SOURCE_LABEL})", err=True)
    return fitted


def decide_with_source(analysis: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """The analysis re-decided with the source-side report in its inspection (advisor.core.decision.source_rules)."""
    from advisor.core.decision.engine import decide

    inspection = dict(analysis.get("inspection") or {})
    inspection["source_report"] = report
    analysis = {**analysis, "inspection": inspection}
    if analysis.get("recommendation") is not None:
        analysis["recommendation"] = dict(decide(analysis["context"], inspection, analysis.get("measurements")))
    return analysis
