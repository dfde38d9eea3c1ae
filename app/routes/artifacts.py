"""Artifact download for workers (and users): the file under its sha256."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

from app.deps import AnyRoleDep, StoreDep

router = APIRouter(tags=["artifacts"])


@router.get("/artifacts/{sha256}", response_class=FileResponse, summary="Download a stored model file")
def download(sha256: str, store: StoreDep, _: AnyRoleDep) -> FileResponse:
    if not store.exists(sha256):
        raise HTTPException(404, detail=f"no artifact with sha256 {sha256}")
    return FileResponse(store.path_for(sha256), media_type="application/octet-stream", filename=sha256)
