"""The service's errors: one base (`ServiceError`) that carries an `ErrorCode`, and the one table from a code to the
HTTP status the API answers with, read at the edge (`service_error_response`, installed by app.main).

Domain code raises what went wrong (`JobNotFound`, `StaleLease`, `UploadTooLarge`, ...) with its code; it never
names an HTTP status. The edge turns any ServiceError into `{"detail": ...}` (plus the error's own fields, such as
`limit_bytes`) with the status `HTTP_STATUS` gives its code, as MLflow's tracking server maps its `ErrorCode`s.
The torch-free core's refusals of an uploaded file (`advisor.core.artifacts.ArtifactRejected`, whose `.code` is a
slug such as `zip_bomb`) are answered through the same table (`refusal_status`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the domain modules import this one: no web framework at import time
    from starlette.requests import Request
    from starlette.responses import JSONResponse


class ErrorCode(StrEnum):
    NOT_FOUND = "not_found"  # no such job, worker, analysis
    FORBIDDEN = "forbidden"  # a worker token acting for a worker another token registered
    CONFLICT = "conflict"  # the state does not allow it now (a transition, an action, a re-run)
    LEASE_LOST = "lease_lost"  # the caller's lease no longer owns the job: stop, do not upload
    INVALID = "invalid"  # a worker's results that are not the documented shape, possible or the job's
    TOO_LARGE = "too_large"  # an upload or body over its cap
    UNSUPPORTED_FILE = "unsupported_file"  # a file that is not a model the server accepts
    UNSAFE_FILE = "unsafe_file"  # a model archive refused for what is inside it
    BUSY = "busy"  # the database stayed busy; retry after a while
    MISCONFIGURED = "misconfigured"  # settings the service cannot run with


HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.CONFLICT: 409,
    ErrorCode.LEASE_LOST: 409,
    ErrorCode.INVALID: 422,
    ErrorCode.TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_FILE: 415,
    ErrorCode.UNSAFE_FILE: 422,
    ErrorCode.BUSY: 503,
    ErrorCode.MISCONFIGURED: 500,
}

# advisor.core.artifacts' refusal slugs (the message names the entry and the limit); any other: UNSUPPORTED_FILE
ARTIFACT_REFUSALS: dict[str, ErrorCode] = {
    "zip_bomb": ErrorCode.TOO_LARGE,
    "metadata_too_large": ErrorCode.TOO_LARGE,
    "compression_ratio": ErrorCode.TOO_LARGE,
    "unsafe_path": ErrorCode.UNSAFE_FILE,
    "native_code": ErrorCode.UNSAFE_FILE,
    "denied_op": ErrorCode.UNSAFE_FILE,  # advisor/core/denied_ops.py: an op that touches files or the process
    "nested_code": ErrorCode.UNSAFE_FILE,
    "unreadable_code": ErrorCode.UNSAFE_FILE,
    "forged_directory": ErrorCode.UNSAFE_FILE,
    "truncated": ErrorCode.UNSAFE_FILE,
    "encrypted": ErrorCode.UNSAFE_FILE,
    "unsupported_compression": ErrorCode.UNSAFE_FILE,
}


def http_status(code: ErrorCode) -> int:
    return HTTP_STATUS[code]


def refusal_status(artifact_code: str) -> int:
    """The HTTP status of an uploaded file refused by advisor.core.artifacts with the slug `artifact_code`."""
    return http_status(ARTIFACT_REFUSALS.get(artifact_code, ErrorCode.UNSUPPORTED_FILE))


class ServiceError(Exception):
    """The base of the service's errors. `code` (the class's, or one given) says what went wrong; the edge reads
    its HTTP status from `HTTP_STATUS`. `detail` is what the answer's `detail` holds (the message by default)."""

    code: ErrorCode = ErrorCode.CONFLICT

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def status_code(self) -> int:
        """The HTTP status of this error's code (for the pages that render it themselves)."""
        return http_status(self.code)

    @property
    def detail(self) -> Any:
        return str(self)

    def extra(self) -> dict[str, Any]:
        """Fields the answer carries besides `detail` (none by default)."""
        return {}


async def service_error_response(_request: Request, exc: Exception) -> JSONResponse:
    """The edge: any ServiceError as `{"detail": ..., **extra}` with its code's HTTP status."""
    from starlette.responses import JSONResponse

    if not isinstance(exc, ServiceError):
        raise exc
    return JSONResponse({"detail": exc.detail, **exc.extra()}, status_code=exc.status_code)
