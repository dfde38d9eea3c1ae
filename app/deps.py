"""FastAPI dependencies: the per-request session, the service objects, the caller and role checks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlmodel import Session

from app.auth import ANONYMOUS, Principal, authenticate
from app.queue import JobQueue
from app.settings import Settings
from app.storage import ArtifactStore
from app.web.cookie_auth import cookie_principal, same_origin_request

ADMIN_OR_USER = ("admin", "user")
ADMIN_OR_WORKER = ("admin", "worker")
ANY_ROLE = ("admin", "user", "worker")


READ_ONLY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def get_session(request: Request) -> Iterator[Session]:
    """The request's session: read-only (a deferred BEGIN on SQLite, app.db) for GET/HEAD, writing otherwise."""
    state = request.app.state
    engine = state.read_engine if request.method in READ_ONLY_METHODS else state.engine
    with Session(engine, expire_on_commit=False) as session:
        yield session


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def get_queue(request: Request) -> JobQueue:
    return request.app.state.queue


def get_store(request: Request) -> ArtifactStore:
    return request.app.state.store


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
QueueDep = Annotated[JobQueue, Depends(get_queue)]
StoreDep = Annotated[ArtifactStore, Depends(get_store)]


def get_principal(request: Request, session: SessionDep, queue: QueueDep) -> Principal:
    """The caller: `Authorization: Bearer <token>`, else the dashboard's sign-in cookie, else the anonymous
    admin of an open server. Without a bearer header a state-changing request must come from this server's
    own pages (CSRF): a cookie-signed one must prove it (Origin or Referer), and any one from a foreign
    Origin is refused - also on an open server, where a web page could otherwise post to a local one."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("the Authorization header must be 'Bearer <token>'")
        principal = authenticate(session, token.strip(), now=queue.clock())
        if principal is None:
            raise _unauthorized("this token is unknown or revoked; create one with `npu-advisor token create`")
        return principal
    changes_state = request.method not in READ_ONLY_METHODS
    principal = cookie_principal(request, session)
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


def require_role(*roles: str) -> Callable[..., Principal]:
    """A dependency that lets only `roles` through (403 with what is needed otherwise)."""

    def check(principal: Annotated[Principal, Depends(get_principal)]) -> Principal:
        if principal.role not in roles:
            raise HTTPException(
                status_code=403,
                detail=f"a {principal.role} token cannot use this endpoint; it needs a {' or '.join(roles)} token",
            )
        return principal

    return check


UserDep = Annotated[Principal, Depends(require_role(*ADMIN_OR_USER))]
WorkerDep = Annotated[Principal, Depends(require_role(*ADMIN_OR_WORKER))]
AnyRoleDep = Annotated[Principal, Depends(require_role(*ANY_ROLE))]
