"""`npu-advisor analyze MODEL --server URL`: submit to a team server, follow it live, print the report.

The report is rendered locally with `advisor.core.report.render` from the stored analysis, so it reads
exactly like `--local`. Progress (queue position, then the worker's stage) goes to stderr; the
report alone goes to stdout. A target no worker can measure (e.g. npu before an NPU worker joins) gets its
unmeasured recommendation from another worker's inspection: that report is printed, and the measurement
stays queued on the server. A ranking the worker posts before the recommended option's details gets its answer line
on stderr at once (advisor.core.early_answer); the report follows when the job completes. A busy server's 429 / 503
is waited out after its Retry-After (a line on stderr says so) a bounded number of times (`advisor.cli.client`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from advisor.cli.client import AdvisorClient, AdvisorError
from advisor.core.status import AnalysisStatus

EXIT_OK = 0
EXIT_ANALYSIS_FAILED = 1
EXIT_USAGE = 2
REPORT_FIELDS = ("model_name", "context", "inspection", "measurements", "recommendation")


def analyze_remote(
    *,
    model: Path,
    context: dict,
    server: str,
    token: str | None,
    wait: bool,
    fmt: str,
    inputs: Path | None = None,
    model_name: str | None = None,
    force: bool = False,
    backends: list[str] | None = None,
    tag: str | None = None,
    out: Path | None = None,
    source_report: dict[str, Any] | None = None,
    calibration: Path | None = None,
) -> int:
    """Submit and (with `wait`) follow one analysis; returns the exit code (0 done, or its unmeasured report while no
    worker can measure it; 1 failed/cancelled; 2 error).

    `backends`: what the job measures (None: the server's choice); `out`: write the report there, not stdout;
    `source_report`: the source-side report of `analyze FILE.py:factory`, uploaded with the model and stored there;
    `calibration`: the int8 options' calibration .npz, uploaded with the model (checked by the server, and against the
    model's inputs by its worker)."""
    err = Console(stderr=True)

    def busy(line: str) -> None:
        err.print(f"[yellow]{line}[/yellow]", highlight=False)

    with AdvisorClient(server, token, on_busy=busy) as client:
        try:
            submitted = client.submit(
                model,
                context,
                inputs=inputs,
                model_name=model_name,
                force=force,
                backends=backends,
                tag=tag,
                source_report=source_report,
                calibration=calibration,
            )
        except AdvisorError as exc:
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            return EXIT_USAGE
        analysis_id = submitted["id"]
        note = " (identical to an earlier submission: reusing its result; --force re-measures)"
        err.print(f"analysis {analysis_id}: {submitted.get('status')}{note if submitted.get('deduplicated') else ''}")
        if not wait:
            links = submitted.get("links", {})
            link = links.get("self") or f"/api/v1/analyses/{analysis_id}"  # the server's own links are absolute
            err.print(f"follow it: {link if '://' in link else server.rstrip('/') + link}")
            print(analysis_id)
            return EXIT_OK
        try:
            analysis = _follow(client, analysis_id, err)
        except AdvisorError as exc:
            err.print(f"[red]error:[/red] {exc}", highlight=False)
            return EXIT_USAGE
        except KeyboardInterrupt:
            err.print(f"stopped waiting; the analysis goes on: npu-advisor analyze --server {server} ... or the web UI")
            return 130
    return _print_outcome(analysis, fmt, err, out)


def describe_progress(analysis: dict[str, Any]) -> str:
    """One line for the progress bar: where the analysis is now."""
    status = analysis.get("status")
    if status == AnalysisStatus.QUEUED:
        position = analysis.get("queue_position")
        return f"queued (position {position})" if position else "queued"
    if status == AnalysisStatus.RUNNING:
        return f"running: {analysis.get('stage') or 'starting'}"
    return str(status)


def _follow(client: AdvisorClient, analysis_id: Any, err: Console) -> dict[str, Any]:
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"))
    with Progress(*columns, TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task("submitted", total=1.0)

        said: set[str] = set()

        def update(analysis: dict[str, Any]) -> None:
            note = analysis.get("waiting_for_worker")
            if note and note not in said:  # e.g. target npu and no NPU worker yet: say so once, keep waiting
                said.add(note)
                bar.console.print(f"[yellow]{note}[/yellow]", highlight=False)
            if (ranked := early_answer(analysis)) is not None and ranked not in said:
                said.add(ranked)
                bar.console.print(ranked, highlight=False, markup=False, soft_wrap=True)  # one line, however wide
            bar.update(task, description=describe_progress(analysis), completed=float(analysis.get("progress") or 0))

        return client.wait(analysis_id, on_update=update, until=unmeasured_meanwhile)


def early_answer(analysis: dict[str, Any]) -> str | None:
    """The answer line of an analysis whose job posted its ranking and is measuring the recommended option's
    details (advisor.core.early_answer); None otherwise."""
    from advisor.core.early_answer import pending_details, ranked_line

    recommendation, run = analysis.get("recommendation"), analysis.get("measurements")
    if analysis.get("status") != AnalysisStatus.RUNNING or not recommendation or not pending_details(run):
        return None
    return ranked_line(recommendation, analysis.get("context") or {}, run)


def unmeasured_meanwhile(analysis: dict[str, Any]) -> bool:
    """No worker can measure it yet, and the server has its unmeasured recommendation (app.job_queue's inspect job)."""
    return bool(
        analysis.get("status") == AnalysisStatus.QUEUED
        and analysis.get("waiting_for_worker")
        and analysis.get("recommendation")
        and not analysis.get("measurements")
    )


def _print_outcome(analysis: dict[str, Any], fmt: str, err: Console, out: Path | None = None) -> int:
    status = analysis.get("status")
    if unmeasured_meanwhile(analysis):  # its note (waiting_for_worker) was printed while following it
        err.print(f"analysis {analysis.get('id')}: the measurement stays queued; the web UI shows it when it is done")
    elif status != AnalysisStatus.DONE:
        reason = analysis.get("error") or "no reason recorded"
        err.print(f"[red]analysis {analysis.get('id')} {status}:[/red] {reason}", highlight=False)
        return EXIT_ANALYSIS_FAILED
    from advisor.core.report import render
    from advisor.core.source_report import with_source_report

    fields = {key: analysis.get(key) for key in REPORT_FIELDS}
    fields["inspection"] = with_source_report(fields["inspection"], analysis.get("source_report"))  # as the server's
    report = render(fields, fmt).rstrip("\n") + "\n"
    if out is None:
        sys.stdout.write(report)
    else:
        out.write_text(report)
        err.print(f"report written to {out}", highlight=False, soft_wrap=True)
    return EXIT_OK
