"""The list items of `GET /api/v1/analyses` (app.models.AnalysisSummary): the columns, never the JSON bodies."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from app.analyses import ANALYSIS_STATUS, _last_change
from app.models import SUMMARY_ERROR_CHARS, Analysis, Job
from app.queue import JobQueue
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
    if positions is not None:
        position = positions.get(job.id) if job else None
    else:
        position = queue.queue_position(session, job) if job else None
    status = ANALYSIS_STATUS.get(job.status, job.status) if job else "failed"
    error = job.last_error if job and status == "failed" else None
    return {
        "id": analysis.id,
        "status": status,
        "stage": job.stage if job else None,
        "progress": job.progress if job else None,
        "model_name": analysis.model_name,
        "format": analysis.format,
        "target": analysis.target,
        "submitted_by": analysis.submitted_by,
        "created_at": analysis.created_at,
        "updated_at": _last_change(analysis, job),
        "recommended_backend": analysis.recommended_backend,
        "recommended_mode": analysis.recommended_mode,
        "speedup_vs_eager": analysis.speedup_vs_eager,
        "error": truncate_text(error, SUMMARY_ERROR_CHARS) if error else None,
        "queue_position": position,
    }
