"""Operations: queue depth, liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from sqlmodel import Session

from app.db import database_ready
from app.deps import QueueDep, SessionDep, UserDep
from app.identity import identify

router = APIRouter(tags=["operations"])  # /api/v1/queue
root_router = APIRouter(tags=["operations"])  # /healthz, /readyz, /metrics


@router.get("/queue", summary="Jobs per state and device kind, and the oldest waiting job per kind")
def queue_depth(session: SessionDep, queue: QueueDep, _: UserDep) -> dict:
    return queue.depth(session)


@root_router.get("/healthz", summary="The process is up")
async def healthz() -> dict:
    """On the event loop itself (no thread, no database): it answers while the thread pool is saturated."""
    return {"status": "ok"}


@root_router.get("/readyz", summary="The database answers and is migrated; the artifact store is reachable")
async def readyz(request: Request) -> JSONResponse:
    """Anyone: `status` ready or not (200 / 503) and which of `database` and `store` is. An admin (an admin token, or
    the anonymous admin of an open server) also reads what was checked - the store's location, the database's
    revision - and `reason`, the first problem; nobody else learns the deployment's layout from a probe."""
    ready, reason = await run_in_threadpool(database_ready, request.app.state.engine)
    store_ready, store_reason = await run_in_threadpool(store_ready_check, request.app.state.store)
    status = 200 if ready and store_ready else 503
    body: dict = {
        "status": "ready" if ready and store_ready else "not ready",
        "database": {"ready": ready},
        "store": {"ready": store_ready},
    }
    if await run_in_threadpool(_is_admin, request):
        body["reason"] = reason if not ready or store_ready else store_reason
        body["database"]["detail"] = reason
        body["store"] |= {"kind": request.app.state.store.kind, "detail": store_reason}
    return JSONResponse(body, status_code=status)


def _is_admin(request: Request) -> bool:
    """The caller is an admin (`app.deps.identify`); a missing, unknown or refused credential, or a database that
    cannot look it up, is simply not one: a probe is never refused."""
    state = request.app.state
    try:
        with Session(state.read_engine, expire_on_commit=False) as session:
            return identify(request, session, now=state.queue.clock()).role == "admin"
    except HTTPException:
        return False
    except Exception:  # noqa: BLE001 - the database is down: /readyz says so, to anyone
        return False


def store_ready_check(store) -> tuple[bool, str]:  # noqa: ANN001
    """(ready, detail) of the artifact store: the directory is writable, or the bucket answers."""
    try:
        store.check_ready()
    except Exception as exc:  # noqa: BLE001 - any client error means "not ready", with its text
        return False, f"artifact store {store.describe()} unreachable: {type(exc).__name__}: {exc}"
    return True, f"artifact store {store.describe()}"


@root_router.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    body = await run_in_threadpool(request.app.state.metrics.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
