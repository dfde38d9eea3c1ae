"""Artifact download for workers (and users): the file under its sha256.

A worker token gets only the files of the jobs it holds a live lease on; for any other sha256 it gets the same 404
as for a file that does not exist, so it learns nothing about what is stored. Users and admins download any.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

from app.deps import AnyRoleDep, QueueDep, SessionDep, StoreDep, actor_of

router = APIRouter(tags=["artifacts"])


@router.get("/artifacts/{sha256}", response_class=FileResponse, summary="Download a stored model file")
def download(sha256: str, store: StoreDep, session: SessionDep, queue: QueueDep, who: AnyRoleDep) -> FileResponse:
    held = who.role != "worker" or queue.holds_live_lease(session, actor_of(who), sha256=sha256)
    if not held or not store.exists(sha256):
        raise HTTPException(404, detail=f"no artifact with sha256 {sha256}")
    return FileResponse(store.path_for(sha256), media_type="application/octet-stream", filename=sha256)
