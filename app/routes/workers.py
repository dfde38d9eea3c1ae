"""The worker side of the queue protocol: register, claim (long-poll), deregister; and the worker list.

A worker token claims and deregisters only for the workers it registered (an admin for any): 403 otherwise.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from sqlalchemy import select
from sqlmodel import Session

from advisor.core.job_wire import ClaimedJob
from app.deps import QueueDep, SessionDep, SettingsDep, UserDep, WorkerDep, actor_of
from app.dispatch_demand import dispatch_demand
from app.job_queue import Actor, JobClaim
from app.models import Analysis, Job, JobStatus, Worker, WorkerCreate, WorkerPublic

router = APIRouter(tags=["workers"])


class WorkerRegistered(BaseModel):
    worker_id: str
    heartbeat_interval_s: float
    lease_ttl_s: float
    poll_timeout_s: float


class ClaimResponse(BaseModel):
    job: ClaimedJob
    lease_token: str
    lease_expires_at: datetime


@router.post("/workers/register", response_model=WorkerRegistered, summary="Register a worker process")
def register(body: WorkerCreate, session: SessionDep, queue: QueueDep, settings: SettingsDep, who: WorkerDep):
    worker = queue.register_worker(
        session,
        name=body.name,
        device_kind=body.device_kind,
        backends=body.backends,
        environment=body.environment,
        token_id=who.token_id,
    )
    return WorkerRegistered(
        worker_id=worker.id,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        lease_ttl_s=settings.lease_ttl_s,
        poll_timeout_s=settings.poll_timeout_s,
    )


@router.post(
    "/workers/{worker_id}/claim",
    response_model=ClaimResponse,
    responses={
        204: {"description": "no job within the wait"},
        403: {"description": "the worker was registered with another token"},
        404: {"description": "unknown worker: register"},
    },
    summary="Lease the next job this worker can run (long-poll up to `wait` seconds)",
)
async def claim(
    worker_id: str,
    request: Request,
    queue: QueueDep,
    settings: SettingsDep,
    who: WorkerDep,
    wait: Annotated[float, Query(ge=0)] = 0,
):
    """Short claim attempts in their own transactions, with sleeps between them: no transaction is held open."""
    deadline = time.monotonic() + min(wait, settings.poll_timeout_s)
    engine, actor = request.app.state.engine, actor_of(who)
    while True:
        response = await run_in_threadpool(
            _try_claim, engine, queue, worker_id, actor, str(request.base_url), request.app.state.store, settings
        )
        if response is not None:
            return response
        remaining = deadline - time.monotonic()
        if remaining <= 0 or await request.is_disconnected():
            return Response(status_code=204)
        await asyncio.sleep(min(settings.claim_poll_interval_s, remaining))


def _try_claim(engine, queue, worker_id: str, actor: Actor, base_url: str, store, settings) -> ClaimResponse | None:  # noqa: ANN001
    with Session(engine, expire_on_commit=False) as session:
        lease: JobClaim | None = queue.claim(session, worker_id=worker_id, actor=actor)
        if lease is None:
            return None
        analysis = session.get(Analysis, lease.job.analysis_id)
        api = base_url.rstrip("/") + "/api/v1"
        ttl = settings.artifact_url_ttl_s
        artifact_url = (
            store.download_url(analysis.artifact_sha256, ttl) or f"{api}/artifacts/{analysis.artifact_sha256}"
        )
        inputs_url = None
        if analysis.inputs_sha256:
            inputs_url = store.download_url(analysis.inputs_sha256, ttl) or f"{api}/analyses/{analysis.id}/inputs"
        calibration_url = None
        if analysis.calibration_sha256:  # GET /artifacts/{sha256}: allowed while the worker holds the job's lease
            calibration_url = (
                store.download_url(analysis.calibration_sha256, ttl) or f"{api}/artifacts/{analysis.calibration_sha256}"
            )
        return ClaimResponse(
            job=ClaimedJob(
                id=lease.job.id,
                analysis_id=analysis.id,
                attempt=lease.job.attempts,
                artifact_sha256=analysis.artifact_sha256,
                artifact_url=artifact_url,
                inputs_url=inputs_url,
                inputs_sha256=analysis.inputs_sha256,
                calibration_url=calibration_url,
                calibration_sha256=analysis.calibration_sha256,
                context=analysis.context,
                backends=lease.job.backends,
                purpose=lease.job.purpose,
            ),
            lease_token=lease.lease_token,
            lease_expires_at=lease.lease_expires_at,
        )


class WorkerDemand(BaseModel):
    waiting: list[int]  # measure jobs such a worker could claim now, next first
    unserved: list[int]  # those of them no live idle worker will claim: start a worker for each
    idle_workers: int


BACKEND_LIST = r"^[a-z0-9_]{1,32}(,[a-z0-9_]{1,32}){0,31}$"  # e.g. eager,inductor: at most 32 names


@router.get(
    "/workers/demand",
    response_model=WorkerDemand,
    summary="Queued jobs a worker of this device kind and backends could run and no live worker will claim",
)
def demand(
    session: SessionDep,
    queue: QueueDep,
    settings: SettingsDep,
    _: WorkerDep,
    device_kind: Literal["cpu", "cuda", "npu"],
    backends: Annotated[str, Query(max_length=1100, pattern=BACKEND_LIST)],
) -> WorkerDemand:
    """For a dispatcher that starts workers on demand (`npu-advisor dispatch`; app.dispatch_demand)."""
    found = dispatch_demand(
        session,
        device_kind=device_kind,
        backends=set(backends.split(",")),
        now=queue.clock(),
        lost_after_s=settings.worker_lost_after_s,
    )
    return WorkerDemand(waiting=found.waiting, unserved=found.unserved, idle_workers=found.idle_workers)


@router.post(
    "/workers/{worker_id}/deregister",
    responses={403: {"description": "the worker was registered with another token"}},
    summary="Leave gracefully: held jobs go back to the queue",
)
def deregister(worker_id: str, session: SessionDep, queue: QueueDep, who: WorkerDep) -> dict:
    """`released_jobs` go back to the queue without spending an attempt; `dead_lettered_jobs` had been released
    `max_releases` times already and are now `failed`, with that reason."""
    report = queue.deregister_worker(session, worker_id=worker_id, actor=actor_of(who))
    return {"worker_id": worker_id, "released_jobs": report.released, "dead_lettered_jobs": report.dead_lettered}


@router.get("/workers", response_model=list[WorkerPublic], summary="Registered workers and what they run")
def list_workers(session: SessionDep, _: UserDep) -> list[WorkerPublic]:
    workers = session.scalars(select(Worker).order_by(Worker.last_seen_at.desc())).all()
    running = dict(session.execute(select(Job.worker_id, Job.id).where(Job.status == JobStatus.RUNNING)).all())
    return [WorkerPublic(**worker.model_dump(), current_job_id=running.get(worker.id)) for worker in workers]
