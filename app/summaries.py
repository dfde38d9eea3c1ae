"""The list items of `GET /api/v1/analyses` and the dashboard's list (app.models.AnalysisSummary): the columns,
never the JSON bodies."""

from __future__ import annotations

from sqlmodel import Session

from advisor.core.status import AnalysisStatus
from app.analyses import analysis_core, queue_positions
from app.analysis_list import ListedAnalysis
from app.job_queue import JobQueue
from app.models import SUMMARY_ERROR_CHARS, Analysis, AnalysisSummary, Job
from app.results import truncate_text


def analysis_summary(
    session: Session,
    queue: JobQueue,
    analysis: Analysis,
    job: Job | None,
    *,
    positions: dict[int, int] | None = None,
) -> AnalysisSummary:
    """One list item; reads only columns of `analysis` (its context/inspection/measurements/recommendation may be
    deferred) and of its job. `positions`: the page's queue positions (app.analyses.queue_positions), else one
    query here."""
    summary = analysis_core(session, queue, analysis, job, positions=positions)
    error = job.last_error if job and summary["status"] == AnalysisStatus.FAILED else None
    return AnalysisSummary(
        **summary,
        recommended_backend=analysis.recommended_backend,
        recommended_mode=analysis.recommended_mode,
        speedup_vs_eager=analysis.speedup_vs_eager,
        error=truncate_text(error, SUMMARY_ERROR_CHARS) if error else None,
    )


def page_summaries(session: Session, queue: JobQueue, rows: list[ListedAnalysis]) -> list[AnalysisSummary]:
    """The list items of one page of app.analysis_list rows (the API's and the dashboard's), with the page's queue
    positions read in one query."""
    positions = queue_positions(session, [row.job for row in rows])
    return [analysis_summary(session, queue, row.analysis, row.job, positions=positions) for row in rows]
