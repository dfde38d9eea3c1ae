"""Dashboard sign-in: a bearer token entered once on /login, kept in an HttpOnly, SameSite=Strict cookie.

The cookie holds the token itself (the server stores only its hash, as for API calls), so revoking the
token signs the browser out too. `cookie_principal` is the extra credential source: the dashboard's
pages use it, and `app.identity.identify` falls back to it for API calls without an Authorization
header, so the browser calls the API directly. SameSite=Strict keeps other sites from posting with the
cookie; a state-changing request signed in by the cookie must also show an Origin (or Referer) of this
server (`same_origin_request`). Worker tokens are for workers only: they cannot sign in, and a cookie that
holds one grants nothing (not the pages, not the API's cookie fallback).
"""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlsplit

from fastapi import Request, Response
from sqlmodel import Session

from app.auth import ANONYMOUS, Principal, authenticate

COOKIE_NAME = "npu_advisor_token"
COOKIE_MAX_AGE_S = 30 * 24 * 3600
DASHBOARD_ROLES = ("admin", "user")  # the roles that may sign in; worker tokens are for workers only
WORKER_SIGN_IN_REFUSED = (
    "A worker token cannot sign in to the dashboard: it is for `npu-advisor worker` only. "
    "Sign in with a user or admin token (an admin creates one with `npu-advisor token create --role user`)."
)


def cookie_principal(request: Request, session: Session, *, now: datetime | None = None) -> Principal | None:
    """The signed-in principal from the cookie; None when there is no valid one (or it holds a worker token)."""
    token = request.cookies.get(COOKIE_NAME)
    if not token:
        return None
    principal = authenticate(session, token, now=now or request.app.state.queue.clock())
    if principal is None or principal.role not in DASHBOARD_ROLES:
        return None
    return principal


def viewer(request: Request, session: Session) -> Principal | None:
    """Who is looking: the cookie's principal, the anonymous admin of an open server, or None (sign in)."""
    principal = cookie_principal(request, session)
    if principal is not None:
        return principal
    return None if request.app.state.auth_mode.required else ANONYMOUS


def set_token_cookie(response: Response, token: str, *, secure: bool) -> None:
    response.set_cookie(
        COOKIE_NAME,
        token,
        max_age=COOKIE_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=secure,
        path="/",
    )


def clear_token_cookie(response: Response) -> None:
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")


def same_origin(request: Request) -> bool:
    """A form post comes from this server's own pages (no Origin header: not a browser, allowed)."""
    return same_origin_request(request, require_proof=False)


def same_origin_request(request: Request, *, require_proof: bool) -> bool:
    """The request was sent by a page of this server: its Origin (or, without one, its Referer) names this host.

    Browsers send Origin on every POST (`null` from sandboxed or privacy-restricted contexts: refused). With
    neither header the sender is not a browser page: allowed only when `require_proof` is False - never for
    requests whose credential is the cookie, which a browser attaches by itself."""
    host = request.headers.get("host", request.url.netloc)
    origin = request.headers.get("origin")
    if origin is not None:
        return origin != "null" and urlsplit(origin).netloc == host
    referer = request.headers.get("referer")
    if referer:
        return urlsplit(referer).netloc == host
    return not require_proof


def safe_next(target: str | None) -> str:
    """Only local paths after sign-in, never another site (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
