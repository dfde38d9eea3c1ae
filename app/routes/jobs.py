"""Job calls of the worker protocol, fenced by the `X-Lease-Token` header (409 when the lease is lost)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Request
from pydantic import BaseModel, BeforeValidator, Field

from advisor.core.status import AnalysisStatus
from app.analyses import analysis_status, job_of
from app.deps import QueueDep, SessionDep, WorkerDep, actor_of
from app.job_queue import ResultsUpload
from app.models import MEASURE, Job, JobStatus
from app.results import ERROR_CHARS, truncate_text
from app.service_errors import ErrorCode, http_status

router = APIRouter(tags=["jobs"])
LeaseToken = Annotated[str, Header(alias="X-Lease-Token", description="the lease_token from the claim")]
LEASE_RESPONSES = {404: {"description": "no such job"}, 409: {"description": "the lease is lost: stop, do not upload"}}
STAGE_CHARS = 120  # app.models.Job.stage


def _truncated(limit: int, keep: str = "head"):  # noqa: ANN202
    """A validator that cuts free text to `limit` characters with a marker instead of refusing it."""
    return BeforeValidator(lambda value: truncate_text(value, limit, keep=keep) if isinstance(value, str) else value)


class HeartbeatBody(BaseModel):
    """The worker's latest progress: an advisor.core.progress.ProgressEvent as its `wire()` sends it (`stage` is
    the event's label, e.g. "measure:inductor:default"; `progress` the fraction of the whole job)."""

    stage: Annotated[str | None, _truncated(STAGE_CHARS)] = Field(
        default=None, max_length=STAGE_CHARS, examples=["measure:inductor:default"]
    )
    progress: float | None = Field(default=None, ge=0, le=1)


class HeartbeatResponse(BaseModel):
    lease_expires_at: datetime
    cancel_requested: bool


class CompleteBody(BaseModel):
    """Validated by the handler (app.results), so that a bad shape also fails the job with its reason."""

    inspection: Any = Field(
        default=None, json_schema_extra={"type": ["object", "null"]}, description="advisor.core.results.Inspection"
    )
    measurements: Any = Field(
        default=None, json_schema_extra={"type": ["object", "null"]}, description="advisor.core.results.MeasurementRun"
    )


class CompleteResponse(BaseModel):
    analysis_id: int
    status: AnalysisStatus  # still "queued" after an inspect job, whose measurement is still to come


class FailBody(BaseModel):
    # longer messages are cut in the middle, with a marker, not refused (the job must still fail)
    error: Annotated[str, _truncated(ERROR_CHARS, "both")] = Field(min_length=1, max_length=ERROR_CHARS)
    retryable: bool = False


@router.post("/jobs/{job_id}/heartbeat", response_model=HeartbeatResponse, responses=LEASE_RESPONSES)
def heartbeat(job_id: int, body: HeartbeatBody, token: LeaseToken, session: SessionDep, queue: QueueDep, _: WorkerDep):
    beat = queue.heartbeat(session, job_id=job_id, lease_token=token, stage=body.stage, progress=body.progress)
    return HeartbeatResponse(lease_expires_at=beat.lease_expires_at, cancel_requested=beat.cancel_requested)


COMPLETE_RESPONSES = {
    **LEASE_RESPONSES,
    403: {"description": "the job is leased to a worker that another token registered"},
    422: {
        "description": "the results were refused: not the documented shape (advisor.core.results), impossible "
        "numbers (a latency, speedup, compile time or memory that is not finite, not positive or inconsistent), or "
        "not the job's (the inspection's artifact_sha256 is not the job's artifact, a row's backend or mode was not "
        "asked for); one {field, message} per problem. Nothing changed: the job is still leased to this worker, "
        "which may fail it or complete it correctly"
    },
}


