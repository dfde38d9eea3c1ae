"""FastAPI dependencies: the per-request session, the service objects, the caller.

Who may call a route is declared here (`UserDep`, `WorkerDep`, `AnyRoleDep`: `require_role`) and decided once, before
the request's body is read, by `app.authorization` (which reads these declarations as its table of routes); the
dependency hands the decided principal to the handler. `identify`, `role_refusal` and `job_actor_refusal` are the
pieces that decision is made of.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlalchemy import select
from sqlmodel import Session

from app.auth import ANONYMOUS, Principal, authenticate
from app.job_queue import Actor, JobQueue
from app.models import Job, Worker
from app.settings import Settings
from app.storage import ArtifactStorage
from app.web.cookie_auth import cookie_principal, same_origin_request

ADMIN_OR_USER = ("admin", "user")
ADMIN_OR_WORKER = ("admin", "worker")
ANY_ROLE = ("admin", "user", "worker")


READ_ONLY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PRINCIPAL_SCOPE_KEY = "npu_advisor.principal"  # set by app.authorization once the caller is allowed


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


def role_refusal(principal: Principal, roles: tuple[str, ...]) -> str | None:
    """Why `principal` may not use an endpoint open to `roles`; None when it may."""
    if principal.role in roles:
        return None
    return f"a {principal.role} token cannot use this endpoint; it needs a {' or '.join(roles)} token"


def require_role(*roles: str) -> Callable[..., Principal]:
    """The declaration "this route is for `roles`": `app.authorization` reads `.roles` and decides (403 with what
    is needed otherwise) before the body; this dependency then hands over the principal it allowed."""

    def allowed(request: Request, session: SessionDep, queue: QueueDep) -> Principal:
        known = request.scope.get(PRINCIPAL_SCOPE_KEY)
        if isinstance(known, Principal):
            return known
        from app.authorization import Policy, decide  # a request the middleware did not see (direct ASGI use)

        return decide(request, session, Policy(roles=roles), now=queue.clock())

    allowed.roles = roles  # type: ignore[attr-defined]
    return allowed


def actor_of(principal: Principal) -> Actor:
    """The queue's view of the caller: an admin acts for any worker, a worker token for the workers it registered."""
    return Actor(token_id=principal.token_id, admin=principal.role == "admin")


def is_owner_or_admin(principal: Principal, submitted_by: str) -> bool:
    """Admins (and the anonymous admin of an open server) any; a user only what it submitted (by token name)."""
    return principal.role == "admin" or principal.name == submitted_by


def job_actor_refusal(session: Session, job_id: int, principal: Principal) -> str | None:
    """Why `principal` may not act on job `job_id` (its worker was registered by another token); None when it may.

    Unknown jobs and jobs without a worker pass: the route answers those (404 / 409 lease lost)."""
    if principal.role == "admin":
        return None
    row = session.execute(
        select(Job.worker_id, Worker.token_id).join(Worker, Worker.id == Job.worker_id).where(Job.id == job_id)
    ).first()
    if row is None or row.token_id == principal.token_id:
        return None
    return (
        f"job {job_id} is leased to worker {row.worker_id}, which was registered with another token: a worker "
        "token acts only for the workers it registered (an admin token may act for any)"
    )


UserDep = Annotated[Principal, Depends(require_role(*ADMIN_OR_USER))]
WorkerDep = Annotated[Principal, Depends(require_role(*ADMIN_OR_WORKER))]
AnyRoleDep = Annotated[Principal, Depends(require_role(*ANY_ROLE))]
