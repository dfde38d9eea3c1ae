"""FastAPI dependencies: the per-request session, the service objects, the caller.

Who may call a route is declared here (`UserDep`, `WorkerDep`, `AnyRoleDep`: `require_role`) and decided once, before
the request's body is read, by `app.authorization` (which reads these declarations as its table of routes, and
identifies the caller with `app.identity`); the dependency hands the decided principal to the handler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlmodel import Session

from app.auth import Principal
from app.authorization import PRINCIPAL_SCOPE_KEY, Policy, decide
from app.identity import READ_ONLY_METHODS
from app.job_queue import Actor, JobQueue
from app.settings import Settings
from app.storage import ArtifactStorage

ADMIN_OR_USER = ("admin", "user")
ADMIN_OR_WORKER = ("admin", "worker")
ANY_ROLE = ("admin", "user", "worker")


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


def get_store(request: Request) -> ArtifactStorage:
    return request.app.state.store


SessionDep = Annotated[Session, Depends(get_session)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
QueueDep = Annotated[JobQueue, Depends(get_queue)]
StoreDep = Annotated[ArtifactStorage, Depends(get_store)]


def require_role(*roles: str) -> Callable[..., Principal]:
    """The declaration "this route is for `roles`": `app.authorization` reads `.roles` and decides (403 with what
    is needed otherwise) before the body; this dependency then hands over the principal it allowed."""

    def allowed(request: Request, session: SessionDep, queue: QueueDep) -> Principal:
        known = request.scope.get(PRINCIPAL_SCOPE_KEY)
        if isinstance(known, Principal):
            return known
        # a request the middleware did not see (direct ASGI use)
        return decide(request, session, Policy(roles=roles), now=queue.clock())

    allowed.roles = roles  # type: ignore[attr-defined]
    return allowed


def actor_of(principal: Principal) -> Actor:
    """The queue's view of the caller: an admin acts for any worker, a worker token for the workers it registered."""
    return Actor(token_id=principal.token_id, admin=principal.role == "admin")


def is_owner_or_admin(principal: Principal, submitted_by: str) -> bool:
    """Admins (and the anonymous admin of an open server) any; a user only what it submitted (by token name)."""
    return principal.role == "admin" or principal.name == submitted_by


UserDep = Annotated[Principal, Depends(require_role(*ADMIN_OR_USER))]
WorkerDep = Annotated[Principal, Depends(require_role(*ADMIN_OR_WORKER))]
AnyRoleDep = Annotated[Principal, Depends(require_role(*ANY_ROLE))]
