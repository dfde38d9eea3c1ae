"""Who may call what: decided once per request, from one table derived from the routes, before the body is read.

Each route declares its policy where FastAPI users look for it, in its signature: `UserDep` / `WorkerDep` /
`AnyRoleDep` (`app.deps.require_role`) name the roles; a dashboard page's `PageViewer` asks for a signed-in viewer;
a route under `/api/v1/jobs/{job_id}/` acts on a job, so a worker token may call it only for a job leased to a
worker it registered. `route_policies(app)` is that table (docs/security.md "Tokens and roles" and
tests/service/test_authorization.py read it). FastAPI reads and parses a request's body before it solves the route's
dependencies, so a check there alone lets anyone make the server read a body; this ASGI middleware therefore makes
the decision (`decide`), from the headers alone: it finds the route the request will reach with starlette's own
matching, looks the caller up in a thread (a token is a database read), and either refuses - 401 unknown or missing
credential, 403 role or job, 303 to /login for a dashboard page without sign-in - before a byte of the body is read,
or leaves the principal in the scope, where the route's dependency hands it to the handler without deciding again.

A state-changing request that reaches no route is still identified (an API path: 401 without a valid credential;
a dashboard path: sign in first), as before. Ownership of an analysis (cancel, re-run) needs the analysis loaded,
so it is decided once where it is loaded: `app.analysis_actions.owned_analysis`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import urlencode

from fastapi import FastAPI, HTTPException
from sqlalchemy import select
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth import Principal
from app.cookie_auth import viewer
from app.early_answers import answer_with_app_handler, has_body, send_refusal
from app.http_middleware import HttpMiddleware
from app.identity import identify
from app.models import Job, Worker

try:  # FastAPI >= 0.16x includes routers as wrappers; this yields their routes, in match order
    from fastapi.routing import iter_route_contexts
except ImportError:  # older FastAPI: the app's routes are the flat list itself

    def iter_route_contexts(routes: Iterable[object]) -> Iterator[object]:  # type: ignore[misc]
        return iter(routes)


VIEWER_SCOPE_KEY = "npu_advisor.viewer"  # the dashboard's signed-in principal (cookie or anonymous)
PRINCIPAL_SCOPE_KEY = "npu_advisor.principal"  # an API caller, once allowed: app.deps.require_role hands it over
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
JOB_ROUTE_PREFIX = "/api/v1/jobs/{job_id}/"


@dataclass(frozen=True)
class Policy:
    """What a route needs. `roles`: an API caller with one of them (empty: any identified caller); `viewer`: a
    dashboard viewer signed in (or the anonymous admin of an open server); `job_actor`: the path's job is leased to
    a worker of the calling token (admins any)."""

    roles: tuple[str, ...] = ()
    viewer: bool = False
    job_actor: bool = False


IDENTIFIED = Policy()  # an API request that reaches no route: a valid credential, no role
SIGNED_IN = Policy(viewer=True)  # a dashboard form post that reaches no route


def policy_of(route: object) -> Policy | None:
    """The policy a route declares (see the module docstring); None: open (health, metrics, sign-in, static)."""
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return None
    for dependency in dependant.dependencies:
        roles = getattr(dependency.call, "roles", None)
        if roles is not None:
            path = getattr(route, "path_format", None) or ""
            return Policy(roles=tuple(roles), job_actor=path.startswith(JOB_ROUTE_PREFIX))
        if getattr(dependency.call, "signed_in_viewer", False):
            return SIGNED_IN
    return None


def route_policies(app: FastAPI) -> dict[tuple[str, str], Policy | None]:
    """The table: (method, path template) -> policy, for every API route and page of `app`."""
    table: dict[tuple[str, str], Policy | None] = {}
    for route in iter_route_contexts(app.router.routes):
        if getattr(route, "dependant", None) is not None:
            for method in sorted(route.methods or ()):
                table[(method, str(route.path_format))] = policy_of(route)
    return table


def role_refusal(principal: Principal, roles: tuple[str, ...]) -> str | None:
    """Why `principal` may not use an endpoint open to `roles`; None when it may."""
    if principal.role in roles:
        return None
    return f"a {principal.role} token cannot use this endpoint; it needs a {' or '.join(roles)} token"


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


def decide(request: Request, session: Session, policy: Policy, *, now) -> Principal:  # noqa: ANN001
    """The principal allowed by `policy`, or an HTTPException saying why not (the one decision; see the docstring)."""
    if policy.viewer:
        principal = viewer(request, session)
        if principal is None:
            query = request.scope.get("query_string") or b""
            target = request.url.path + (f"?{query.decode('latin-1')}" if query else "")
            raise HTTPException(303, headers={"Location": "/login?" + urlencode({"next": target})})
        return principal
    principal = identify(request, session, now=now)
    if policy.roles:
        refusal = role_refusal(principal, policy.roles)
        if refusal is not None:
            raise HTTPException(403, detail=refusal)
    job_id = str(request.path_params.get("job_id", ""))
    if policy.job_actor and job_id.isdigit():  # not a number: the route answers 422
        refusal = job_actor_refusal(session, int(job_id), principal)
        session.commit()
        if refusal is not None:
            raise HTTPException(403, detail=refusal)
    return principal


class AuthorizeBeforeBody(HttpMiddleware):
    """ASGI middleware: the request's route policy decided from its headers before its body is read."""

    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app)
        self._routes: list[tuple[object, Policy | None]] | None = None  # the app's routes, once it serves

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        policy, path_params = self._policy_for(scope)
        if policy is None:
            await self.app(scope, receive, send)
            return
        try:
            refusal = await run_in_threadpool(_decide_into_scope, scope, path_params, policy)
        except Exception as exc:  # e.g. the database is busy: the app's own handlers answer (503 Retry-After)
            await answer_with_app_handler(scope, receive, send, exc, close=has_body(scope))
            return
        if refusal is not None:
            await send_refusal(send, refusal, close=has_body(scope))
            return
        await self.app(scope, receive, send)

    def _policy_for(self, scope: Scope) -> tuple[Policy | None, dict]:
        if self._routes is None:  # the app's routes, in match order, once it serves
            self._routes = [(route, policy_of(route)) for route in iter_route_contexts(scope["app"].router.routes)]
        for route, policy in self._routes:
            match, child = route.matches(scope)  # type: ignore[attr-defined]
            if match == Match.FULL:
                return policy, child.get("path_params", {})
        if scope["method"] in SAFE_METHODS or scope["path"] in ("/login", "/logout"):
            return None, {}
        api = scope["path"].startswith("/api/") or scope["path"] == "/analyze"
        return (IDENTIFIED if api else SIGNED_IN), {}


def _decide_into_scope(scope: Scope, path_params: dict, policy: Policy) -> HTTPException | None:
    """`decide` in a worker thread (the token lookup is a database read); the refusal, or None with the principal
    left in the scope for the route's dependency."""
    state = scope["app"].state
    request = Request({**scope, "path_params": path_params})
    with Session(state.read_engine, expire_on_commit=False) as session:
        try:
            principal = decide(request, session, policy, now=state.queue.clock())
        except HTTPException as exc:
            return exc
    scope[VIEWER_SCOPE_KEY if policy.viewer else PRINCIPAL_SCOPE_KEY] = principal
    return None
