"""Read queries the dashboard pages need, written for tens of thousands of analyses.

The list page is the API's list query (app.analysis_list: filters and sorts in SQL on indexed columns, never
reads the JSON blobs of inspection or measurements) shaped into rows for the template. An analysis' status is its
job's state (`succeeded` shows as `done`). The recommended backend, mode and speedup are the denormalised columns
`app.outcomes.store_recommendation` keeps on Analysis, so every sort is an index walk.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlmodel import Session

from advisor.core.catalogue import option_label
from advisor.core.status import AnalysisStatus
from app import analysis_list
from app.analyses import queue_positions
from app.analysis_list import DEFAULT_SORT, AnalysisQuery, ListedPage, sort_key
from app.batch_jobs import batch_job_label
from app.clock import aware
from app.job_queue import JobQueue
from app.models import MEASURE, Analysis, AnalysisSummary, Job, JobStatus, Worker
from app.summaries import page_summaries
from app.web.status_strip import shown_position, shown_stage

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


@dataclass
class AnalysisFilters(AnalysisQuery):
    """The list page's query string, validated: unknown values fall back to the defaults. The query itself is the
    API's (app.analysis_list)."""

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
        status = params.get("status")
        return cls(
            model=text("model"),
            status=AnalysisStatus(status) if status in ANALYSIS_STATUSES else None,
            target=text("target"),
            backend=text("backend"),
            submitter=text("submitter"),
            tag=text("tag"),
            sort=sort_key(params.get("sort")) or DEFAULT_SORT,
            order="asc" if params.get("order") == "asc" else "desc",
            page=max(1, integer("page", 1)),
            per_page=per_page if per_page in PER_PAGE_CHOICES else 25,
        )

    @property
    def any(self) -> bool:
        return any((self.model, self.status, self.target, self.backend, self.submitter, self.tag))

    def as_query(self, **changes: Any) -> dict[str, Any]:
        values = {
            "model": self.model,
            "status": self.status,
            "target": self.target,
            "backend": self.backend,
            "submitter": self.submitter,
            "tag": self.tag,
            "sort": self.sort,
            "order": self.order,
            "page": self.page,
            "per_page": self.per_page,
        } | changes
        defaults = {"sort": DEFAULT_SORT, "order": "desc", "page": 1, "per_page": 25}
        return {k: v for k, v in values.items() if v not in (None, "") and defaults.get(k) != v}


@dataclass
class AnalysisListRow:
    """One row of the dashboard's list: the API's list item (app.summaries, the same AnalysisSummary model) and the
    one context field the row shows besides."""

    summary: AnalysisSummary
    context_stage: str | None
    confidence: str | None = None  # the recommendation's, marked beside its speedup

    @property
    def recommended(self) -> str | None:
        return _label(self.summary.recommended_backend, self.summary.recommended_mode)


AnalysisPage = ListedPage[AnalysisListRow]


def list_analyses(session: Session, queue: JobQueue, filters: AnalysisFilters) -> AnalysisPage:
    """One page of analyses (app.analysis_list, the API's query) as the API's list items (app.summaries); the page
    number is clamped to the last page."""
    listed = analysis_list.list_analyses(session, filters, clamp_page=True)
    items = page_summaries(session, queue, listed.rows)
    rows = [
        AnalysisListRow(item, row.context_stage, row.confidence) for item, row in zip(items, listed.rows, strict=True)
    ]
    return AnalysisPage(rows, listed.total, listed.page, listed.per_page)


def _label(backend: str | None, mode: str | None) -> str | None:
    if not backend:
        return None
    return option_label(backend, mode, short=True)


def recommended_backends(session: Session) -> list[str]:
    """Distinct recommended backends, for the filter's options (an index-only scan)."""
    query = select(Analysis.recommended_backend).where(Analysis.recommended_backend.is_not(None)).distinct()
    return sorted(session.scalars(query))


def analysis_states(session: Session, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    """{analysis id: {status, stage, progress, measured, queue_position}} for the live-progress poller; `measured`:
    the analysis holds measurements (its ranking arrives before its job ends: advisor.core.early_answer); `stage`
    and `queue_position` agree with `status` (app.web.status_strip: a position only while queued)."""
    ids = list(ids)[:200]
    if not ids:
        return {}
    query = (
        select(
            Analysis.id,
            _status_expr.label("status"),
            Job,
            Analysis.measurements.is_not(None).label("measured"),
        )
        .outerjoin(Job, _job_join)
        .where(Analysis.id.in_(ids))
    )
    rows = session.execute(query).all()
    positions = queue_positions(session, [r.Job for r in rows])
    return {
        r.id: {
            "status": r.status,
            "stage": shown_stage(r.status, r.Job.stage if r.Job else None),  # as the page's status strip words it
            "progress": r.Job.progress if r.Job else None,
            "measured": bool(r.measured),
            "queue_position": shown_position(r.status, positions.get(r.Job.id) if r.Job else None),
        }
        for r in rows
    }


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
    batch_jobs: dict[str, str] = field(default_factory=dict)  # worker id -> "Slurm job 123" (app.batch_jobs)


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
        seen = aware(worker.last_seen_at)
        since = (now - seen).total_seconds()
        job, name = running_by_worker.get(worker.id, (None, None))
        lost = worker.state == "lost" or (worker.state != "stopped" and since > lost_after_s)
        overview.workers.append(WorkerRow(worker, lost, job, name, since))
        if label := batch_job_label(worker.environment):
            overview.batch_jobs[worker.id] = label
    return overview
