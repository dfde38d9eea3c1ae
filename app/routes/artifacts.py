"""Artifact download for workers (and users): the file under its sha256.

A worker token gets only the files of the jobs it holds a live lease on; for any other sha256 it gets the same 404
as for a file that does not exist, so it learns nothing about what is stored. Users and admins download any.
With object storage (app.object_store) workers fetch from the store through the presigned URL of their job instead;
this route then streams the object from the store.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, Response, StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from app.deps import AnyRoleDep, QueueDep, SessionDep, StoreDep, actor_of
from app.storage import ArtifactStorage

router = APIRouter(tags=["artifacts"])


@router.get("/artifacts/{sha256}", response_class=FileResponse, summary="Download a stored model file")
def download(sha256: str, store: StoreDep, session: SessionDep, queue: QueueDep, who: AnyRoleDep) -> Response:
    held = who.role != "worker" or queue.holds_live_lease(session, actor_of(who), sha256=sha256)
    if not held or not store.exists(sha256):
        raise HTTPException(404, detail=f"no artifact with sha256 {sha256}")
    return stored_file_response(store, sha256, filename=sha256)


def stored_file_response(store: ArtifactStorage, sha256: str, *, filename: str | None = None) -> Response:
    """The stored file: sent from disk (the local store) or streamed from object storage."""
    path_for = getattr(store, "path_for", None)
    if path_for is not None:
        return FileResponse(path_for(sha256), media_type="application/octet-stream", filename=filename)
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'} if filename else None
    chunks = iterate_in_threadpool(store.iter_bytes(sha256))  # type: ignore[attr-defined]
    return StreamingResponse(chunks, media_type="application/octet-stream", headers=headers)
