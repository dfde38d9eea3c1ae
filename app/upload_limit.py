"""The request guard in front of every route: Host check, the caller and its role before the body, every body capped.

FastAPI reads (and parses) a request's body before it solves the dependencies that check the caller, so those
checks alone let anyone make the server read 1 GiB. This ASGI middleware runs first, from the headers only:

1. **Host** (open loopback mode only: tokens not required, listening on loopback): the `Host` must name the
   loopback (127.0.0.0/8, localhost, [::1], any port) or one of `settings.allowed_hosts` - otherwise 421. A
   DNS-rebinding page (evil.example resolving to 127.0.0.1) reaches the port, but with its own name as Host.
2. **Caller and role**, for every state-changing request: an API path (`/api/...`, `/analyze`) runs
   `app.deps.identify` (bearer token, else sign-in cookie, else the anonymous admin of an open server; CSRF
   checks) in a thread against the read-only engine - an unknown or revoked token, or no credential on a server
   that requires one, is a 401 before a byte of the body is read - then the role the path needs (jobs and
   workers: admin or worker; analyses and uploads: admin or user), and for `/api/v1/jobs/{id}/...` that the
   job's worker was registered by the calling token. Dashboard form posts need a signed-in cookie (otherwise
   303 to /login); `/login` and `/logout` stay open. The principal is left in the scope for the route.
3. **Size**: a declared `Content-Length` over the path's cap is a 413 at once; a body without one (chunked) is
   counted as it is received and stopped with 413 at the first byte over. Caps: the uploads (`paths`,
   `limit_bytes`); worker results (`POST /api/v1/jobs/{id}/complete`) 16 MiB; `/login` 16 KiB; any other body
   1 MiB (`settings.max_results_mb` / `settings.max_json_mb` when the settings have them).

A refusal sent before the body was read carries `Connection: close`, so the server drops the rest unread.
The class keeps its old name and arguments (`paths`, `limit_bytes`) so `app.main` registers it unchanged.
"""

from __future__ import annotations

import inspect
import ipaddress
import json
import re
from collections.abc import Iterable
from urllib.parse import urlencode

from fastapi import HTTPException
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.deps import ADMIN_OR_USER, ADMIN_OR_WORKER, PRINCIPAL_SCOPE_KEY, identify, job_actor_refusal, role_refusal
from app.settings import LOOPBACK_HOSTS
from app.storage import UploadTooLarge
from app.web.cookie_auth import viewer

KIB = 1024
MIB = 1024 * KIB
JSON_LIMIT_BYTES = 1 * MIB
RESULTS_LIMIT_BYTES = 16 * MIB
LOGIN_LIMIT_BYTES = 16 * KIB

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/login", "/logout"})  # /login takes its token in the form; /logout only clears a cookie
ROLE_BY_PREFIX = (
    ("/api/v1/jobs/", ADMIN_OR_WORKER),
    ("/api/v1/workers/", ADMIN_OR_WORKER),
    ("/api/v1/analyze", ADMIN_OR_USER),
    ("/api/v1/analyses/", ADMIN_OR_USER),
    ("/analyze", ADMIN_OR_USER),
)
JOB_PATH = re.compile(r"/api/v1/jobs/(\d{1,18})/[a-z]+")
RESULTS_PATH = re.compile(r"/api/v1/jobs/[^/]+/complete")
VIEWER_SCOPE_KEY = "npu_advisor.viewer"  # the dashboard's signed-in principal (cookie or anonymous)
# Only starlette's in-process TestClient sets this extension; no network server does, and no client can.
TEST_CLIENT_EXTENSION = "http.response.debug"


