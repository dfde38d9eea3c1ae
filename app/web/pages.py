"""The dashboard: server-rendered HTML pages (Jinja2, autoescaped) served by the API app.

Pages read through `app.web.queries` and the server's own `app.analyses`. Sign-in is a token kept in a
cookie (`app.cookie_auth`) that the API accepts too (`app.identity.identify`, with a same-origin
check on state-changing requests), so the upload form's script (web.js) and the report downloads call the
API directly. Cancel / re-decide / re-run, and the upload form without script, are plain form posts handled
here (they answer with a redirect back to a page, so they work without JavaScript) by the same service functions
the API's routes call (app.intake, app.analyses, app.analysis_actions); no route module is imported here.
Nothing here imports torch.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader
from sqlalchemy import select
from sqlmodel import Session

from advisor.core import claims, quantized
from advisor.core.context import ContextError, decode_json_value
from app.analyses import RerunRefused, analysis_view, job_of
from app.analysis_actions import ActionRefused, cancel_analysis, existing_analysis, owned_analysis, redecide_analysis
from app.auth import Principal, authenticate
from app.authorization import VIEWER_SCOPE_KEY
from app.clock import aware
from app.cookie_auth import (
    DASHBOARD_ROLES,
    WORKER_SIGN_IN_REFUSED,
    clear_token_cookie,
    safe_next,
    same_origin,
    same_origin_request,
    set_token_cookie,
    viewer,
)
from app.deps import QueueDep, SessionDep, SettingsDep, is_owner_or_admin
from app.intake import backend_choices
from app.job_queue import QueueError
from app.models import Analysis
from app.multipart_form import ReceivedForm
from app.path_ids import id_or_none
from app.storage import UploadTooLarge
from app.submitting import SubmittingDep
from app.suites import suite_summary, suite_tags
from app.web import queries
from app.web.charts import format_quantity
from app.web.compare import compare_rows
from app.web.detail_view import INDUCTOR_STATUS_TEXT, TORCHAIR_STATUS_TEXT, detail_view
from app.web.suite_view import suite_history_chart
from app.web.upload_form import context_form_fields

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
API = "/api/v1"
ACTING_ROLES = ("admin", "user")
FORMAT_NAMES = {"exported_program": "ExportedProgram", "torchscript": "TorchScript"}

router = APIRouter(include_in_schema=False)
# Autoescape every template: model names, reasons and evidence are user-controlled text.
templates = Jinja2Templates(env=Environment(loader=FileSystemLoader(TEMPLATES_DIR), autoescape=True))


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value or "")


def _plain(value: Any) -> str:
    """Nested values (evidence, break-even details) as compact JSON text; autoescaping still applies."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _duration(seconds: Any) -> str:
    """12 s, 4 min 05 s, 2 h 03 min."""
    if not isinstance(seconds, int | float):
        return "?"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


templates.env.filters["duration"] = _duration
templates.env.filters["quantity"] = lambda v: format_quantity(float(v)) if isinstance(v, int | float) else v
templates.env.filters["when"] = _when
templates.env.filters["plain"] = _plain
# a speedup's 95% interval in words and as a badge class, by the one rule for "faster" (advisor.core.claims)
templates.env.filters["verdict"] = claims.speedup_verdict
templates.env.filters["verdict_class"] = claims.verdict_class
templates.env.filters["bound"] = claims.fmt_bound
templates.env.filters["drift"] = lambda drift: quantized.drift_text(drift, None)  # an int8 row's drift vs its limits


def _page_viewer(request: Request, session: SessionDep) -> Principal:
    request.state.web_session = session  # the same per-request session the handler gets; see _end_transaction
    known = request.scope.get(VIEWER_SCOPE_KEY)  # decided before the body by app.authorization
    principal = known if isinstance(known, Principal) else viewer(request, session)
    if principal is None:
        raise HTTPException(status_code=303, headers={"Location": _login_url(request)})
    return principal


_page_viewer.signed_in_viewer = True  # type: ignore[attr-defined]  # the policy app.authorization reads


def _login_url(request: Request) -> str:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return "/login?" + urlencode({"next": target})


PageViewer = Annotated[Principal, Depends(_page_viewer)]


def _render(request: Request, template: str, who: Principal | None, status_code: int = 200, **context: Any):
    _end_transaction(request)
    base = {
        "viewer": who,
        "auth_required": request.app.state.auth_mode.required,
        "api": API,
        "active": None,
        "reload_on_done": False,
        "format_names": FORMAT_NAMES,
    }
    return templates.TemplateResponse(request, template, base | context, status_code=status_code)


