"""Every request body capped, counted as it arrives: `BodySizeLimit`, the ASGI middleware in front of the routes.

A declared `Content-Length` over the path's cap is a 413 at once; a body without one (chunked) is counted as it is
received and stopped with 413 at the first byte over - counted over the whole body, however it is split. Caps: the
uploads (`paths`, `limit_bytes`); worker results (`POST /api/v1/jobs/{id}/complete` and `.../ranked`) 16 MiB;
`/login` 16 KiB; any other body 1 MiB (`settings.max_results_mb` / `settings.max_json_mb` when the settings have
them). It runs after `app.authorization` (a caller refused there never gets this far) and before the app reads a byte.
"""

from __future__ import annotations

import re

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.early_answers import send_json
from app.http_middleware import HttpMiddleware
from app.service_errors import ErrorCode, http_status
from app.storage import UploadTooLarge

KIB = 1024
MIB = 1024 * KIB
JSON_LIMIT_BYTES = 1 * MIB
RESULTS_LIMIT_BYTES = 16 * MIB
LOGIN_LIMIT_BYTES = 16 * KIB
RESULTS_PATH = re.compile(r"/api/v1/jobs/[^/]+/(complete|ranked)")


class BodyTooLarge(HTTPException):
    """Raised from `receive` at the first byte over the cap; routes answer it as a 413 (FastAPI re-raises it)."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(
            status_code=http_status(ErrorCode.TOO_LARGE),
            detail=too_large_message(limit_bytes),
            headers={"Connection": "close"},
        )
        self.limit_bytes = limit_bytes


class BodySizeLimit(HttpMiddleware):
    """ASGI middleware: the caps above. `paths`/`limit_bytes`: the upload endpoints and their cap."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        paths: tuple[str, ...] = (),
        limit_bytes: int = 0,
        json_limit_bytes: int | None = None,
        results_limit_bytes: int | None = None,
        login_limit_bytes: int = LOGIN_LIMIT_BYTES,
    ) -> None:
        super().__init__(app)
        self.paths = frozenset(paths)
        self.limit_bytes = limit_bytes
        self.json_limit_bytes = json_limit_bytes
        self.results_limit_bytes = results_limit_bytes
        self.login_limit_bytes = login_limit_bytes

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self._limit_for(scope)
        declared = next((value for name, value in scope["headers"] if name.lower() == b"content-length"), None)
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await send_json(send, 413, {"detail": too_large_message(limit), "limit_bytes": limit}, close=True)
            return
        await self._call_counting(scope, receive, send, limit)

    def _limit_for(self, scope: Scope) -> int:
        path, settings = scope["path"], getattr(scope["app"].state, "settings", None)
        if scope["method"] == "POST" and path in self.paths:
            return self.limit_bytes
        if path == "/login":
            return self.login_limit_bytes
        if RESULTS_PATH.fullmatch(path):
            return self.results_limit_bytes or _setting_bytes(settings, "max_results_mb", RESULTS_LIMIT_BYTES)
        return self.json_limit_bytes or _setting_bytes(settings, "max_json_mb", JSON_LIMIT_BYTES)

    async def _call_counting(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        received = 0
        started = False

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except BodyTooLarge as exc:  # escaped the app's own handlers (they answer it as a 413 themselves)
            if started:
                raise
            await send_json(send, 413, {"detail": exc.detail, "limit_bytes": exc.limit_bytes}, close=True)


def _setting_bytes(settings: object, name: str, default: int) -> int:
    value = getattr(settings, name, None)
    return int(value * MIB) if isinstance(value, int | float) and value > 0 else default


def too_large_message(limit_bytes: int) -> str:
    return str(UploadTooLarge(limit_bytes, "the request"))
