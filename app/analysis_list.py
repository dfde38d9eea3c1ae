"""The list of analyses: one query for the API (`GET /api/v1/analyses`) and the dashboard (`/`).

Both show the same rows for the same filter: the same sort keys, the same model-name search (part of the name,
case-insensitive, `%` and `_` literal), every analysis with its measure job's status ("failed" without one).
Written for tens of thousands of analyses: each filter is an id subquery answerable from one index, the page's ids
come from walking the sort column's index, and only the page's rows are read, without their JSON bodies
(inspection, measurements, recommendation), so a page costs the same whatever the workers sent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, and_, func, intersect, select
from sqlalchemy.orm import load_only
from sqlmodel import Session

from advisor.core.status import AnalysisStatus
from app.models import MEASURE, Analysis, Job, JobStatus

Row = TypeVar("Row")
_measure_job = and_(Job.analysis_id == Analysis.id, Job.purpose == MEASURE)  # an analysis and its one measure job
# The sort keys, named after the summary's fields or the filter of the same column (`backend`, `submitter`).
SORT_COLUMNS: dict[str, Any] = {
    "id": Analysis.id,
    "created_at": Analysis.created_at,
    "updated_at": Analysis.updated_at,
    "model_name": Analysis.model_name,
    "status": Job.status,
    "target": Analysis.target,
    "backend": Analysis.recommended_backend,
    "speedup": Analysis.speedup_vs_eager,
    "submitter": Analysis.submitted_by,
}
SORT_ALIASES = {"created": "created_at", "model": "model_name"}  # the dashboard's earlier links still sort
DEFAULT_SORT = "created_at"
# What a list row reads of an analysis: its columns, none of the JSON bodies.
_LISTED_COLUMNS = load_only(
    Analysis.id,
    Analysis.model_name,
    Analysis.format,
    Analysis.target,
    Analysis.submitted_by,
    Analysis.tag,
    Analysis.created_at,
    Analysis.updated_at,
    Analysis.recommended_backend,
    Analysis.recommended_mode,
    Analysis.speedup_vs_eager,
)


def sort_key(name: str | None) -> str | None:
    """The sort key `name` means (an alias resolved), or None for an unknown one."""
    name = SORT_ALIASES.get(name or "", name)
    return name if name in SORT_COLUMNS else None


@dataclass
class AnalysisQuery:
    """Filters (all optional, combined with AND), sort and page of the list."""

    status: AnalysisStatus | None = None
    target: str | None = None
    backend: str | None = None  # the recommended backend
    model: str | None = None  # part of the model name
    submitter: str | None = None
    tag: str | None = None
    sort: str = DEFAULT_SORT  # a key of SORT_COLUMNS (or an alias)
    order: str = "desc"
    page: int = 1
    per_page: int = 20


@dataclass
class ListedAnalysis:
    """One row: the analysis (its columns only; `context_stage` is the one context field a row shows) and its
    measure job (None when it has none)."""

    analysis: Analysis
    job: Job | None
    context_stage: str | None
    confidence: str | None = None  # the recommendation's: shown beside its speedup (issue 44: marks on every speedup)


@dataclass
class ListedPage(Generic[Row]):
    """One page of rows (the query's ListedAnalysis, or what a caller made of them) and how many match."""

    rows: list[Row]
    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.per_page))


def list_analyses(session: Session, query: AnalysisQuery, *, clamp_page: bool = False) -> ListedPage[ListedAnalysis]:
    """One page of analyses matching `query`, and how many match. `clamp_page`: a page past the last shows the last
    (the dashboard); otherwise it is empty (the API, whose clients page until a page comes back empty)."""
    ids = _matching_ids(query)
    total = _count(session, ids)
    page = min(query.page, max(1, math.ceil(total / query.per_page))) if clamp_page else query.page
    page_ids = _page_ids(session, query, ids, page)
    if not page_ids:
        return ListedPage([], total, page, query.per_page)
    rows = session.execute(
        select(
            Analysis,
            Job,
            Analysis.context["stage"].as_string().label("context_stage"),
            Analysis.recommendation["confidence"].as_string().label("confidence"),
        )
        .options(_LISTED_COLUMNS)
        .outerjoin(Job, _measure_job)
        .where(Analysis.id.in_(page_ids))
    )
    found = {analysis.id: ListedAnalysis(analysis, job, stage, sure) for analysis, job, stage, sure in rows}
    return ListedPage([found[i] for i in page_ids if i in found], total, page, query.per_page)


def _matching_ids(query: AnalysisQuery) -> list[Select]:
    """One id subquery per filter, each answerable from one index alone (no analysis row is read)."""
    ids: list[Select] = []
    if query.model:
        escaped = query.model.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        ids.append(select(Analysis.id).where(Analysis.model_name.ilike(f"%{escaped}%", escape="\\")))
    for column, value in (
        (Analysis.target, query.target),
        (Analysis.recommended_backend, query.backend),
        (Analysis.submitted_by, query.submitter),
        (Analysis.tag, query.tag),
    ):
        if value:
            ids.append(select(Analysis.id).where(column == value))
    if query.status:
        status = JobStatus.of_analysis(query.status)
        ids.append(select(Job.analysis_id).where(Job.status == status, Job.purpose == MEASURE))
    return ids


def _count(session: Session, ids: list[Select]) -> int:
    if not ids:
        count = select(func.count()).select_from(Analysis)
    elif len(ids) == 1:
        count = select(func.count()).select_from(ids[0].subquery())
    else:
        count = select(func.count()).select_from(intersect(*ids).subquery())
    return int(session.scalar(count) or 0)


def _page_ids(session: Session, query: AnalysisQuery, ids: list[Select], page: int) -> list[int]:
    """The ids of one page. Analysis rows carry large JSON columns (SQLite keeps them in overflow pages, so
    reading any later column of a row is costly): filters and order use indexes only. `id + 0 IN (...)`
    stops SQLite from driving the query by rowid lookups; it walks the sort column's index in order
    instead, checks each id against the filter sets and stops after one page. Ties go by id, in the same
    direction, so `asc` is exactly `desc` reversed; no speedup (not measured) sorts last either way."""
    sort = sort_key(query.sort) or DEFAULT_SORT
    column = SORT_COLUMNS[sort]
    direction = column.asc() if query.order == "asc" else column.desc()
    tiebreak = Analysis.id.asc() if query.order == "asc" else Analysis.id.desc()
    statement = select(Analysis.id)
    if sort == "status":
        statement = statement.outerjoin(Job, _measure_job)
    statement = (
        statement.where(*((Analysis.id + 0).in_(subquery) for subquery in ids))
        .order_by(direction.nulls_last() if sort == "speedup" else direction, tiebreak)
        .limit(query.per_page)
        .offset((page - 1) * query.per_page)
    )
    return list(session.scalars(statement))
