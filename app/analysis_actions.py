"""Acting on an analysis that exists: who may (ownership, decided once), cancelling it, deciding again on its results.

The API's routes and the dashboard's form posts call these instead of each other, so a dashboard cancel checks the
owner once and the route handlers hold no business logic. `ActionRefused.code` (app.service_errors) gives the HTTP
status they answer with (as `app.analyses.RerunRefused`'s).
"""

from __future__ import annotations

from sqlmodel import Session

from app.analyses import job_of
from app.auth import Principal
from app.deps import is_owner_or_admin
from app.job_queue import JobQueue
from app.models import Analysis, Job, JobStatus
from app.outcomes import DecisionFailed, decide_recommendation, store_recommendation
from app.service_errors import ErrorCode, ServiceError


class ActionRefused(ServiceError):
    """The action cannot be done; its `code` (app.service_errors) gives the HTTP status the API answers with."""

    code = ErrorCode.CONFLICT  # unless given: NOT_FOUND, FORBIDDEN


def existing_analysis(session: Session, analysis_id: int) -> Analysis:
    """The analysis, or 404."""
    analysis = session.get(Analysis, analysis_id)
    if analysis is None:
        raise ActionRefused(f"analysis {analysis_id} does not exist", ErrorCode.NOT_FOUND)
    return analysis


def owned_analysis(session: Session, principal: Principal, analysis_id: int, action: str) -> Analysis:
    """The analysis if `principal` may `action` it: admins (and the anonymous admin of an open server) any, a user
    only what it submitted (its token's name is the analysis' `submitted_by`). 404 first, then 403."""
    analysis = existing_analysis(session, analysis_id)
    if not is_owner_or_admin(principal, str(analysis.submitted_by)):
        raise ActionRefused(
            f"only the submitter ({analysis.submitted_by}) or an admin can {action} analysis {analysis.id}; you are "
            f"signed in as {principal.name} ({principal.role})",
            ErrorCode.FORBIDDEN,
        )
    return analysis


def cancel_analysis(session: Session, queue: JobQueue, analysis: Analysis) -> Job:
    """Cancel its job: a queued one at once, a running one at its worker's next heartbeat. 409 without a job."""
    job = job_of(session, int(analysis.id))
    if job is None:
        raise ActionRefused(f"analysis {analysis.id} has no job to cancel")
    queue.cancel(session, job_id=job.id)
    return job


def redecide_analysis(session: Session, queue: JobQueue, analysis: Analysis) -> None:
    """Run the decision engine again on the stored inspection and measurements and store its recommendation (the
    engine may have changed since). 409 before any result, while its job is measuring (its completion decides;
    the results it stores are replaced then), when the results changed while deciding, or when the engine fails
    (the message says why)."""
    if analysis.inspection is None and analysis.measurements is None:
        raise ActionRefused(f"analysis {analysis.id} has no results yet; wait until it is done")
    job = job_of(session, int(analysis.id))
    if job is not None and job.status == JobStatus.RUNNING:
        raise ActionRefused(f"analysis {analysis.id} is being measured; re-decide once it is done")
    decided_on = (analysis.inspection, analysis.measurements)
    try:
        recommendation = decide_recommendation(
            analysis.context, analysis.inspection, analysis.measurements, source_report=analysis.source_report
        )
    except DecisionFailed as exc:
        raise ActionRefused(str(exc)) from None
    session.refresh(analysis, with_for_update=True)  # deciding took a while: store only over the same results
    if (analysis.inspection, analysis.measurements) != decided_on:
        session.rollback()
        raise ActionRefused(f"analysis {analysis.id} got new results while it was re-decided; re-decide again")
    store_recommendation(analysis, recommendation, queue.clock())
    session.add(analysis)
    session.commit()