def _end_transaction(request: Request) -> None:
    """End the page's read transaction before rendering (templates read only what the handler loaded)."""
    session = getattr(request.state, "web_session", None)
    if session is not None:
        session.commit()


def _acting(request: Request, who: Principal) -> None:
    """Actions need an admin/user principal and a post from our own pages (proven, when signed in by cookie)."""
    if not same_origin_request(request, require_proof=who.token_id is not None):
        raise HTTPException(403, detail="cross-site form post refused")
    if who.role not in ACTING_ROLES:
        raise HTTPException(403, detail=f"a {who.role} token cannot change analyses; sign in with a user token")


# ------------------------------------------------------------------ analyses list
LIST_COLUMNS = [
    ("id", "#", "num"),
    ("model_name", "Model", ""),
    (None, "Format", ""),
    ("target", "Target", ""),
    (None, "Stage", ""),
    (None, "Status", ""),
    ("backend", "Recommended", ""),
    ("speedup", "Speedup vs eager", "num"),
    ("submitter", "Submitted by", ""),
    ("created_at", "Submitted at", "num"),
]


@router.get("/", response_class=HTMLResponse)
def analyses_page(request: Request, session: SessionDep, queue: QueueDep, who: PageViewer) -> HTMLResponse:
    filters = queries.AnalysisFilters.from_query(dict(request.query_params))
    page = queries.list_analyses(session, queue, filters)

    def url(**changes: Any) -> str:
        query = urlencode(filters.as_query(**changes))
        return "/" + (f"?{query}" if query else "")

    def sort_url(key: str) -> str:
        same = filters.sort == key
        order = ("asc" if filters.order == "desc" else "desc") if same else ("asc" if key == "model_name" else "desc")
        return url(sort=key, order=order, page=1)

    first = (page.page - 1) * page.per_page + 1
    return _render(
        request,
        "analyses.html",
        who,
        active="analyses",
        rows=page.rows,
        total=page.total,
        page=page.page,
        pages=page.pages,
        first=first,
        last=first + len(page.rows) - 1,
        filters=filters,
        columns=LIST_COLUMNS,
        options={
            "statuses": queries.ANALYSIS_STATUSES,
            "targets": queries.TARGETS,
            "backends": queries.recommended_backends(session),
        },
        sort_url=sort_url,
        page_url=lambda n: url(page=n),
    )


@router.get("/web/progress")
def progress(request: Request, session: SessionDep, ids: str = "") -> JSONResponse:
    """{id: {status, stage, progress, measured}} for the pages' live-progress poller (app.web.queries)."""
    if viewer(request, session) is None:
        return JSONResponse({"detail": "sign in first"}, status_code=401)
    wanted = [i for part in ids.split(",")[:200] if (i := id_or_none(part)) is not None]
    return JSONResponse({str(k): v for k, v in queries.analysis_states(session, wanted).items()})


# ------------------------------------------------------------------ detail
def _analysis_dict(session: Session, queue: Any, analysis_id: int) -> dict[str, Any]:
    analysis = session.get(Analysis, analysis_id)
    if analysis is None:
        raise HTTPException(404, detail=f"analysis {analysis_id} does not exist")
    # the API's shape (app.models.AnalysisDetail) as the page's dict: only what was stored or set
    return analysis_view(session, queue, analysis, job_of(session, analysis_id)).model_dump(exclude_unset=True)


@router.get("/analyses/{analysis_id}", response_class=HTMLResponse)
def detail_page(
    request: Request, analysis_id: int, session: SessionDep, queue: QueueDep, who: PageViewer
) -> HTMLResponse:
    data = _analysis_dict(session, queue, analysis_id)
    view = detail_view(data)
    return _render(
        request,
        "detail.html",
        who,
        active="analyses",
        view=view,
        reload_on_done=not view.terminal,
        # as the poller's `measured` (app.web.queries.analysis_states) reads it: a ranking or results are stored
        measured=session.get(Analysis, analysis_id).measurements is not None,
        # buttons only for those who may use them: users act on their own analyses, admins on any
        can_act=who.role in ACTING_ROLES and is_owner_or_admin(who, str(data.get("submitted_by"))),
        inductor_text=INDUCTOR_STATUS_TEXT,
        torchair_text=TORCHAIR_STATUS_TEXT,
    )


