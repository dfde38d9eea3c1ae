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

ADMIN_OR_USER = ("admin", "user")
ADMIN_OR_WORKER = ("admin", "worker")
ANY_ROLE = ("admin", "user", "worker")


def get_session(request: Request) -> Iterator[Session]:
    with Session(request.app.state.engine, expire_on_commit=False) as session:
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
    """The caller, from `Authorization: Bearer <token>`; anonymous admin only on an open server."""
    header = request.headers.get("authorization")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("the Authorization header must be 'Bearer <token>'")
        principal = authenticate(session, token.strip(), now=queue.clock())
        if principal is None:
            raise _unauthorized("this token is unknown or revoked; create one with `npu-advisor token create`")
        return principal
    if request.app.state.auth_mode.required:
        raise _unauthorized(
            "this server requires a bearer token (Authorization: Bearer <token>); "
            "an admin creates one with `npu-advisor token create --role user`"
        )
    return ANONYMOUS


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
