"""Saturation answers: 503 / 429 with Retry-After instead of a 500 or a hang.

`AdmissionLimiter` (ASGI middleware, before any other work: no thread, no database) lets at most `max_concurrent`
uploads be received at once; beyond that the request is refused with 503 before a byte of its body is read.
`ClientShareLimiter` sits just after `app.authorization.AuthorizeBeforeBody` and lets at most `per_client` uploads of
one client be received at once, 429 beyond: a client is the principal authorization decided - its token's id, however
the `Authorization` header spells the token, and the same id for the dashboard's sign-in cookie - and only an
anonymous caller (an open server) is counted by its address. Every refused client reads that answer and its
Retry-After, also one still sending its body: a small body (declared, up to DRAIN_BYTES) is read and dropped first and
the answer keeps the connection; any other body is answered at once (`Connection: close`) and then read and dropped
while the client keeps sending by `app.lingering.LingeringClose` (nginx's lingering close, bounded in bytes and time),
as every other refusal is.

The exception handlers map a database that is busy (`app.db.DatabaseBusy`: the SQLite write gate could not be had
in time; sqlalchemy's OperationalError, e.g. "database is locked"; the pool's
TimeoutError) to 503 with Retry-After. The CLI, the SDK (advisor.cli.client) and workers wait and retry.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth import Principal
from app.authorization import PRINCIPAL_SCOPE_KEY, VIEWER_SCOPE_KEY
from app.db import DatabaseBusy
from app.lingering import drain
from app.service_errors import ErrorCode, http_status

log = logging.getLogger("npu_advisor.server")
DRAIN_BYTES = 1 << 20  # a refused upload's body up to this size is read (and dropped) before the answer
DRAIN_TIMEOUT_S = 10.0


class AdmissionLimiter:
    """At most `max_concurrent` uploads (POST to `paths`) received at once; more: 503 before the body."""

    def __init__(self, app: ASGIApp, *, paths: tuple[str, ...], max_concurrent: int, retry_after_s: int) -> None:
        self.app = app
        self.paths = frozenset(paths)
        self.max_concurrent = max_concurrent
        self.retry_after_s = retry_after_s
        self.active = 0  # one event loop: no lock needed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not _is_upload(scope, self.paths):
            await self.app(scope, receive, send)
            return
        if self.active >= self.max_concurrent:
            why = f"the server is receiving {self.active} uploads, its limit (ADVISOR_MAX_CONCURRENT_UPLOADS)"
            await refuse(scope, receive, send, 503, why, self.retry_after_s)
            return
        self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1


class ClientShareLimiter:
    """At most `per_client` uploads of one client (`client_key`) received at once; more: 429 before the body.

    Runs after authorization, which left the caller's principal in the scope (0: no per-client cap)."""

    def __init__(self, app: ASGIApp, *, paths: tuple[str, ...], per_client: int, retry_after_s: int) -> None:
        self.app = app
        self.paths = frozenset(paths)
        self.per_client = per_client
        self.retry_after_s = retry_after_s
        self.by_client: Counter[str] = Counter()  # one event loop: no lock needed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (self.per_client and _is_upload(scope, self.paths)):
            await self.app(scope, receive, send)
            return
        client = client_key(scope)
        if self.by_client[client] >= self.per_client:
            why = (
                f"this client already has {self.by_client[client]} uploads in progress, its limit "
                "(ADVISOR_MAX_UPLOADS_PER_CLIENT)"
            )
            await refuse(scope, receive, send, 429, why, self.retry_after_s)
            return
        self.by_client[client] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.by_client[client] -= 1
            if self.by_client[client] <= 0:
                del self.by_client[client]


def _is_upload(scope: Scope, paths: frozenset[str]) -> bool:
    return scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in paths


def client_key(scope: Scope) -> str:
    """The client an upload counts against: the authenticated token's id (API bearer token or dashboard cookie, as
    `app.authorization` decided it), else - anonymous - the caller's address."""
    for key in (PRINCIPAL_SCOPE_KEY, VIEWER_SCOPE_KEY):
        principal = scope.get(key)
        if isinstance(principal, Principal) and principal.token_id is not None:
            return f"token:{principal.token_id}"
    client = scope.get("client")
    return f"address:{client[0] if client else '?'}"


async def refuse(scope: Scope, receive: Receive, send: Send, status: int, why: str, retry_after_s: int) -> None:
    """The refusal, read by the client whatever it is still sending (see the module docstring).

    Closing a connection with unread bytes resets it, and a client still sending then gets `Broken pipe`
    (or `Connection reset`) instead of this answer. So: a small declared body is drained first and the
    connection kept; any other body gets the answer at once, drained (bounded) by `LingeringClose` before the
    close."""
    body = json.dumps({"detail": f"{why}; retry after {retry_after_s} s"}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"retry-after", str(retry_after_s).encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    declared = dict(scope["headers"]).get(b"content-length", b"")
    if declared.isdigit() and int(declared) <= DRAIN_BYTES:
        try:
            await asyncio.wait_for(drain(receive, DRAIN_BYTES), DRAIN_TIMEOUT_S)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        except TimeoutError:
            pass  # a client that stopped sending: answer now and close (below)
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def install_busy_handlers(app: FastAPI, retry_after_s: int) -> None:
    """A busy database is a 503 with Retry-After, never a 500."""

    async def busy(_request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, DatabaseBusy):
            log.warning("database busy: %s: %s", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        reason = str(exc) if isinstance(exc, DatabaseBusy) else "the database is busy or unreachable"
        return JSONResponse(
            {"detail": f"{reason}; retry after {retry_after_s} s"},
            status_code=http_status(ErrorCode.BUSY),
            headers={"Retry-After": str(retry_after_s)},
        )

    for kind in (DatabaseBusy, OperationalError, PoolTimeout):
        app.add_exception_handler(kind, busy)
