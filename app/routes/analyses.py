"""Submitting analyses and reading them back: /api/v1/analyze, /api/v1/analyses/..."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from pydantic import BaseModel
from sqlmodel import Session

from advisor.core import catalogue
from advisor.core.calibration import MAX_CALIBRATION_BYTES, CalibrationRefused, check_stream
from advisor.core.source_report import (
    MAX_UPLOAD_BYTES,
    SOURCE_LABEL,
    SourceReportRefused,
    parse_uploaded_report,
)
from advisor.core.status import AnalysisStatus
from app.analyses import (
    RerunRefused,
    Submission,
    analysis_status,
    analysis_view,
    job_of,
    report_input,
    rerun_analysis,
    submit_analysis,
)
from app.analysis_actions import ActionRefused, cancel_analysis, existing_analysis, owned_analysis, redecide_analysis
from app.analysis_list import SORT_ALIASES, SORT_COLUMNS, AnalysisQuery, list_analyses
from app.auth import Principal
from app.deps import (
    AnyRoleDep,
    QueueDep,
    SessionDep,
    SettingsDep,
    StoreDep,
    UserDep,
    actor_of,
)
from app.job_queue import JobQueue
from app.models import Analysis, AnalysisDetail, AnalysisSummaryPage, Artifact, Job
from app.routes.artifacts import stored_file_response
from app.settings import Settings
from app.storage import ArtifactStorage, Incoming, StoredFile, UploadTooLarge
from app.suites import TAG_PATTERN, TAG_RULE
from app.summaries import page_summaries
from app.upload_form import MAX_PARTS, FileLimit, ReceivedForm, receive_form
from app.upload_names import upload_names

router = APIRouter(tags=["analyses"])
CALIBRATION_FILE = "the calibration file"  # its FileLimit's `what`: an oversized one is the calibration's own 422


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


@router.post(
    "/analyze",
    status_code=202,
    response_model=AnalysisAccepted,
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
async def analyze(
    request: Request,
    session: SessionDep,
    queue: QueueDep,
    store: StoreDep,
    settings: SettingsDep,
    principal: UserDep,
) -> JSONResponse:
    """The upload is streamed into the artifact store while it arrives (app.upload_form)."""
    submission = await receive_and_submit(request, session, queue, store, settings, principal)
    return _accepted(request, submission)


async def receive_and_submit(
    request: Request,
    session: Session,
    queue: JobQueue,
    store: ArtifactStorage,
    settings: Settings,
    principal: Principal,
    *,
    prepare: Callable[[ReceivedForm], None] | None = None,
    max_parts: int = MAX_PARTS,
) -> Submission:
    """Receive the analyze form, validate it, store its files and submit the analysis (the API's POST
    /analyze and the dashboard's no-script upload page). `prepare` may rewrite the received form's fields
    before validation (the page folds its `ctx.*` fields into `context`); it raises HTTPException to refuse.

    The slow work (receiving, hashing, sniffing, storing) happens outside any database transaction; then the
    artifact rows, the analysis and its job are written in one short transaction (`submit_analysis`). A file
    stored for a submission that then fails is an orphan, removed later (`collect_orphans`).
    Raises HTTPException (422, 415, 400), UploadTooLarge or DatabaseBusy; leaves no temp file behind."""
    if session.in_transaction():  # e.g. the caller's sign-in lookup: hold no transaction while the body arrives
        await run_in_threadpool(session.commit)
    limits = {
        "model": FileLimit(settings.max_upload_bytes, "the model file"),
        "inputs": FileLimit(settings.max_inputs_bytes, "the inputs file"),
        "calibration": FileLimit(MAX_CALIBRATION_BYTES, CALIBRATION_FILE),
    }
    try:
        form = await receive_form(request, store, limits, max_parts=max_parts)
    except UploadTooLarge as exc:
        if exc.what != CALIBRATION_FILE:
            raise
        raise _calibration_refused(f"calibration file too large: more than {MAX_CALIBRATION_BYTES:,} bytes") from None
    try:
        if prepare is not None:
            prepare(form)
        fields = _form_fields(form)
        if "model" not in form.files:
            raise HTTPException(422, detail=[{"field": "model", "message": "Field required: the model file"}])
        calibration_row = None  # checked first: a refused one leaves nothing stored, not even the model
        if "calibration" in form.files and form.files["calibration"].size > 0:
            calibration_row = await run_in_threadpool(_store_calibration, form.files["calibration"], queue.clock())
        artifact = await run_in_threadpool(_store_model, form.files["model"], queue.clock())
        inputs_row = None
        if "inputs" in form.files and form.files["inputs"].size > 0:
            inputs_row = await run_in_threadpool(_store_inputs, form.files["inputs"], queue.clock())
    finally:
        form.discard()
    return await run_in_threadpool(
        lambda: submit_analysis(
            session,
            queue,
            artifact=artifact,
            inputs=inputs_row,
            context=fields["context"],
            target=str(fields["context"]["target"]),
            model_name=fields["model_name"] or _default_name(form.filenames.get("model")),
            backends=fields["backends"],
            submitted_by=principal.name,
            tag=fields["tag"],
            force=fields["force"],
            cache_window_s=settings.cache_window_s,
            source_report=fields["source_report"],
            calibration=calibration_row,
            upload_names=upload_names(
                form.filenames,
                {"model", *(["inputs"] if inputs_row else []), *(["calibration"] if calibration_row else [])},
            ),
        )
    )


# How the API answers each refusal of advisor.core.artifacts (the message names the entry and the limit); others: 415.
_REFUSAL_STATUS = {
    "zip_bomb": 413,
    "metadata_too_large": 413,
    "compression_ratio": 413,
    "unsafe_path": 422,
    "native_code": 422,
    "denied_op": 422,  # advisor/core/denied_ops.py: an op that touches files or the process
    "nested_code": 422,
    "unreadable_code": 422,
    "forged_directory": 422,
    "truncated": 422,
    "encrypted": 422,
    "unsupported_compression": 422,
}


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


def _form_fields(form: ReceivedForm) -> dict:
    """The text fields, validated: context (parsed), model_name, tag, backends, force."""
    context = _parse_context(form.fields.get("context", "{}"))
    model_name = form.fields.get("model_name", "").strip()
    if len(model_name) > 200:
        raise HTTPException(422, detail=[{"field": "model_name", "message": "at most 200 characters"}])
    tag = form.fields.get("tag", "").strip() or None
    if tag is not None and not re.fullmatch(TAG_PATTERN, tag):
        raise HTTPException(422, detail=[{"field": "tag", "message": TAG_RULE}])
    force_text = form.fields.get("force", "false").strip().lower()
    if force_text not in ("true", "false", "1", "0", "yes", "no", "on", "off", ""):
        raise HTTPException(422, detail=[{"field": "force", "message": "must be true or false"}])
    backends = sorted({name.strip() for name in form.fields.get("backends", "").split(",") if name.strip()})
    _check_backend_names(backends)
    return {
        "context": context,
        "model_name": model_name,
        "tag": tag,
        "backends": backends,
        "force": force_text in ("true", "1", "yes", "on"),
        "source_report": _source_report(form.fields.get("source_report")),
    }


def _source_report(raw: str | None) -> dict | None:
    """The uploaded source-side report, validated (advisor.core.source_report: bounds, types, no unknown fields) and
    stored as validated; 422 naming each bad field, never echoing its value. Absent or empty: None."""
    if raw is None or not raw.strip():
        return None
    try:
        return parse_uploaded_report(raw).model_dump(mode="json")
    except SourceReportRefused as exc:
        raise HTTPException(422, detail=exc.problems) from None


def backend_choices() -> list[str]:
    """Every name the `backends` field accepts (what _check_backend_names lets through): the catalogue's backends,
    then each int8 mode named with its backend. The dashboard's upload form lists these."""
    known = catalogue.names()
    return [*known, *(f"{b}:{m}" for b in known for m in catalogue.BACKENDS[b].quantized_modes)]


def _check_backend_names(backends: list[str]) -> None:
    """A job waits for a worker offering every backend it names: an unknown name would wait forever. An int8 mode
    is named with its backend (`onnxruntime:int8`): a worker measures it only when asked (catalogue
    `quantized_modes`); other modes are not chosen here, a worker measures every float mode of each backend."""
    known = catalogue.names()
    unknown = [name for name in backends if name not in known and not _int8_spec(name)]
    if unknown:
        int8 = ", ".join(f"{b}:{m}" for b in known for m in catalogue.BACKENDS[b].quantized_modes)
        hint = (
            f" (modes are not chosen here: a worker measures every mode of each backend but the int8 ones, which are "
            f"named: {int8})"
            if any(":" in name for name in unknown)
            else ""
        )
        raise HTTPException(
            422,
            detail=[
                {
                    "field": "backends",
                    "message": f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(known)}{hint}",
                }
            ],
        )