class BodyTooLarge(HTTPException):
    """Raised from `receive` at the first byte over the cap; routes answer it as a 413 (FastAPI re-raises it)."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(status_code=413, detail=_too_large_message(limit_bytes), headers={"Connection": "close"})
        self.limit_bytes = limit_bytes


class UploadLimitMiddleware:
    """The request guard (see the module docstring). `paths`/`limit_bytes`: the upload endpoints and their cap."""

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
        self.app = app
        self.paths = frozenset(paths)
        self.limit_bytes = limit_bytes
        self.json_limit_bytes = json_limit_bytes
        self.results_limit_bytes = results_limit_bytes
        self.login_limit_bytes = login_limit_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope["app"].state
        headers = _headers(scope)
        has_body = b"transfer-encoding" in headers or headers.get(b"content-length", b"0") not in (b"0", b"")

        refusal = _host_refusal(scope, state, headers)
        if refusal is not None:
            await _send_json(send, 421, {"detail": refusal}, close=has_body)
            return

        if scope["method"] not in SAFE_METHODS and scope["path"] not in OPEN_PATHS:
            try:
                early = await run_in_threadpool(_check_caller, scope, state)
            except Exception as exc:  # e.g. the database is busy: the app's own handlers answer (503 Retry-After)
                await _answer_with_app_handler(scope, receive, send, exc, close=has_body)
                return
            if early is not None:
                await _send_refusal(send, early, close=has_body)
                return

        limit = self._limit_for(scope, state)
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _send_json(send, 413, {"detail": _too_large_message(limit), "limit_bytes": limit}, close=True)
            return
        await self._call_counting(scope, receive, send, limit)

    def _limit_for(self, scope: Scope, state: object) -> int:
        path, settings = scope["path"], getattr(state, "settings", None)
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
            await _send_json(send, 413, {"detail": exc.detail, "limit_bytes": exc.limit_bytes}, close=True)


# ------------------------------------------------------------------ the caller, before the body
def _check_caller(scope: Scope, state: object) -> HTTPException | None:
    """Identify the caller of a state-changing request and check its role; the refusal, or None (go on).

    Runs in a worker thread (the token lookup is a database read). Leaves the principal in the scope."""
    request = Request(scope)
    path = scope["path"]
    api = path.startswith("/api/") or path == "/analyze"
    now = state.queue.clock()
    with Session(state.read_engine, expire_on_commit=False) as session:
        if not api:  # a dashboard form post: signed in by the cookie, or the anonymous admin of an open server
            principal = viewer(request, session)
            if principal is None:
                target = path + (f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else "")
                return HTTPException(303, headers={"Location": "/login?" + urlencode({"next": target})})
            scope[VIEWER_SCOPE_KEY] = principal
            return None
        try:
            principal = identify(request, session, now=now)
        except HTTPException as exc:
            return exc
        for prefix, roles in ROLE_BY_PREFIX:
            if path.startswith(prefix):
                refusal = role_refusal(principal, roles)
                if refusal is not None:
                    return HTTPException(403, detail=refusal)
                break
        job = JOB_PATH.fullmatch(path)
        if job is not None:
            refusal = job_actor_refusal(session, int(job.group(1)), principal)
            session.commit()
            if refusal is not None:
                return HTTPException(403, detail=refusal)
    scope[PRINCIPAL_SCOPE_KEY] = principal
    return None


# ------------------------------------------------------------------ Host (DNS rebinding)
def _host_refusal(scope: Scope, state: object, headers: dict[bytes, bytes]) -> str | None:
    """Why this request's Host is refused (open loopback mode only); None when it is fine."""
    settings = getattr(state, "settings", None)
    mode = getattr(state, "auth_mode", None)
    if settings is None or mode is None or mode.required or settings.host not in LOOPBACK_HOSTS:
        return None
    raw = headers.get(b"host")
    if raw is None:  # HTTP/1.0 without Host: not a browser
        return None
    host = raw.decode("latin-1")
    extra = getattr(settings, "allowed_hosts", ()) or ()
    if host_allowed(host, extra, in_process_test=TEST_CLIENT_EXTENSION in (scope.get("extensions") or {})):
        return None
    shown = host if len(host) <= 100 else host[:100] + "…"
    return (
        f"Host {shown!r} refused: this server runs open (no tokens) on loopback, so it answers only requests "
        "addressed to a loopback name (127.0.0.1, localhost, [::1]); another name is how a DNS-rebinding web "
        "page reaches it. Use http://127.0.0.1:<port>/, list the name in ADVISOR_ALLOWED_HOSTS, or require tokens."
    )


def host_allowed(host: str, extra: Iterable[str] | str = (), *, in_process_test: bool = False) -> bool:
    """`host` (a Host header: name[:port]) names the loopback, or is listed in `extra` (with or without port)."""
    host = host.strip().lower()
    if host.startswith("["):
        name = host[1 : host.find("]")] if "]" in host else host[1:]
    else:
        name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    name = name.rstrip(".")
    entries = extra.split(",") if isinstance(extra, str) else extra  # a list, or "a.lan,b.lan" from the environment
    listed = {entry.strip().lower().rstrip(".") for entry in entries if entry.strip()}
    if name == "localhost" or name in listed or host in listed:
        return True
    if name == "testserver" and in_process_test:  # starlette's TestClient default, in-process only
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# ------------------------------------------------------------------ responses
async def _answer_with_app_handler(scope: Scope, receive: Receive, send: Send, exc: Exception, *, close: bool) -> None:
    """Answer `exc` (raised before the app ran) with the handler the app registered for its class, else re-raise.

    This middleware sits outside the app's ExceptionMiddleware, so its handlers (a busy database -> 503) must be
    looked up here."""
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


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {name.lower(): value for name, value in scope["headers"]}


def _setting_bytes(settings: object, name: str, default: int) -> int:
    value = getattr(settings, name, None)
    return int(value * MIB) if isinstance(value, int | float) and value > 0 else default


def _too_large_message(limit_bytes: int) -> str:
    return str(UploadTooLarge(limit_bytes, "the request"))


async def _send_refusal(send: Send, exc: HTTPException, *, close: bool) -> None:
    extra = dict(exc.headers or {})
    if exc.status_code in (301, 302, 303, 307, 308):
        await _send(send, exc.status_code, b"", extra, close=close)
        return
    await _send_json(send, exc.status_code, {"detail": exc.detail}, extra, close=close)


async def _send_json(
    send: Send, status: int, payload: dict, extra: dict[str, str] | None = None, *, close: bool = False
) -> None:
    await _send(
        send, status, json.dumps(payload).encode(), {"content-type": "application/json", **(extra or {})}, close=close
    )


async def _send(send: Send, status: int, body: bytes, extra: dict[str, str], *, close: bool) -> None:
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in extra.items()]
    headers.append((b"content-length", str(len(body)).encode()))
    if close and not any(name == b"connection" for name, _ in headers):
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
