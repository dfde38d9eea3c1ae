"""Saturation answers: 503 / 429 with Retry-After instead of a 500 or a hang.

`AdmissionLimiter` (ASGI middleware) lets at most `max_concurrent` uploads be received at once, and at
most `per_client` of them from one client (its bearer token, else its address); beyond that the request
is refused before a byte of its body is read: 503 when the server is full, 429 when this client holds its
share. The exception handlers map a database that is busy (`app.db.DatabaseBusy`: the SQLite write gate
could not be had in time; sqlalchemy's OperationalError, e.g. "database is locked"; the pool's
TimeoutError) to 503 with Retry-After. The CLI, the SDK (advisor.cli.client) and workers wait and retry.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.types import ASGIApp, Receive, Scope, Send

from app.db import DatabaseBusy

log = logging.getLogger("npu_advisor.server")
DRAIN_BYTES = 1 << 20  # a refused upload's body up to this size is read (and dropped) before the answer
DRAIN_TIMEOUT_S = 10.0


class AdmissionLimiter:
    def __init__(
        self, app: ASGIApp, *, paths: tuple[str, ...], max_concurrent: int, per_client: int, retry_after_s: int
    ) -> None:
        self.app = app
        self.paths = frozenset(paths)
        self.max_concurrent = max_concurrent
        self.per_client = per_client
        self.retry_after_s = retry_after_s
        self.active = 0  # one event loop: no lock needed
        self.by_client: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.paths):
            await self.app(scope, receive, send)
            return
        client = _client_key(scope)
        if self.active >= self.max_concurrent:
            why = f"the server is receiving {self.active} uploads, its limit (ADVISOR_MAX_CONCURRENT_UPLOADS)"
            await self._refuse(scope, receive, send, 503, why)
            return
        if self.per_client and self.by_client[client] >= self.per_client:
            why = (
                f"this client already has {self.by_client[client]} uploads in progress, its limit "
                "(ADVISOR_MAX_UPLOADS_PER_CLIENT)"
            )
            await self._refuse(scope, receive, send, 429, why)
            return
        self.active += 1
        self.by_client[client] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.active -= 1
            self.by_client[client] -= 1
            if self.by_client[client] <= 0:
                del self.by_client[client]

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, status: int, why: str) -> None:
        """The refusal, after reading and dropping a small body (up to DRAIN_BYTES): closing a connection with
        unread bytes resets it, and the client may then never see this answer. A larger or chunked body is
        not read: the answer carries `Connection: close`."""
        declared = dict(scope["headers"]).get(b"content-length", b"")
        drain = declared.isdigit() and int(declared) <= DRAIN_BYTES
        if drain:
            try:
                await asyncio.wait_for(_drain(receive), DRAIN_TIMEOUT_S)
            except TimeoutError:
                drain = False
        headers = [(b"content-type", b"application/json"), (b"retry-after", str(self.retry_after_s).encode())]
        if not drain:
            headers.append((b"connection", b"close"))
        body = json.dumps({"detail": f"{why}; retry after {self.retry_after_s} s"}).encode()
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _drain(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


def _client_key(scope: Scope) -> str:
    """The client an upload counts against: its bearer token (hashed), else its address."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return "token:" + hashlib.sha256(value).hexdigest()[:16]
    client = scope.get("client")
    return f"address:{client[0] if client else '?'}"


def install_busy_handlers(app: FastAPI, retry_after_s: int) -> None:
    """A busy database is a 503 with Retry-After, never a 500."""

    async def busy(_request: Request, exc: Exception) -> JSONResponse:
        if not isinstance(exc, DatabaseBusy):
            log.warning("database busy: %s: %s", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        reason = str(exc) if isinstance(exc, DatabaseBusy) else "the database is busy or unreachable"
        return JSONResponse(
            {"detail": f"{reason}; retry after {retry_after_s} s"},
            status_code=503,
            headers={"Retry-After": str(retry_after_s)},
        )

    for kind in (DatabaseBusy, OperationalError, PoolTimeout):
        app.add_exception_handler(kind, busy)
