"""Answers sent by the ASGI middlewares that run before the app (host check, authorization, body caps).

They sit outside the app's ExceptionMiddleware, so they write their answers themselves (JSON like the app's own) and
look up the app's registered handlers for what they do not answer (a busy database: 503 with Retry-After). An answer
to a request that has a body carries `Connection: close`; `app.lingering` drains that body (bounded) so the client,
still sending, reads it.
"""

from __future__ import annotations

import inspect
import json

from fastapi import HTTPException
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from app.lingering import has_body

__all__ = ["answer_with_app_handler", "has_body", "send_json", "send_refusal"]


async def answer_with_app_handler(scope: Scope, receive: Receive, send: Send, exc: Exception, *, close: bool) -> None:
    """Answer `exc` (raised before the app ran) with the handler the app registered for its class, else re-raise."""
    handlers = getattr(scope["app"], "exception_handlers", {}) or {}
    handler = next((handlers[kind] for kind in type(exc).__mro__ if kind in handlers), None)
    if handler is None:
        raise exc
    response = handler(Request(scope, receive), exc)
    if inspect.isawaitable(response):
        response = await response
    if close:
        response.headers["connection"] = "close"
    await response(scope, receive, send)


async def send_refusal(send: Send, exc: HTTPException, *, close: bool) -> None:
    """`exc` as the app would answer it: a redirect without a body, anything else as `{"detail": ...}`."""
    extra = dict(exc.headers or {})
    if exc.status_code in (301, 302, 303, 307, 308):
        await _send(send, exc.status_code, b"", extra, close=close)
        return
    await send_json(send, exc.status_code, {"detail": exc.detail}, extra, close=close)


async def send_json(
    send: Send, status: int, payload: dict, extra: dict[str, str] | None = None, *, close: bool = False
) -> None:
    body = json.dumps(payload).encode()
    await _send(send, status, body, {"content-type": "application/json", **(extra or {})}, close=close)


async def _send(send: Send, status: int, body: bytes, extra: dict[str, str], *, close: bool) -> None:
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in extra.items()]
    headers.append((b"content-length", str(len(body)).encode()))
    if close and not any(name == b"connection" for name, _ in headers):
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
