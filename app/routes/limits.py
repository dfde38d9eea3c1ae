"""What the server takes: the per-file upload caps, so a client can refuse an oversized file before sending a byte.

The body-size middleware (app.body_limits) answers a declared length over the cap with 413 at once, but an HTTP/1.1
client without `Expect: 100-continue` (httpx, the CLI's client) sends the whole body before it reads that answer:
a 4.5 GB model used to stream ~4.3 GB first. The CLI asks here and stops at once.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from advisor.core.calibration import MAX_CALIBRATION_BYTES
from app.deps import UserDep

router = APIRouter(tags=["operations"])


class UploadLimits(BaseModel):
    model_bytes: int
    inputs_bytes: int
    calibration_bytes: int


@router.get("/limits", response_model=UploadLimits, summary="The largest model, inputs and calibration file taken")
def upload_limits(request: Request, _: UserDep) -> UploadLimits:
    settings = request.app.state.settings
    return UploadLimits(
        model_bytes=settings.max_upload_bytes,
        inputs_bytes=settings.max_inputs_bytes,
        calibration_bytes=MAX_CALIBRATION_BYTES,
    )