@router.post("/jobs/{job_id}/complete", response_model=CompleteResponse, responses=COMPLETE_RESPONSES)
def complete(
    job_id: int,
    body: CompleteBody,
    token: LeaseToken,
    request: Request,
    session: SessionDep,
    queue: QueueDep,
    who: WorkerDep,
):
    """Store the results and the engine's recommendation. Idempotent for the same lease token.

    Only for the job and lease this worker holds, with results that are the job's: the inspection names the job's
    artifact (`inspection.artifact_sha256`), the rows are backends the job asked for (eager always) in modes they
    have, with possible numbers (app.results). Anything else answers 422 naming the fields and changes nothing.
    The whole transition is the queue's (`JobQueue.complete_with_results`)."""
    outcome = queue.complete_with_results(session, _upload(job_id, body, token, who))
    job = outcome.job
    if outcome.problems is not None:
        raise HTTPException(http_status(ErrorCode.INVALID), detail=outcome.problems)
    if outcome.newly_completed and job.started_at is not None:
        request.app.state.metrics.job_duration.labels(JobStatus.SUCCEEDED).observe(
            (job.finished_at - job.started_at).total_seconds()
        )
    measured_by = job if job.purpose == MEASURE else job_of(session, job.analysis_id) or job
    return CompleteResponse(analysis_id=job.analysis_id, status=analysis_status(measured_by))


class RankedResponse(BaseModel):
    analysis_id: int


RANKED_RESPONSES = {
    **LEASE_RESPONSES,
    403: COMPLETE_RESPONSES[403],
    422: {
        "description": "the ranking was refused: the same checks as a completion, and an inspect job or results "
        "without measurements or that the engine cannot decide on; nothing changed, the job runs on"
    },
}


@router.post("/jobs/{job_id}/ranked", response_model=RankedResponse, responses=RANKED_RESPONSES)
def ranked(job_id: int, body: CompleteBody, token: LeaseToken, session: SessionDep, queue: QueueDep, who: WorkerDep):
    """The measure job's results once its options are ranked, before the recommended option's details (other input
    sizes, profile, warm-cache compile) are measured: the analysis shows the recommendation while the job runs on
    (the details do not change the pick); the completion replaces them. Optional for a worker; fenced and checked
    like a completion (`JobQueue.record_ranked`)."""
    outcome = queue.record_ranked(session, _upload(job_id, body, token, who))
    if outcome.problems is not None:
        raise HTTPException(http_status(ErrorCode.INVALID), detail=outcome.problems)
    return RankedResponse(analysis_id=outcome.job.analysis_id)


def _upload(job_id: int, body: CompleteBody, token: str, who: Any) -> ResultsUpload:
    """A worker's results (a completion or a ranking), as the queue takes them."""
    return ResultsUpload(job_id, token, body.inspection, body.measurements, actor_of(who))


@router.post("/jobs/{job_id}/fail", responses=LEASE_RESPONSES)
def fail(
    job_id: int, body: FailBody, token: LeaseToken, request: Request, session: SessionDep, queue: QueueDep, _: WorkerDep
) -> dict:
    """Report a failed attempt; `next` says whether the job will be retried (`queued`) or is dead (`failed`)."""
    job = queue.fail(session, job_id=job_id, lease_token=token, error=body.error, retryable=body.retryable)
    _observe(request, job)
    return {"next": job.status}  # queued (retry after a backoff) | failed (dead letter) | cancelled


@router.post("/jobs/{job_id}/cancelled", responses=LEASE_RESPONSES)
def cancelled(job_id: int, token: LeaseToken, session: SessionDep, queue: QueueDep, _: WorkerDep) -> dict:
    """The worker stopped the job after seeing `cancel_requested`."""
    job = queue.acknowledge_cancel(session, job_id=job_id, lease_token=token)
    return {"analysis_id": job.analysis_id, "status": JobStatus(job.status).analysis_status}


def _observe(request: Request, job: Job) -> None:
    """The duration of a job that has ended (not of an attempt that goes back to the queue)."""
    if job.status != JobStatus.QUEUED and job.started_at is not None and job.finished_at is not None:
        request.app.state.metrics.job_duration.labels(job.status).observe(
            (job.finished_at - job.started_at).total_seconds()
        )
