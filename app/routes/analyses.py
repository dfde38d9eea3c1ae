"""Submitting analyses and reading them back: /api/v1/analyze, /api/v1/analyses/..."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from pydantic import BaseModel

from advisor.core.calibration import MAX_CALIBRATION_BYTES
from advisor.core.source_report import MAX_UPLOAD_BYTES, SOURCE_LABEL
from advisor.core.status import AnalysisStatus
from app.analyses import (
    RerunRefused,
    Submission,
    analysis_status,
    analysis_view,
    job_of,
    report_input,
)
from app.analysis_actions import ActionRefused, cancel_analysis, existing_analysis, owned_analysis, redecide_analysis
from app.analysis_list import SORT_ALIASES, SORT_COLUMNS, AnalysisQuery, list_analyses
from app.deps import (
    AnyRoleDep,
    QueueDep,
    SessionDep,
    StoreDep,
    UserDep,
    actor_of,
)
from app.models import Analysis, AnalysisDetail, AnalysisSummaryPage, Job
from app.routes.artifacts import stored_file_response
from app.submitting import SubmittingDep
from app.suites import TAG_PATTERN
from app.summaries import page_summaries

router = APIRouter(tags=["analyses"])


class AnalysisLinks(BaseModel):
    self: str
    report_md: str
    report_json: str
    cancel: str


class AnalysisAccepted(BaseModel):
    id: int
    status: str
    deduplicated: bool = False
    links: AnalysisLinks


DETAIL = {"response_model": AnalysisDetail, "response_model_exclude_unset": True}


ANALYZE_FORM = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["model"],
                "properties": {
                    "model": {"type": "string", "format": "binary", "description": "TorchScript or ExportedProgram"},
                    "context": {"type": "string", "description": "DeploymentContext as a JSON object", "default": "{}"},
                    "inputs": {"type": "string", "format": "binary", "description": "example inputs (torch.save)"},
                    "calibration": {
                        "type": "string",
                        "format": "binary",
                        "description": "the int8 options' calibration samples: an .npz (numpy.savez) of input0, "
                        "input1, ... shaped [samples, *example input shape], at most "
                        f"{MAX_CALIBRATION_BYTES // 2**20} MiB; never a pickle (refused: 422)",
                    },
                    "model_name": {"type": "string", "maxLength": 200},
                    "tag": {
                        "type": "string",
                        "pattern": TAG_PATTERN,
                        "description": "a model suite's name: its analyses are summarised at /suites/TAG",
                    },
                    "backends": {"type": "string", "description": "comma-separated backends the job needs"},
                    "force": {"type": "boolean", "description": "measure again even if an identical analysis exists"},
                    "source_report": {
                        "type": "string",
                        "maxLength": MAX_UPLOAD_BYTES,
                        "description": "the source-side report of `npu-advisor analyze FILE.py:factory` (graph breaks, "
                        "recompiles, export) as a JSON object, validated against SourceReport; stored with the "
                        f"analysis and shown as {SOURCE_LABEL!r}; the decision uses it",
                    },
                },
            }
        }
    },
}


# a route that submits an analysis: 202 with its links (`_accepted`), 200 when an identical recent one answers
_submission_route = functools.partial(router.post, status_code=202, response_model=AnalysisAccepted)


@_submission_route(
    "/analyze",
    responses={
        200: {"description": "an identical recent analysis (deduplicated)"},
        413: {
            "description": "the upload is over the size limit, or its archive expands past one (entries, sizes, "
            "compression ratio, metadata entries); the message names the entry and the limit"
        },
        415: {"description": "not a TorchScript / ExportedProgram file (the message says what it is)"},
        422: {
            "description": "invalid form or context: one {field, message} per problem (also: a form of more "
            "than 16 parts, a text field over 1 MiB, or a source_report that is not a valid SourceReport or is "
            "over 256 KiB: the field named, e.g. source_report.graph_breaks.breaks.0.reason; a calibration file "
            "that is not a bounded .npz of numeric arrays - a pickle, garbage, a zip bomb, over "
            f"{MAX_CALIBRATION_BYTES // 2**20} MiB - field calibration, nothing stored)"
        },
        429: {"description": "this client already has its share of uploads in progress: retry after Retry-After"},
        503: {
            "description": "the server is saturated (uploads received at once, or database writes): nothing was "
            "submitted; retry after Retry-After"
        },
    },
    openapi_extra={"requestBody": ANALYZE_FORM},
    summary="Submit a model and its deployment context for analysis",
)
async def analyze(request: Request, submitting: SubmittingDep, principal: UserDep) -> JSONResponse:
    """The upload is streamed into the artifact store while it arrives (app.multipart_form), then checked, stored and
    submitted by app.intake."""
    submission = await submitting.receive(request, principal)
    return _accepted(request, submission)


def _accepted(request: Request, submission: Submission) -> JSONResponse:
    """202 with the new analysis' id and links (200 for a deduplicated submission); no database access."""
    analysis_id = submission.analysis.id
    base = str(request.url_for("get_analysis", analysis_id=analysis_id))
    body = AnalysisAccepted(
        id=analysis_id,
        status=analysis_status(submission.job),
        deduplicated=submission.deduplicated,
        links=AnalysisLinks(
            self=base, report_md=f"{base}/report.md", report_json=f"{base}/report.json", cancel=f"{base}/cancel"
        ),
    )
    return JSONResponse(body.model_dump(), status_code=200 if submission.deduplicated else 202)


