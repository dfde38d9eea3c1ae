"""The queue's one order: which job a worker is given first. Highest `priority` first (an inspection, which takes
seconds, goes before the measurements queued on the same workers), then the oldest (`id`).

Written here once and read by the places that need it: the claim's `ORDER BY` (app.job_queue), a job's position
(`JobQueue.queue_position`), a list page's positions in one query (app.analyses.queue_positions) and a dispatcher's
demand (app.dispatch_demand), so a position shown is always the order a worker claims in. `claimable` is the one
definition of which jobs a claim may take at all."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, or_

from app.models import JobStatus


@dataclass(frozen=True)
class _Key:
    column: str
    descending: bool


QUEUE_ORDER = (_Key("priority", descending=True), _Key("id", descending=False))


def claim_order(jobs: Any) -> list[ColumnElement]:
    """The ORDER BY of `jobs` (the Job entity or an alias of it) that puts the next job to claim first."""
    return [
        getattr(jobs, key.column).desc() if key.descending else getattr(jobs, key.column).asc() for key in QUEUE_ORDER
    ]


def goes_before(first: Any, second: Any) -> ColumnElement[bool]:
    """`first` (the Job entity or an alias) is claimed before `second` (another alias, or a Job row's values): the
    claim order as a condition, key by key (the first key that differs decides)."""
    earlier_keys_equal: list[ColumnElement[bool]] = []
    decided_here: list[ColumnElement[bool]] = []
    for key in QUEUE_ORDER:
        mine, theirs = getattr(first, key.column), getattr(second, key.column)
        decided_here.append(and_(*earlier_keys_equal, mine > theirs if key.descending else mine < theirs))
        earlier_keys_equal.append(mine == theirs)
    return or_(*decided_here)


def claimable(jobs: Any, now: Any) -> ColumnElement[bool]:
    """`jobs` (the Job entity or an alias) a claim may take at `now` (a datetime or a bound parameter): queued and
    due, or running with an expired lease, attempts left and no cancel asked for."""
    return or_(
        and_(jobs.status == JobStatus.QUEUED, jobs.available_at <= now),
        and_(
            jobs.status == JobStatus.RUNNING,
            jobs.lease_expires_at < now,
            jobs.attempts < jobs.max_attempts,
            jobs.cancel_requested.is_(False),
        ),
    )
