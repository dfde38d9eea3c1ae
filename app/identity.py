"""Who is calling: the bearer token of `Authorization`, else the dashboard's sign-in cookie (app.cookie_auth), else
the anonymous admin of an open server; with the same-origin check that keeps a cross-site page from acting with the
browser's cookie (CSRF). app.authorization decides from it, once per request, what the caller may do.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import HTTPException, Request
from sqlmodel import Session

from app.auth import ANONYMOUS, Principal, authenticate
from app.cookie_auth import cookie_principal, same_origin_request

READ_ONLY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def identify(request: Request, session: Session, *, now: datetime) -> Principal:
    """The caller: `Authorization: Bearer <token>`, else the dashboard's sign-in cookie (never a worker token's),
    else the anonymous admin of an open server. Without a bearer header a state-changing request must come from
    this server's own pages (CSRF): a cookie-signed one must prove it (Origin or Referer), and any one from a
    foreign Origin is refused - also on an open server, where a web page could otherwise post to a local one.
    Raises HTTPException (401/403); reads only the request's headers, never its body."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("the Authorization header must be 'Bearer <token>'")
        principal = authenticate(session, token.strip(), now=now)
        if principal is None:
            raise _unauthorized("this token is unknown or revoked; create one with `npu-advisor token create`")
        return principal
    changes_state = request.method not in READ_ONLY_METHODS
    principal = cookie_principal(request, session, now=now)
    if principal is not None:
        if changes_state and not same_origin_request(request, require_proof=True):
            raise _cross_site()
        return principal
    if changes_state and not same_origin_request(request, require_proof=False):
        raise _cross_site()
    if request.app.state.auth_mode.required:
        raise _unauthorized(
            "this server requires a bearer token (Authorization: Bearer <token>); "
            "an admin creates one with `npu-advisor token create --role user`"
        )
    return ANONYMOUS


def _cross_site() -> HTTPException:
    return HTTPException(
        status_code=403,
        detail="cross-site request refused: a request signed in by the dashboard cookie must come from this "
        "server's own pages (Origin or Referer of this host); scripts send `Authorization: Bearer <token>`",
    )


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(status_code=401, detail=message, headers={"WWW-Authenticate": "Bearer"})
