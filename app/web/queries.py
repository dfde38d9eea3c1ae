"""Read queries the dashboard pages need, written for tens of thousands of analyses.

The list page selects plain columns only (never the JSON blobs of inspection or measurements), filters
and sorts in SQL on indexed columns, and pages with LIMIT/OFFSET. An analysis' status is its job's
state (`succeeded` shows as `done`). The recommended backend, mode and speedup are the denormalised
columns `app.outcomes.store_recommendation` keeps on Analysis, so every sort is an index walk.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, case, func, intersect, or_, select
from sqlmodel import Session

from advisor.core.catalogue import option_label
from advisor.core.status import AnalysisStatus
from app.models import MEASURE, Analysis, Job, JobStatus, Worker

ANALYSIS_STATUSES = tuple(AnalysisStatus)
TARGETS = ("npu", "cuda", "cpu")
PER_PAGE_CHOICES = (25, 50, 100)
STOPPED_WORKERS_SHOWN_S = 24 * 3600  # deregistered workers stay on the queue page this long

# An analysis has exactly one measure job (app.analyses); its status is that job's, "failed" without one.
_job_join = and_(Job.analysis_id == Analysis.id, Job.purpose == MEASURE)
_status_expr = case(
    *((Job.status == s, s.analysis_status) for s in JobStatus if s.analysis_status != s),
    else_=func.coalesce(Job.status, AnalysisStatus.FAILED),
)
SORT_COLUMNS: dict[str, Any] = {
    "id": Analysis.id,
    "created": Analysis.created_at,
    "model": Analysis.model_name,
    "target": Analysis.target,
    "backend": Analysis.recommended_backend,
    "speedup": Analysis.speedup_vs_eager,
    "submitter": Analysis.submitted_by,
}


@dataclass
class AnalysisFilters:
    """The list page's query string, validated: unknown values fall back to the defaults."""

    model: str | None = None
    status: str | None = None
    target: str | None = None
    backend: str | None = None
    submitter: str | None = None
    sort: str = "created"
    order: str = "desc"
    page: int = 1
    per_page: int = 25

    @classmethod
    def from_query(cls, params: dict[str, str]) -> AnalysisFilters:
        def text(name: str) -> str | None:
            value = (params.get(name) or "").strip()
            return value[:200] or None

        def integer(name: str, default: int) -> int:
            try:
                return int(params.get(name) or default)
            except ValueError:
                return default

        per_page = integer("per_page", 25)
        return cls(
            model=text("model"),
            status=text("status") if params.get("status") in ANALYSIS_STATUSES else None,
            target=text("target"),
            backend=text("backend"),
            submitter=text("submitter"),
            sort=params.get("sort") if params.get("sort") in SORT_COLUMNS else "created",
            order="asc" if params.get("order") == "asc" else "desc",
            page=max(1, integer("page", 1)),
            per_page=per_page if per_page in PER_PAGE_CHOICES else 25,
        )

    @property
    def any(self) -> bool:
        return any((self.model, self.status, self.target, self.backend, self.submitter))

    def as_query(self, **changes: Any) -> dict[str, Any]:
        values = {
            "model": self.model,
            "status": self.status,
            "target": self.target,
            "backend": self.backend,
            "submitter": self.submitter,
            "sort": self.sort,
            "order": self.order,
            "page": self.page,
            "per_page": self.per_page,
        } | changes
        defaults = {"sort": "created", "order": "desc", "page": 1, "per_page": 25}
        return {k: v for k, v in values.items() if v not in (None, "") and defaults.get(k) != v}


@dataclass
class AnalysisListRow:
    id: int
    model_name: str
    format: str | None
    target: str
    context_stage: str | None
    status: str
    stage: str | None
    progress: float | None
    recommended: str | None
    speedup: float | None
    submitted_by: str
    created_at: datetime


@dataclass
class AnalysisPage:
    rows: list[AnalysisListRow]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.per_page))


def _matching_ids(filters: AnalysisFilters) -> list[Select]:
    """One id subquery per filter, each answerable from one index alone (no analysis row is read)."""
    ids: list[Select] = []
    if filters.model:
        escaped = filters.model.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        ids.append(select(Analysis.id).where(Analysis.model_name.ilike(f"%{escaped}%", escape="\\")))
    if filters.target:
        ids.append(select(Analysis.id).where(Analysis.target == filters.target))
    if filters.backend:
        ids.append(select(Analysis.id).where(Analysis.recommended_backend == filters.backend))
    if filters.submitter:
        ids.append(select(Analysis.id).where(Analysis.submitted_by == filters.submitter))
    if filters.status:
        status = JobStatus.of_analysis(filters.status)
        ids.append(select(Job.analysis_id).where(Job.status == status, Job.purpose == MEASURE))
    return ids


def _count(session: Session, ids: list[Select]) -> int:
    if not ids:
        query = select(func.count()).select_from(Analysis)
    elif len(ids) == 1:
        query = select(func.count()).select_from(ids[0].subquery())
    else:
        query = select(func.count()).select_from(intersect(*ids).subquery())
    return int(session.scalar(query) or 0)


