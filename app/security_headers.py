"""A second layer behind the pages' escaping: browser security headers on every response.

Every answer (pages, API, static files, refusals sent by the other middlewares) carries:

- `Content-Security-Policy`: `POLICY` - scripts, styles, images, fonts and fetches only from this server, no inline
  script or style, no plugins, no `<base>`, forms post only here, and no page may frame this one
  (`frame-ancestors 'none'`). The dashboard is built for it: `web.js` and `web.css` are static files, the SVG charts
  are inline markup styled by classes, and no template has a `style=`, an `on…=` handler or a `<script>` body;
- `X-Frame-Options: DENY` (framing refused by browsers that predate `frame-ancestors`), `X-Content-Type-Options:
  nosniff`, `Referrer-Policy: same-origin`.

The API documentation pages (`/docs`, `/redoc`, the OAuth2 redirect: FastAPI's Swagger UI and ReDoc, served from
fastapi-offline's bundled files) start from a short inline script FastAPI writes from the app's own settings, and
ReDoc injects its styles at run time: there the policy allows exactly the inline scripts of that answer, by their
sha256 (`docs_policy`), and inline styles; those pages render only the OpenAPI schema, never user text. A header the
app already set is kept.
"""

from __future__ import annotations

import base64
import hashlib
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.http_middleware import HttpMiddleware

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "content-security-policy": POLICY,
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}
DOCS_PATHS = frozenset({"/docs", "/redoc", "/docs/oauth2-redirect"})
MAX_DOCS_BYTES = 1 << 20  # the docs pages are a few KiB; anything larger is passed on with the strict policy
_INLINE_SCRIPT = re.compile(rb"<script(?![^>]*\bsrc\s*=)[^>]*>(.*?)</script>", re.DOTALL | re.IGNORECASE)


def docs_policy(html: bytes) -> str:
    """The policy of an API documentation page: `POLICY`, with exactly `html`'s inline scripts (by hash), inline
    styles, `data:` images and `blob:` workers (ReDoc's search) allowed."""
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(body).digest()).decode() + "'"
        for body in _INLINE_SCRIPT.findall(html)
    ]
    return (
        POLICY.replace("script-src 'self'", " ".join(["script-src 'self'", *hashes]))
        .replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
        .replace("img-src 'self'", "img-src 'self' data:")
        + "; worker-src 'self' blob:"
    )


class SecurityHeaders(HttpMiddleware):
    """ASGI middleware: `HEADERS` on every HTTP answer (see the module docstring)."""

    def __init__(self, app: ASGIApp, *, docs_paths: frozenset[str] = DOCS_PATHS) -> None:
        super().__init__(app)
        self.docs_paths = docs_paths

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] in self.docs_paths:
            await self._docs_page(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": _merged(message.get("headers", []), HEADERS)}
            await send(message)

        await self.app(scope, receive, with_headers)

    async def _docs_page(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The answer held until complete (a few KiB), so its inline scripts can be named in its policy."""
        start: Message = {"type": "http.response.start", "status": 500, "headers": []}
        body = bytearray()
        sent = False

        async def held(message: Message) -> None:
            nonlocal start, sent
            if sent or message["type"] not in ("http.response.start", "http.response.body"):
                await send(message)
                return
            if message["type"] == "http.response.start":
                start = message
                return
            body.extend(message.get("body", b""))
            more = bool(message.get("more_body", False))
            if more and len(body) <= MAX_DOCS_BYTES:
                return
            policy = POLICY if more else docs_policy(bytes(body))  # too large to be a docs page: the strict one
            headers = _merged(start.get("headers", []), HEADERS | {"content-security-policy": policy})
            sent = True
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": bytes(body), "more_body": more})

        await self.app(scope, receive, held)


def _merged(headers: list[tuple[bytes, bytes]], extra: dict[str, str]) -> list[tuple[bytes, bytes]]:
    present = {name.lower() for name, _ in headers}
    added = [(name.encode(), value.encode()) for name, value in extra.items() if name.encode() not in present]
    return [*headers, *added]
