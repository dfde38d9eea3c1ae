"""The API server application: `create_app(settings)` wires settings, database, store, queue and routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from sqlalchemy import Engine
from sqlmodel import Session

from advisor.core.calibration import MAX_CALIBRATION_BYTES
from app.admission import AdmissionLimiter, ClientShareLimiter, install_busy_handlers
from app.analyses import collect_orphans
from app.authorization import AuthorizeBeforeBody
from app.body_limits import BodySizeLimit
from app.db import create_db_engine, read_only_engine, upgrade_database
from app.host_check import LoopbackHostCheck
from app.job_queue import Clock, JobQueue, QueuePolicy, utcnow
from app.lingering import LingeringClose
from app.metrics import ServiceMetrics
from app.path_ids import PathIdRangeMiddleware
from app.routes import analyses, artifacts, jobs, limits, ops, suites, workers
from app.security_headers import SecurityHeaders
from app.service_errors import ServiceError, service_error_response
from app.settings import Settings, auth_mode, check_replica_settings, get_settings
from app.storage import ArtifactStorage, open_store

API_PREFIX = "/api/v1"
STATIC_DIR = Path(__file__).resolve().parent / "static"
log = logging.getLogger("npu_advisor.server")


def create_app(settings: Settings | None = None, *, clock: Clock = utcnow) -> FastAPI:
    """A ready app: migrations applied, leftovers of interrupted uploads removed, reaper started by lifespan."""
    settings = settings or get_settings()
    engine = _open_database(settings)
    store = _open_swept_store(engine, settings)
    queue = JobQueue(QueuePolicy.of(settings), clock=clock)

    app = FastAPIOffline(
        title="npu-advisor",
        version="0.1.0",
        summary="Measures whether a PyTorch model should use torch.compile (Inductor) or TorchAir, and says why.",
        lifespan=_lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.read_engine = read_only_engine(engine)  # GET requests: no write lock on SQLite (app.db)
    app.state.store = store
    app.state.queue = queue
    app.state.metrics = ServiceMetrics(app.state.read_engine)
    app.state.auth_mode = auth_mode(settings)

    for module in (analyses, suites, workers, jobs, artifacts, ops, limits):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(ops.root_router)
    app.add_api_route("/analyze", analyses.analyze, methods=["POST"], status_code=202, include_in_schema=False)
    _include_dashboard(app)

    app.add_exception_handler(ServiceError, service_error_response)  # the one code -> status table (service_errors)
    app.add_exception_handler(RequestValidationError, _validation_error)
    install_busy_handlers(app, settings.retry_after_s)
    _add_request_guards(app, settings)
    return app


def _open_database(settings: Settings) -> Engine:
    """The database engine, its migrations applied; several replicas need PostgreSQL (refused here otherwise)."""
    check_replica_settings(settings)  # several replicas: PostgreSQL, or a clear refusal here
    if settings.api_replicas > 1 and not settings.artifact_store:
        log.warning(
            "ADVISOR_API_REPLICAS=%s with the local artifact directory: every replica must see the same directory; "
            "set ADVISOR_ARTIFACT_STORE=s3://bucket/prefix otherwise",
            settings.api_replicas,
        )
    engine = create_db_engine(
        settings.resolved_database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout_s=settings.db_pool_timeout_s,
        write_wait_s=settings.db_write_wait_s,
        max_write_waiting=settings.db_max_write_waiting,
    )
    upgrade_database(engine)
    return engine


def _open_swept_store(engine: Engine, settings: Settings) -> ArtifactStorage:
    """The artifact store, with what interrupted uploads and failed submissions left removed."""
    store = open_store(settings)
    try:
        store.discard_incomplete()
        _collect_orphans(engine, store, settings)
    except Exception:  # noqa: BLE001 - object storage unreachable at start: serve anyway, /readyz says why
        if store.kind == "local":
            raise
        log.exception("artifact store %s: the start-up sweep failed; /readyz reports the store", store.describe())
    return store


def _add_request_guards(app: FastAPI, settings: Settings) -> None:
    """The middleware that answers before any handler: size, share and admission limits, authorization before the
    body, Host and id checks, lingering close and the security headers."""
    upload_paths = (f"{API_PREFIX}/analyze", "/analyze", "/upload")
    # before the body, innermost first: every body capped; a client's share; the caller decided; an open
    # loopback server's Host checked
    app.add_middleware(
        BodySizeLimit,
        paths=upload_paths,
        limit_bytes=settings.max_upload_bytes + settings.max_inputs_bytes + MAX_CALIBRATION_BYTES + (1 << 20),
    )
    app.add_middleware(  # one principal one client: after authorization named it (token id; address if anonymous)
        ClientShareLimiter,
        paths=upload_paths,
        per_client=settings.max_uploads_per_client,
        retry_after_s=settings.retry_after_s,
    )
    app.add_middleware(AuthorizeBeforeBody)
    app.add_middleware(LoopbackHostCheck)
    app.add_middleware(PathIdRangeMiddleware)  # ids outside int64: 404, before any handler converts them
    app.add_middleware(  # a saturated server sheds uploads before any other work (no thread, no DB)
        AdmissionLimiter,
        paths=upload_paths,
        max_concurrent=settings.max_concurrent_uploads,
        retry_after_s=settings.retry_after_s,
    )
    app.add_middleware(  # around everything: a refusal sent before the body was read is read by its client
        LingeringClose,
        linger_bytes=int(settings.refused_upload_linger_mb * 1024 * 1024),
        linger_s=settings.refused_upload_linger_s,
    )
    app.add_middleware(SecurityHeaders)  # CSP, framing refused, nosniff, referrer policy on every answer


def _include_dashboard(app: FastAPI) -> None:
    """The dashboard: server-rendered pages (app/web/pages.py, app/templates/) and their static files."""
    from app.web import pages

    app.include_router(pages.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    log.info(app.state.auth_mode.message)
    reaper = asyncio.create_task(_reap_forever(app), name="queue-reaper")
    try:
        yield
    finally:
        reaper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reaper
        app.state.engine.dispose()


async def _reap_forever(app: FastAPI) -> None:
    """Every reaper_interval_s: fail exhausted expired jobs, mark silent workers lost (queue.reap); every
    orphan_sweep_interval_s: remove stored files no artifact row refers to (analyses.collect_orphans)."""
    settings = app.state.settings
    last_sweep = time.monotonic()
    while True:
        await asyncio.sleep(settings.reaper_interval_s)
        if time.monotonic() - last_sweep >= settings.orphan_sweep_interval_s:
            last_sweep = time.monotonic()
            try:
                await run_in_threadpool(_collect_orphans, app.state.engine, app.state.store, settings)
                if app.state.store.kind != "local":  # a killed replica's multipart uploads (old enough: not ours)
                    await run_in_threadpool(app.state.store.discard_incomplete)
            except Exception:  # noqa: BLE001 - the sweep must not stop the reaper
                log.exception("orphan sweep failed; retrying at the next sweep")
        try:
            report = await run_in_threadpool(_reap_once, app)
            if report.failed or report.cancelled or report.lost_workers:
                log.info(
                    "reaper: failed %s, cancelled %s, lost workers %s",
                    report.failed,
                    report.cancelled,
                    report.lost_workers,
                )
        except Exception:  # noqa: BLE001 - the reaper must survive a transient DB error
            log.exception("reaper pass failed; retrying at the next interval")


def _collect_orphans(engine, store: ArtifactStorage, settings: Settings) -> None:  # noqa: ANN001
    with Session(read_only_engine(engine), expire_on_commit=False) as session:
        removed = collect_orphans(session, store, min_age_s=settings.orphan_min_age_s)
    if removed:
        log.info("removed %d stored files no analysis refers to (submissions that failed)", len(removed))


def _reap_once(app: FastAPI):  # noqa: ANN202
    with Session(app.state.engine, expire_on_commit=False) as session:
        return app.state.queue.reap(session)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    """422 as `{"detail": [{"field", "message"}]}`, the same shape as context errors."""
    problems = []
    for error in exc.errors():  # type: ignore[attr-defined]
        location = [str(part) for part in error.get("loc", ()) if part not in ("body", "query", "path", "header")]
        problems.append({"field": ".".join(location) or "request", "message": error.get("msg", "invalid")})
    return JSONResponse({"detail": problems}, status_code=422)
