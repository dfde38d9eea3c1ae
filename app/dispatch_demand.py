"""Which queued measure jobs a batch-job dispatcher (`npu-advisor dispatch`) should start a worker for.

A dispatcher offers one kind of worker (a device kind and a set of backends) that it can start on demand, e.g. as a
Slurm batch job running `npu-advisor worker --once`. It asks, for that kind:

- `waiting`: the measure jobs a worker of that kind could claim now (queued and due, or running with an expired lease
  and attempts left: what `JobQueue.claim` takes), next first. A batch job the dispatcher started for a job no longer
  in this list (cancelled, taken, finished) is not needed any more.
- `unserved`: those of them no live idle worker will claim. Each idle live worker of the device kind (active, seen
  lately, holding no running job) is matched, in claim order, to the first job it could take; the jobs left over
  need a new worker. A worker counts as idle and live when it holds no running job and polled for work in the last
  IDLE_SEEN_WITHIN_S seconds. Inspect jobs (device kind "any") are never demand: any live worker takes them in seconds.

Reads only; the dispatcher decides what to submit and remembers what it submitted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlmodel import Session

from app.models import MEASURE, Job, JobRequirement, JobStatus, Worker
from app.queue_order import claim_order, claimable

# an idle worker polls for work every second or so while it waits: one silent longer than this (killed while idle,
# say) is not counted as about to claim, even before the reaper marks it lost
IDLE_SEEN_WITHIN_S = 15.0
DEMAND_LIMIT = 500  # jobs looked at per request: a dispatcher submits far fewer batch jobs than this at once


@dataclass(frozen=True)
class Demand:
    waiting: list[int] = field(default_factory=list)
    unserved: list[int] = field(default_factory=list)
    idle_workers: int = 0


def dispatch_demand(
    session: Session, *, device_kind: str, backends: set[str], now: datetime, lost_after_s: float
) -> Demand:
    """The demand for workers of `device_kind` offering `backends` (see the module docstring)."""
    jobs = _claimable_jobs(session, device_kind, now)
    needs = _requirements(session, jobs)
    seen_within = min(lost_after_s, IDLE_SEEN_WITHIN_S)
    idle = _idle_worker_offers(session, device_kind, now - timedelta(seconds=seen_within))
    idle_count = len(idle)
    waiting: list[int] = []
    unserved: list[int] = []
    for job_id in jobs:
        required = needs.get(job_id, set())
        taker = next((i for i, offered in enumerate(idle) if required <= offered), None)
        if taker is not None:
            idle.pop(taker)  # that worker claims this job (claims go in this order); the job is served
            if required <= backends:
                waiting.append(job_id)
            continue
        if required <= backends:
            waiting.append(job_id)
            unserved.append(job_id)
    return Demand(waiting=waiting, unserved=unserved, idle_workers=idle_count)


def _claimable_jobs(session: Session, device_kind: str, now: datetime) -> list[int]:
    """The ids of the measure jobs of `device_kind` a claim would take now, in claim order."""
    query = (
        select(Job.id)
        .where(claimable(Job, now), Job.device_kind == device_kind, Job.purpose == MEASURE)
        .order_by(*claim_order(Job))
        .limit(DEMAND_LIMIT)
    )
    return [int(job_id) for job_id in session.scalars(query)]


def _requirements(session: Session, job_ids: list[int]) -> dict[int, set[str]]:
    if not job_ids:
        return {}
    needs: dict[int, set[str]] = {}
    query = select(JobRequirement.job_id, JobRequirement.backend).where(JobRequirement.job_id.in_(job_ids))
    for job_id, backend in session.execute(query):
        needs.setdefault(int(job_id), set()).add(backend)
    return needs


def _idle_worker_offers(session: Session, device_kind: str, seen_since: datetime) -> list[set[str]]:
    """The backends of each live worker of `device_kind` that holds no running job (it will claim next)."""
    busy = select(Job.worker_id).where(Job.status == JobStatus.RUNNING, Job.worker_id.is_not(None))
    query = (
        select(Worker.backends)
        .where(
            Worker.device_kind == device_kind,
            Worker.state == "active",
            Worker.last_seen_at >= seen_since,
            Worker.id.not_in(busy),
        )
        .order_by(Worker.registered_at)
    )
    return [set(offered or ()) for offered in session.scalars(query)]