@router.post("/analyses/{analysis_id}/{action}")
def act(
    request: Request,
    analysis_id: int,
    action: str,
    submitting: SubmittingDep,
    who: PageViewer,
) -> RedirectResponse:
    """Cancel / re-decide / re-run (the API's own functions), then back to the analysis (the new one after a re-run).
    Users cancel and re-run only their own analyses; admins any."""
    _acting(request, who)
    if action not in ("cancel", "redecide", "rerun"):
        raise HTTPException(404, detail=f"unknown action {action!r}")
    session, queue = submitting.session, submitting.queue
    try:
        if action == "cancel":
            cancel_analysis(session, queue, owned_analysis(session, who, analysis_id, "cancel"))
        elif action == "redecide":
            redecide_analysis(session, queue, existing_analysis(session, analysis_id))
        else:
            owned_analysis(session, who, analysis_id, "re-run")
            submission = submitting.rerun(analysis_id, who)
            analysis_id = int(submission.analysis.id)
    except (ActionRefused, RerunRefused) as exc:
        raise HTTPException(exc.status_code, detail=str(exc)) from None
    return RedirectResponse(f"/analyses/{analysis_id}", status_code=303)


# ------------------------------------------------------------------ compare
@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    session: SessionDep,
    queue: QueueDep,
    who: PageViewer,
    a: Annotated[str | None, Query()] = None,
    b: Annotated[str | None, Query()] = None,
) -> HTMLResponse:
    ids = [id_or_none(v) for v in (a, b)]
    missing = [f"#{v}" for v in ids if v is not None and session.get(Analysis, v) is None]
    first, second = (_analysis_dict(session, queue, v) if v is not None and not missing else None for v in ids)
    rows = compare_rows(first, second) if first and second else []
    recent = session.execute(select(Analysis.id, Analysis.model_name).order_by(Analysis.id.desc()).limit(20)).all()
    return _render(
        request,
        "compare.html",
        who,
        active="compare",
        a=first,
        b=second,
        ids=ids,
        rows=rows,
        missing=missing,
        recent=recent,
    )


# ------------------------------------------------------------------ model suites
@router.get("/suites", response_class=HTMLResponse)
def suites_page(request: Request, session: SessionDep, who: PageViewer) -> HTMLResponse:
    return _render(request, "suites.html", who, active="suites", suites=suite_tags(session))


@router.get("/suites/{tag}", response_class=HTMLResponse)
def suite_page(request: Request, tag: str, session: SessionDep, who: PageViewer) -> HTMLResponse:
    summary = suite_summary(session, tag)
    if summary is None:
        raise HTTPException(404, detail=f"no analysis has the tag {tag!r}")
    return _render(request, "suite.html", who, active="suites", suite=summary, chart=suite_history_chart(summary))


# ------------------------------------------------------------------ queue and workers
@router.get("/queue", response_class=HTMLResponse)
def queue_page(request: Request, session: SessionDep, queue: QueueDep, settings: SettingsDep, who: PageViewer):
    now = queue.clock()
    overview = queries.queue_overview(
        session, depth=queue.depth(session), now=aware(now), lost_after_s=settings.worker_lost_after_s
    )
    kinds = sorted({kind for counts in overview.by_state.values() for kind in counts})
    return _render(request, "queue.html", who, active="queue", overview=overview, kinds=kinds, now=now)


# ------------------------------------------------------------------ upload
@router.get("/upload", response_class=HTMLResponse)
def upload_page(request: Request, who: PageViewer) -> HTMLResponse:
    return _render(request, "upload.html", who, active="upload", fields=context_form_fields(), **_backend_help())


def _backend_help() -> dict[str, list[str]]:
    """The names the form's `backends` field takes, from the intake's own list (app.intake.backend_choices): the
    backends, and the int8 modes measured only when named."""
    choices = backend_choices()
    return {"backends": [c for c in choices if ":" not in c], "int8_modes": [c for c in choices if ":" in c]}


@router.post("/upload")
async def upload_post(request: Request, submitting: SubmittingDep, who: PageViewer) -> Response:
    """The upload form without JavaScript: fold its `ctx.*` fields into `context` as web.js does, then submit
    through the intake the API uses (app.intake: same limits, checks and dedup); to the analysis, or the form with
    errors."""
    _acting(request, who)
    fields = context_form_fields()
    entered: dict[str, str] = {}

    def prepare(form: ReceivedForm) -> None:
        entered.update(form.fields)
        for name in (
            "model",
            "inputs",
            "calibration",
        ):  # a browser sends an empty, unnamed part for a file input left empty
            incoming = form.files.get(name)
            if incoming is not None and incoming.size == 0 and not form.filenames.get(name):
                incoming.discard()
                del form.files[name]
        form.fields["context"] = json.dumps(fold_context(form.fields, fields))

    try:
        submission = await submitting.receive(
            request, who, prepare=prepare, max_parts=7 + len(fields)
        )  # model, inputs, calibration, model_name, tag, backends, force and one part per context field
    except HTTPException as exc:
        return _upload_errors(request, who, fields, entered, exc.status_code, exc.detail)
    except (UploadTooLarge, QueueError) as exc:
        return _upload_errors(request, who, fields, entered, getattr(exc, "status_code", 413), str(exc))
    return RedirectResponse(f"/analyses/{submission.analysis.id}", status_code=303)