@router.get("/analyses", response_model=AnalysisSummaryPage, summary="List analyses (filter, sort, paginate)")
def list_route(
    session: SessionDep,
    queue: QueueDep,
    _: UserDep,
    status: AnalysisStatus | None = None,
    target: str | None = None,
    backend: Annotated[str | None, Query(description="the recommended backend")] = None,
    model: Annotated[str | None, Query(description="part of the model name")] = None,
    submitter: str | None = None,
    tag: Annotated[str | None, Query(description="the model suite (see /suites)", max_length=64)] = None,
    sort: Literal[(*SORT_COLUMNS, *SORT_ALIASES)] = "created_at",  # type: ignore[valid-type]
    order: Literal["asc", "desc"] = "desc",
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    per_page: Annotated[int, Query(ge=1, le=200)] = 20,
) -> AnalysisSummaryPage:
    """The dashboard's list (app.analysis_list): the same rows for the same filter, sort and page."""
    query = AnalysisQuery(
        status=status,
        target=target,
        backend=backend,
        model=model,
        submitter=submitter,
        tag=tag,
        sort=sort,
        order=order,
        page=page,
        per_page=per_page,
    )
    listed = list_analyses(session, query)
    items = page_summaries(session, queue, listed.rows)
    return AnalysisSummaryPage(items=items, total=listed.total, page=page, per_page=per_page)


def _load(session, analysis_id: int) -> tuple[Analysis, Job | None]:  # noqa: ANN001
    analysis = session.get(Analysis, analysis_id)
    if analysis is None:
        raise HTTPException(404, detail=f"analysis {analysis_id} does not exist")
    return analysis, job_of(session, analysis_id)


@router.get("/analyses/{analysis_id}", name="get_analysis", summary="One analysis with results", **DETAIL)
def get_route(analysis_id: int, session: SessionDep, queue: QueueDep, _: UserDep) -> AnalysisDetail:
    analysis, job = _load(session, analysis_id)
    return analysis_view(session, queue, analysis, job)


@router.get("/analyses/{analysis_id}/report.md", response_class=PlainTextResponse, summary="Markdown report")
def report_md(analysis_id: int, session: SessionDep, _: UserDep) -> PlainTextResponse:
    from advisor.core.report import render

    analysis, _job = _load(session, analysis_id)
    return PlainTextResponse(render(report_input(analysis), "markdown"), media_type="text/markdown; charset=utf-8")


@router.get("/analyses/{analysis_id}/report.json", summary="JSON report")
def report_json(analysis_id: int, session: SessionDep, _: UserDep) -> JSONResponse:
    from advisor.core.report import render

    analysis, _job = _load(session, analysis_id)
    return JSONResponse(json.loads(render(report_input(analysis), "json")))


@router.post(
    "/analyses/{analysis_id}/cancel",
    summary="Cancel (queued: at once; running: at the next heartbeat)",
    **DETAIL,
)
def cancel_route(analysis_id: int, session: SessionDep, queue: QueueDep, principal: UserDep) -> AnalysisDetail:
    with _refusals():
        analysis = owned_analysis(session, principal, analysis_id, "cancel")
        job = cancel_analysis(session, queue, analysis)
    return analysis_view(session, queue, analysis, job)


@router.post(
    "/analyses/{analysis_id}/redecide",
    summary="Re-run the decision engine on the stored results",
    **DETAIL,
)
def redecide_route(analysis_id: int, session: SessionDep, queue: QueueDep, _: UserDep) -> AnalysisDetail:
    with _refusals():
        analysis = existing_analysis(session, analysis_id)
        redecide_analysis(session, queue, analysis)
    return analysis_view(session, queue, analysis, job_of(session, analysis_id))


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """An action refused by app.analysis_actions, answered with its status."""
    try:
        yield
    except ActionRefused as exc:
        raise HTTPException(exc.status_code, detail=str(exc)) from None


@_submission_route(
    "/analyses/{analysis_id}/rerun",
    responses={
        404: {"description": "no such analysis"},
        409: {"description": "its model (or inputs) file is no longer stored"},
    },
    summary="Measure the same model, inputs and context again, as a new analysis",
)
def rerun_route(analysis_id: int, request: Request, submitting: SubmittingDep, principal: UserDep) -> JSONResponse:
    """Always measures again (like `force=true`); the earlier analysis keeps its results."""
    with _refusals():
        owned_analysis(submitting.session, principal, analysis_id, "re-run")
    try:
        submission = submitting.rerun(analysis_id, principal)
    except RerunRefused as exc:
        raise HTTPException(exc.status_code, detail=str(exc)) from None
    return _accepted(request, submission)


@router.get("/analyses/{analysis_id}/inputs", response_class=FileResponse, summary="The uploaded inputs file")
def inputs_route(
    analysis_id: int, session: SessionDep, store: StoreDep, queue: QueueDep, who: AnyRoleDep
) -> FileResponse:
    """A worker token: only while it holds a live lease on a job of the analysis (else the same 404)."""
    analysis, _job = _load(session, analysis_id)
    held = who.role != "worker" or queue.holds_live_lease(session, actor_of(who), analysis_id=analysis_id)
    if not held or analysis.inputs_sha256 is None or not store.exists(analysis.inputs_sha256):
        raise HTTPException(404, detail=f"analysis {analysis_id} has no inputs file")
    return stored_file_response(store, analysis.inputs_sha256)
