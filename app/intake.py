"""The intake of one analysis: receive the analyze form, parse its context and source report, store and sniff its
files, submit the analysis. The API's `POST /api/v1/analyze` (app.routes.analyses) and the dashboard's no-script
upload page (app.web.pages) both call `receive_and_submit`; each only adapts HTTP around it (the API answers 202
with links, the page redirects or shows the form again with the refusal's messages).

A refusal is an HTTPException whose status and `{field, message}` list both callers show: a 422 names the field, a
413 the entry and the limit, a 415 what the file is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import BinaryIO

from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from sqlmodel import Session

from advisor.core import catalogue
from advisor.core.artifacts import opened
from advisor.core.calibration import (
    MAX_CALIBRATION_BYTES,
    CalibrationInfo,
    CalibrationRefused,
    check_against_inputs,
    check_stream,
)
from advisor.core.source_report import SourceReportRefused, parse_uploaded_report
from app.analyses import Submission, submit_analysis
from app.auth import Principal
from app.job_queue import JobQueue
from app.models import Artifact
from app.multipart_form import MAX_PARTS, FileLimit, ReceivedForm, receive_form
from app.service_errors import refusal_status
from app.settings import Settings
from app.storage import ArtifactStorage, Incoming, StoredFile, UploadTooLarge
from app.suites import TAG_PATTERN, TAG_RULE
from app.target_devices import off_target
from app.upload_names import upload_names

CALIBRATION_FILE = "the calibration file"  # its FileLimit's `what`: an oversized one is the calibration's own 422


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
        calibration_row = calibration = None  # checked first: a refused one leaves nothing stored, not even the model
        if "calibration" in form.files and form.files["calibration"].size > 0:
            calibration_row, calibration = await run_in_threadpool(
                _store_calibration, form.files["calibration"], queue.clock()
            )
        artifact = await run_in_threadpool(_store_model, form.files["model"], queue.clock(), calibration)
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
    if problems := off_target(backends, str(context["target"])):  # it would wait for a worker that never comes
        raise HTTPException(422, detail=problems)
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


def _store_model(incoming: Incoming, now, calibration: CalibrationInfo | None = None) -> Artifact:  # noqa: ANN001
    """Check the model file (advisor.core.artifacts.sniff) and store it; its row (not yet added) for submit_analysis.
    With a calibration file, an ExportedProgram's input specs (from its JSON alone: advisor.core.archive_inputs) are
    checked against it here, with the worker's message; where the JSON cannot tell (TorchScript) the worker checks."""
    from advisor.core.artifacts import ArtifactRejected, sniff

    def check(source):  # noqa: ANN001, ANN202 - the local store's temp Path, or object storage's reader
        with opened(source) as handle:  # one open for the sniff and the calibration check
            info = sniff(handle)
            if calibration is not None and info.format == "exported_program":
                _check_calibration_fits(handle, info.archive_name, calibration)
            return info

    try:
        stored, info = incoming.commit(check=check)
    except ArtifactRejected as exc:
        raise HTTPException(refusal_status(exc.code), detail=str(exc)) from None
    except CalibrationRefused as exc:
        raise _calibration_refused(str(exc)) from None
    return _artifact_row(stored, now, kind="model", info=info)


def _check_calibration_fits(handle: BinaryIO, archive_name: str, calibration: CalibrationInfo) -> None:
    """CalibrationRefused (advisor.core.calibration.check_against_inputs: the message the worker and `analyze --local`
    give) when the archive's JSON names inputs the calibration arrays do not fit; nothing when it cannot tell."""
    from advisor.core.archive_inputs import exported_inputs

    handle.seek(0)
    inputs = exported_inputs(handle, archive_name)
    if inputs is not None:
        check_against_inputs(calibration, inputs)


def _store_inputs(incoming: Incoming, now) -> Artifact:  # noqa: ANN001
    stored, _ = incoming.commit()
    return _artifact_row(stored, now, kind="inputs", info=None)


def _store_calibration(incoming: Incoming, now) -> tuple[Artifact, CalibrationInfo]:  # noqa: ANN001
    """Check the calibration .npz from its zip directory and .npy headers (advisor.core.calibration: never unpickled,
    never expanded) before it is stored; a refused one leaves nothing in the store. Its arrays (CalibrationInfo) are
    then checked against an ExportedProgram's inputs as the model is stored (`_store_model`); a TorchScript model's
    are checked by the worker, after the inspection (as `analyze --local` does)."""
    size = incoming.size

    def check(source) -> CalibrationInfo:  # noqa: ANN001 - the local store's temp Path, or object storage's reader
        with opened(source) as handle:
            return check_stream(handle, size)

    try:
        stored, info = incoming.commit(check=check)
    except CalibrationRefused as exc:
        raise _calibration_refused(str(exc)) from None
    return _artifact_row(stored, now, kind="calibration", info=None), info


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
