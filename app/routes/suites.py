"""Model suites over the API: /api/v1/suites (every tag) and /api/v1/suites/{tag} (its summary and history)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from advisor.core.suite_summary import SuiteSummary
from app.deps import SessionDep, UserDep
from app.suites import SuiteListing, suite_summary, suite_tags

router = APIRouter(tags=["suites"])


@router.get("/suites", response_model=list[SuiteListing], summary="Every model suite (tag), most recent first")
def list_suites(session: SessionDep, _: UserDep) -> list[SuiteListing]:
    return suite_tags(session)


@router.get(
    "/suites/{tag}",
    response_model=SuiteSummary,
    summary="A suite's summary per option (geomean speedup, pass rate, compile time, memory) and its history",
)
def get_suite(tag: str, session: SessionDep, _: UserDep) -> SuiteSummary:
    summary = suite_summary(session, tag)
    if summary is None:
        raise HTTPException(404, detail=f"no analysis has the tag {tag!r}")
    return summary
