"""Operations: queue depth, liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from app.db import database_ready
from app.deps import QueueDep, SessionDep, UserDep

router = APIRouter(tags=["operations"])  # /api/v1/queue
root_router = APIRouter(tags=["operations"])  # /healthz, /readyz, /metrics


@router.get("/queue", summary="Jobs per state and device kind, and the oldest waiting job per kind")
def queue_depth(session: SessionDep, queue: QueueDep, _: UserDep) -> dict:
    return queue.depth(session)


@root_router.get("/healthz", summary="The process is up")
async def healthz() -> dict:
    """On the event loop itself (no thread, no database): it answers while the thread pool is saturated."""
    return {"status": "ok"}


@root_router.get("/readyz", summary="The database answers and is migrated")
async def readyz(request: Request) -> JSONResponse:
    ready, reason = await run_in_threadpool(database_ready, request.app.state.engine)
    return JSONResponse(
        {"status": "ready" if ready else "not ready", "reason": reason}, status_code=200 if ready else 503
    )


@root_router.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    body = await run_in_threadpool(request.app.state.metrics.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")
