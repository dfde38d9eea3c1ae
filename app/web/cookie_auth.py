"""Dashboard sign-in: a bearer token entered once on /login, kept in an HttpOnly, SameSite=Strict cookie.

The cookie holds the token itself (the server stores only its hash, as for API calls), so revoking the
token signs the browser out too. `cookie_principal` is the extra credential source: the dashboard's
routes use it, and `app.deps.get_principal` can fall back to it for API calls made by the browser
(see the report of issue 6). SameSite=Strict keeps other sites from posting with the cookie; posts
from a page whose Origin is not this server are refused as well.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import Request, Response
from sqlmodel import Session

from app.auth import ANONYMOUS, Principal, authenticate

COOKIE_NAME = "npu_advisor_token"
COOKIE_MAX_AGE_S = 30 * 24 * 3600


def cookie_principal(request: Request, session: Session) -> Principal | None:
    """The signed-in principal from the cookie; None when there is no valid one."""
    token = request.cookies.get(COOKIE_NAME)
    if not token:
        return None
    return authenticate(session, token, now=request.app.state.queue.clock())


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
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    parts = urlsplit(origin)
    return parts.netloc == request.headers.get("host", request.url.netloc)


def safe_next(target: str | None) -> str:
    """Only local paths after sign-in, never another site (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target
