"""The list items of `GET /api/v1/analyses` (app.models.AnalysisSummary): the columns, never the JSON bodies."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from advisor.core.status import AnalysisStatus
from app.analyses import analysis_core
from app.job_queue import JobQueue
from app.models import SUMMARY_ERROR_CHARS, Analysis, Job
from app.results import truncate_text


def analysis_summary(
    session: Session,
    queue: JobQueue,
    analysis: Analysis,
    job: Job | None,
    *,
    positions: dict[int, int] | None = None,
) -> dict[str, Any]:
    """One list item; reads only columns of `analysis` (its context/inspection/measurements/recommendation may be
    deferred) and of its job. `positions`: the page's queue positions (app.analyses.queue_positions), else one
    query here."""
    summary = analysis_core(session, queue, analysis, job, positions=positions)
    error = job.last_error if job and summary["status"] == AnalysisStatus.FAILED else None
    return summary | {
        "recommended_backend": analysis.recommended_backend,
        "recommended_mode": analysis.recommended_mode,
        "speedup_vs_eager": analysis.speedup_vs_eager,
        "error": truncate_text(error, SUMMARY_ERROR_CHARS) if error else None,
    }