def _int8_spec(name: str) -> bool:
    """`backend:mode` naming one of the catalogue's int8 modes (`onnxruntime:int8`, `inductor:pt2e-int8`)."""
    backend, _, mode = name.partition(":")
    info = catalogue.BACKENDS.get(backend)
    return info is not None and mode in info.quantized_modes


def _parse_context(raw: str) -> dict:
    """The context JSON, decoded safely (depth, size, huge integers) and validated; 422 naming the field."""
    from advisor.core.context import ContextError, parse_context, parse_context_json

    try:
        return parse_context(parse_context_json(raw)).model_dump(mode="json")
    except ContextError as exc:
        raise HTTPException(422, detail=exc.errors) from None


def _store_model(incoming: Incoming, now) -> Artifact:  # noqa: ANN001
    """Check the model file (advisor.core.artifacts.sniff) and store it; its row (not yet added) for submit_analysis."""
    from advisor.core.artifacts import ArtifactRejected, sniff

    try:
        stored, info = incoming.commit(check=sniff)
    except ArtifactRejected as exc:
        raise HTTPException(_REFUSAL_STATUS.get(exc.code, 415), detail=str(exc)) from None
    return _artifact_row(stored, now, kind="model", info=info)


def _store_inputs(incoming: Incoming, now) -> Artifact:  # noqa: ANN001
    stored, _ = incoming.commit()
    return _artifact_row(stored, now, kind="inputs", info=None)