def _page_ids(session: Session, filters: AnalysisFilters, ids: list[Select], page: int) -> list[int]:
    """The ids of one page. Analysis rows carry large JSON columns (SQLite keeps them in overflow pages, so
    reading any later column of a row is costly): filters and order use indexes only. `id + 0 IN (...)`
    stops SQLite from driving the query by rowid lookups; it walks the sort column's index in order
    instead, checks each id against the filter sets and stops after one page."""
    column = SORT_COLUMNS[filters.sort]
    direction = column.asc() if filters.order == "asc" else column.desc()
    tiebreak = Analysis.id.asc() if filters.order == "asc" else Analysis.id.desc()
    query = (
        select(Analysis.id)
        .where(*((Analysis.id + 0).in_(subquery) for subquery in ids))
        .order_by(direction.nulls_last() if filters.sort == "speedup" else direction, tiebreak)
        .limit(filters.per_page)
        .offset((page - 1) * filters.per_page)
    )
    return list(session.scalars(query))


def list_analyses(session: Session, filters: AnalysisFilters) -> AnalysisPage:
    """One page of analyses; the page number is clamped to the last page."""
    ids = _matching_ids(filters)
    total = _count(session, ids)
    page = min(filters.page, max(1, math.ceil(total / filters.per_page)))
    page_ids = _page_ids(session, filters, ids, page)
    if not page_ids:
        return AnalysisPage([], total, page, filters.per_page)
    query = (
        select(
            Analysis.id,
            Analysis.model_name,
            Analysis.format,
            Analysis.target,
            Analysis.context["stage"].as_string().label("context_stage"),
            _status_expr.label("status"),
            Job.stage,
            Job.progress,
            Analysis.recommended_backend,
            Analysis.recommended_mode,
            Analysis.speedup_vs_eager,
            Analysis.submitted_by,
            Analysis.created_at,
        )
        .outerjoin(Job, _job_join)
        .where(Analysis.id.in_(page_ids))
    )
    found = {
        r.id: AnalysisListRow(
            id=r.id,
            model_name=r.model_name,
            format=r.format,
            target=r.target,
            context_stage=r.context_stage,
            status=r.status,
            stage=r.stage if r.status in (AnalysisStatus.QUEUED, AnalysisStatus.RUNNING) else None,
            progress=r.progress,
            recommended=_label(r.recommended_backend, r.recommended_mode),
            speedup=r.speedup_vs_eager,
            submitted_by=r.submitted_by,
            created_at=r.created_at,
        )
        for r in session.execute(query)
    }
    return AnalysisPage([found[i] for i in page_ids if i in found], total, page, filters.per_page)


def _label(backend: str | None, mode: str | None) -> str | None:
    if not backend:
        return None
    return option_label(backend, mode, short=True)


def recommended_backends(session: Session) -> list[str]:
    """Distinct recommended backends, for the filter's options (an index-only scan)."""
    query = select(Analysis.recommended_backend).where(Analysis.recommended_backend.is_not(None)).distinct()
    return sorted(session.scalars(query))


def analysis_states(session: Session, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """{analysis id: {status, stage, progress}} for the live-progress poller."""
    ids = list(ids)[:200]
    if not ids:
        return {}
    query = (
        select(Analysis.id, _status_expr.label("status"), Job.stage, Job.progress)
        .outerjoin(Job, _job_join)
        .where(Analysis.id.in_(ids))
    )
    return {r.id: {"status": r.status, "stage": r.stage, "progress": r.progress} for r in session.execute(query)}


@dataclass
class WorkerRow:
    worker: Worker
    lost: bool
    current_job: Job | None
    current_model: str | None
    seconds_since_seen: float


@dataclass
class QueueOverview:
    by_state: dict[str, dict[str, int]]
    oldest_waiting: dict[str, dict]
    no_worker_for: list[str] = field(default_factory=list)  # device kinds with queued jobs and no live worker
    running: list[tuple[Job, str]] = field(default_factory=list)  # (job, model name)
    waiting: list[tuple[Job, str]] = field(default_factory=list)
    workers: list[WorkerRow] = field(default_factory=list)


def queue_overview(
    session: Session, *, depth: dict, now: datetime, lost_after_s: float, limit: int = 50
) -> QueueOverview:
    """Running and waiting jobs with their model names, and the workers: all but those stopped over a day ago.
    Inspect jobs are listed too, as what they are (device kind "any", purpose "inspect")."""
    overview = QueueOverview(
        by_state=depth.get("by_state", {}),
        oldest_waiting=depth.get("oldest_waiting", {}),
        no_worker_for=depth.get("no_worker_for", []),
    )
    jobs = select(Job, Analysis.model_name).join(Analysis, Analysis.id == Job.analysis_id)
    overview.running = [
        (job, name)
        for job, name in session.execute(jobs.where(Job.status == JobStatus.RUNNING).order_by(Job.id).limit(limit))
    ]
    overview.waiting = [
        (job, name)
        for job, name in session.execute(
            jobs.where(Job.status == JobStatus.QUEUED).order_by(Job.priority.desc(), Job.id).limit(limit)
        )
    ]
    running_by_worker = {job.worker_id: (job, name) for job, name in overview.running if job.worker_id}
    shown = or_(Worker.state != "stopped", Worker.last_seen_at >= now - timedelta(seconds=STOPPED_WORKERS_SHOWN_S))
    for worker in session.scalars(select(Worker).where(shown).order_by(Worker.registered_at)):
        seen = _aware(worker.last_seen_at)
        since = (now - seen).total_seconds()
        job, name = running_by_worker.get(worker.id, (None, None))
        lost = worker.state == "lost" or (worker.state != "stopped" and since > lost_after_s)
        overview.workers.append(WorkerRow(worker, lost, job, name, since))
    return overview


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
