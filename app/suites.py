"""Model suites: analyses that share a tag (`POST /analyze` with `tag=...`), read back for their summary.

What a tag may be (TAG_PATTERN) is checked at submission; the summary itself is advisor.core.suite_summary.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlmodel import Session

from advisor.core.catalogue import option_label
from advisor.core.early_answer import pending_details
from advisor.core.results import MeasurementRun, read
from advisor.core.suite_summary import SuiteMember, SuiteSummary, summarise_suite
from app.clock import aware
from app.models import Analysis

TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
TAG_RULE = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
MAX_SUITE_ANALYSES = 5_000  # the most recent measured analyses a summary reads


class SuiteListing(BaseModel):
    tag: str
    analyses: int
    models: int
    last_at: datetime


def suite_tags(session: Session) -> list[SuiteListing]:
    """Every tag with its number of analyses and models and its latest submission, most recent first."""
    query = (
        select(
            Analysis.tag,
            func.count(Analysis.id),
            func.count(Analysis.model_name.distinct()),
            func.max(Analysis.created_at),
        )
        .where(Analysis.tag.is_not(None))
        .group_by(Analysis.tag)
        .order_by(func.max(Analysis.created_at).desc())
    )
    return [
        SuiteListing(tag=tag, analyses=count, models=models, last_at=aware(last))
        for tag, count, models, last in session.execute(query)
    ]


def suite_summary(session: Session, tag: str) -> SuiteSummary | None:
    """The suite's summary over its measured analyses (None when no analysis has this tag); a ranking counts once
    its job completes."""
    if session.scalar(select(Analysis.id).where(Analysis.tag == tag).limit(1)) is None:
        return None
    query = (
        select(
            Analysis.id,
            Analysis.model_name,
            Analysis.created_at,
            Analysis.measurements,
            Analysis.recommended_backend,
            Analysis.recommended_mode,
        )
        .where(Analysis.tag == tag, Analysis.measurements.is_not(None))
        .order_by(Analysis.created_at.desc())
        .limit(MAX_SUITE_ANALYSES)
    )
    members = []
    for row in session.execute(query):
        run = read(MeasurementRun, row.measurements)
        if run is None or not run.measurements or pending_details(row.measurements):
            continue  # nothing measured, or a ranking whose job is still measuring (advisor.core.early_answer)
        members.append(
            SuiteMember(
                analysis_id=row.id,
                model_name=row.model_name,
                created_at=aware(row.created_at),
                measurements=run,
                recommended=option_label(row.recommended_backend, row.recommended_mode)
                if row.recommended_backend
                else None,
            )
        )
    return summarise_suite(tag, members)
