"""Refuse an upload whose declared size is over the limit before a byte of its body is read.

A client that declares a 50 GiB body gets its 413 at once instead of after the first 4 GiB.
Uploads without Content-Length (chunked) are still stopped by the store at the first byte over the cap.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from app.storage import UploadTooLarge


class UploadLimitMiddleware:
    def __init__(self, app: ASGIApp, *, paths: tuple[str, ...], limit_bytes: int) -> None:
        self.app = app
        self.paths = frozenset(paths)
        self.limit_bytes = limit_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in self.paths:
            declared = dict(scope["headers"]).get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.limit_bytes:
                message = str(UploadTooLarge(self.limit_bytes, "the request"))
                body = json.dumps({"detail": message, "limit_bytes": self.limit_bytes}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 413,
                        "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
