"""Job calls of the worker protocol, fenced by the `X-Lease-Token` header (409 when the lease is lost)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Header, Request
from pydantic import BaseModel, Field

from app.analyses import ANALYSIS_STATUS, DecisionFailed, decide_recommendation, outcome_recorder
from app.deps import QueueDep, SessionDep, WorkerDep
from app.models import Analysis, Job
from app.queue import JobNotFound, LeaseLost

router = APIRouter(tags=["jobs"])
LeaseToken = Annotated[str, Header(alias="X-Lease-Token", description="the lease_token from the claim")]
LEASE_RESPONSES = {404: {"description": "no such job"}, 409: {"description": "the lease is lost: stop, do not upload"}}


class HeartbeatBody(BaseModel):
    stage: str | None = Field(default=None, max_length=120, examples=["measure:inductor:default"])
    progress: float | None = Field(default=None, ge=0, le=1)


class HeartbeatResponse(BaseModel):
    lease_expires_at: datetime
    cancel_requested: bool


class CompleteBody(BaseModel):
    inspection: dict | None = None  # advisor.schema.Inspection
    measurements: dict | None = None  # advisor.schema.MeasurementRun


class CompleteResponse(BaseModel):
    analysis_id: int
    status: str


class FailBody(BaseModel):
    error: str = Field(min_length=1, max_length=20_000)
    retryable: bool = False


@router.post("/jobs/{job_id}/heartbeat", response_model=HeartbeatResponse, responses=LEASE_RESPONSES)
def heartbeat(job_id: int, body: HeartbeatBody, token: LeaseToken, session: SessionDep, queue: QueueDep, _: WorkerDep):
    beat = queue.heartbeat(session, job_id=job_id, lease_token=token, stage=body.stage, progress=body.progress)
    return HeartbeatResponse(lease_expires_at=beat.lease_expires_at, cancel_requested=beat.cancel_requested)


@router.post("/jobs/{job_id}/complete", response_model=CompleteResponse, responses=LEASE_RESPONSES)
def complete(
    job_id: int,
    body: CompleteBody,
    token: LeaseToken,
    request: Request,
    session: SessionDep,
    queue: QueueDep,
    _: WorkerDep,
):
    """Store the results and the engine's recommendation. Idempotent for the same lease token."""
    job = session.get(Job, job_id)
    if job is None:
        raise JobNotFound(f"job {job_id} does not exist")
    if job.status == "running" and job.lease_token != token:
        raise LeaseLost(f"job {job_id}: this lease is no longer valid (the job was re-claimed); stop working on it")
    analysis = session.get(Analysis, job.analysis_id)
    try:
        recommendation = decide_recommendation(analysis.context, body.inspection, body.measurements)
    except DecisionFailed as exc:
        failed = queue.fail(session, job_id=job_id, lease_token=token, error=str(exc), retryable=False)
        return CompleteResponse(analysis_id=failed.analysis_id, status=ANALYSIS_STATUS[failed.status])
    record = outcome_recorder(analysis.id, body.inspection, body.measurements, recommendation, queue.clock())
    done, newly = queue.complete(session, job_id=job_id, lease_token=token, record_outcome=record)
    if newly and done.started_at is not None:
        request.app.state.metrics.job_duration.labels("succeeded").observe(
            (done.finished_at - done.started_at).total_seconds()
        )
    return CompleteResponse(analysis_id=done.analysis_id, status=ANALYSIS_STATUS[done.status])


@router.post("/jobs/{job_id}/fail", responses=LEASE_RESPONSES)
def fail(
    job_id: int, body: FailBody, token: LeaseToken, request: Request, session: SessionDep, queue: QueueDep, _: WorkerDep
) -> dict:
    """Report a failed attempt; `next` says whether the job will be retried (`queued`) or is dead (`failed`)."""
    job = queue.fail(session, job_id=job_id, lease_token=token, error=body.error, retryable=body.retryable)
    if job.status != "queued" and job.started_at is not None and job.finished_at is not None:
        request.app.state.metrics.job_duration.labels(job.status).observe(
            (job.finished_at - job.started_at).total_seconds()
        )
    return {"next": job.status}  # queued (retry after a backoff) | failed (dead letter) | cancelled


@router.post("/jobs/{job_id}/cancelled", responses=LEASE_RESPONSES)
def cancelled(job_id: int, token: LeaseToken, session: SessionDep, queue: QueueDep, _: WorkerDep) -> dict:
    """The worker stopped the job after seeing `cancel_requested`."""
    job = queue.acknowledge_cancel(session, job_id=job_id, lease_token=token)
    return {"analysis_id": job.analysis_id, "status": ANALYSIS_STATUS[job.status]}