def _store_calibration(incoming: Incoming, now) -> Artifact:  # noqa: ANN001
    """Check the calibration .npz from its zip directory and .npy headers (advisor.core.calibration: never unpickled,
    never expanded) before it is stored; a refused one leaves nothing in the store. Its shapes against the model's
    inputs are checked by the worker, after the inspection (as `analyze --local` does)."""
    size = incoming.size

    def check(source) -> None:  # noqa: ANN001 - the local store's temp Path, or object storage's reader
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as handle:
                check_stream(handle, size)
        else:
            check_stream(source, size)

    try:
        stored, _ = incoming.commit(check=check)
    except CalibrationRefused as exc:
        raise _calibration_refused(str(exc)) from None
    return _artifact_row(stored, now, kind="calibration", info=None)


def _calibration_refused(message: str) -> HTTPException:
    return HTTPException(422, detail=[{"field": "calibration", "message": message}])


def _artifact_row(stored: StoredFile, now, *, kind: str, info) -> Artifact:  # noqa: ANN001
    row = Artifact(sha256=stored.sha256, kind=kind, size_bytes=stored.size_bytes, created_at=now)
    if info is not None:
        row.format = info.format
        row.entries = info.entries
        row.archive_name = info.archive_name
        row.custom_op_names = list(info.custom_op_names)
    return row


def _default_name(filename: str | None) -> str:
    stem = (filename or "model").rsplit("/", 1)[-1]
    return stem.rsplit(".", 1)[0] or "model"


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


@router.post(
    "/analyses/{analysis_id}/rerun",
    status_code=202,
    response_model=AnalysisAccepted,
    responses={
        404: {"description": "no such analysis"},
        409: {"description": "its model (or inputs) file is no longer stored"},
    },
    summary="Measure the same model, inputs and context again, as a new analysis",
)
def rerun_route(
    analysis_id: int,
    request: Request,
    session: SessionDep,
    queue: QueueDep,
    store: StoreDep,
    settings: SettingsDep,
    principal: UserDep,
) -> JSONResponse:
    """Always measures again (like `force=true`); the earlier analysis keeps its results."""
    with _refusals():
        owned_analysis(session, principal, analysis_id, "re-run")
    try:
        submission = rerun_analysis(
            session,
            queue,
            store,
            analysis_id=analysis_id,
            submitted_by=principal.name,
            cache_window_s=settings.cache_window_s,
        )
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