def _upload_errors(
    request: Request, who: Principal, fields: list, entered: dict[str, str], status_code: int, detail: Any
) -> HTMLResponse:
    """The form again, with each {field, message} next to its field (as web.js places the API's) and the rest on top."""
    placeable = {f.name for f in fields} | {"model", "model_name", "tag", "inputs", "backends", "calibration"}
    errors: dict[str, str] = {}
    unplaced: list[str] = []
    if isinstance(detail, list):
        summary = "Fix the fields marked below."
        for problem in detail:
            field = str(problem.get("field") or "") if isinstance(problem, dict) else ""
            text = str(problem.get("message", problem)) if isinstance(problem, dict) else str(problem)
            key = field.removeprefix("context.").split(".")[0]
            if key in placeable:
                errors[key] = f"{errors[key]} {text}" if key in errors else text
            else:
                unplaced.append(f"{field or 'form'}: {text}")
    else:
        summary = str(detail)
    files_note = "Files are not kept: choose the model file (and the inputs and calibration files) again."
    return _render(
        request,
        "upload.html",
        who,
        status_code=status_code,
        active="upload",
        fields=fields,
        errors=errors,
        form_error=" ".join([summary, *unplaced, files_note]),
        values=entered,
        **_backend_help(),
    )


def fold_context(values: dict[str, str], fields: list) -> dict[str, Any]:
    """The `ctx.<name>` form fields as the context dict web.js builds (contextFromForm): an empty field is left
    out (its default applies), a checkbox is true when sent, numbers are numbers, JSON fields are parsed.
    Raises a 422 naming every field that is not a number / not JSON."""
    context: dict[str, Any] = {}
    problems: list[dict[str, str]] = []
    for f in fields:
        if f.kind == "checkbox":
            context[f.name] = f.input_name in values
            continue
        raw = values.get(f.input_name, "").strip()
        if raw == "":
            continue
        if f.kind in ("integer", "number"):
            try:
                number = float(raw)
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                problems.append({"field": f.name, "message": "not a number"})
            else:
                context[f.name] = int(number) if number.is_integer() and f.kind == "integer" else number
        elif f.kind == "jsonl" and not raw.startswith("["):
            context[f.name] = raw  # JSON Lines of calls: the context's validator aggregates them
        elif f.kind in ("json", "jsonl"):
            try:
                context[f.name] = decode_json_value(raw, field=f.name)
            except ContextError as exc:
                problems.extend(exc.errors)
        else:
            context[f.name] = raw
    if problems:
        raise HTTPException(422, detail=problems)
    return context


# ------------------------------------------------------------------ sign-in
@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/") -> HTMLResponse:  # noqa: A002 - the query parameter's name
    return _render(request, "login.html", None, next=safe_next(next), error=None)


@router.post("/login")
async def login(request: Request, session: SessionDep) -> Response:
    """Sign in with a user or admin token (never a worker's), from this server's own sign-in page only."""
    if not same_origin(request):  # a foreign page must not sign the browser in (login CSRF)
        error = "Cross-site sign-in refused: sign in from this server's own /login page."
        return _render(request, "login.html", None, status_code=403, next="/", error=error)
    form = await request.form(max_files=0, max_fields=8)  # the body is capped at 16 KiB (app.body_limits)
    token, target = str(form.get("token") or "").strip(), safe_next(str(form.get("next") or "/"))
    now = request.app.state.queue.clock()
    principal = await run_in_threadpool(authenticate, session, token, now=now) if token else None
    if principal is None:
        error = "That token is unknown or revoked. An admin creates one with `npu-advisor token create --role user`."
        return _render(request, "login.html", None, status_code=401, next=target, error=error)
    if principal.role not in DASHBOARD_ROLES:
        return _render(request, "login.html", None, status_code=403, next=target, error=WORKER_SIGN_IN_REFUSED)
    response = RedirectResponse(target, status_code=303)
    set_token_cookie(response, token, secure=request.url.scheme == "https")
    return response


@router.post("/logout")
def logout(request: Request) -> Response:
    if not same_origin(request):
        raise HTTPException(403, detail="cross-site form post refused")
    response = RedirectResponse("/login" if request.app.state.auth_mode.required else "/", status_code=303)
    clear_token_cookie(response)
    return response
