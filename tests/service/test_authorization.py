"""Authorization in one layer (issue 29 item 3, app.authorization): one table of route policies derived from what
each route declares, one decision per request made before its body is read, the owner of an analysis checked once.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlmodel import Session

import app.analysis_actions
import app.authorization
from app.auth import create_token
from app.authorization import Policy, route_policies
from app.deps import ADMIN_OR_USER, ADMIN_OR_WORKER, ANY_ROLE
from app.main import create_app
from app.models import Analysis

OWN = "http://127.0.0.1:8000"
USER, WORKER, ANY = Policy(roles=ADMIN_OR_USER), Policy(roles=ADMIN_OR_WORKER), Policy(roles=ANY_ROLE)
JOB = Policy(roles=ADMIN_OR_WORKER, job_actor=True)
SIGNED_IN = Policy(viewer=True)


@pytest.fixture
def locked(make_app):  # noqa: ANN001, ANN201
    return make_app(require_auth=True, reaper_interval_s=3600)


def test_the_table_of_routes_says_who_may_call_each(locked):
    table = route_policies(locked)
    expected = {
        ("POST", "/api/v1/analyze"): USER,
        ("POST", "/analyze"): USER,
        ("GET", "/api/v1/analyses"): USER,
        ("GET", "/api/v1/analyses/{analysis_id}"): USER,
        ("POST", "/api/v1/analyses/{analysis_id}/cancel"): USER,
        ("POST", "/api/v1/analyses/{analysis_id}/redecide"): USER,
        ("POST", "/api/v1/analyses/{analysis_id}/rerun"): USER,
        ("GET", "/api/v1/analyses/{analysis_id}/inputs"): ANY,
        ("GET", "/api/v1/artifacts/{sha256}"): ANY,
        ("POST", "/api/v1/workers/register"): WORKER,
        ("POST", "/api/v1/workers/{worker_id}/claim"): WORKER,
        ("POST", "/api/v1/workers/{worker_id}/deregister"): WORKER,
        ("GET", "/api/v1/workers"): USER,
        ("GET", "/api/v1/workers/demand"): WORKER,
        ("POST", "/api/v1/jobs/{job_id}/heartbeat"): JOB,
        ("POST", "/api/v1/jobs/{job_id}/complete"): JOB,
        ("POST", "/api/v1/jobs/{job_id}/fail"): JOB,
        ("POST", "/api/v1/jobs/{job_id}/cancelled"): JOB,
        ("GET", "/api/v1/queue"): USER,
        ("GET", "/api/v1/suites"): USER,
        ("GET", "/api/v1/limits"): USER,
        ("GET", "/"): SIGNED_IN,
        ("GET", "/analyses/{analysis_id}"): SIGNED_IN,
        ("POST", "/analyses/{analysis_id}/{action}"): SIGNED_IN,
        ("POST", "/upload"): SIGNED_IN,
        ("GET", "/healthz"): None,
        ("GET", "/readyz"): None,
        ("GET", "/metrics"): None,
        ("POST", "/login"): None,
        ("POST", "/logout"): None,
    }
    assert {key: table.get(key, "missing") for key in expected} == expected
    open_writes = [key for key, policy in table.items() if key[0] != "GET" and policy is None]
    assert sorted(open_writes) == [("POST", "/login"), ("POST", "/logout")], "every other write needs a caller"
    api_reads = [key for key, policy in table.items() if key[1].startswith("/api/") and policy is None]
    assert api_reads == [], "every API route names its roles"


def test_each_request_is_decided_once_before_the_route_and_the_dependency_only_hands_it_over(locked, monkeypatch):
    calls: Counter[str] = Counter()
    real_identify, real_roles = app.authorization.identify, app.authorization.role_refusal

    def identify(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["identify"] += 1
        return real_identify(*args, **kwargs)

    def role_refusal(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["roles"] += 1
        return real_roles(*args, **kwargs)

    monkeypatch.setattr(app.authorization, "identify", identify)
    monkeypatch.setattr(app.authorization, "role_refusal", role_refusal)
    monkeypatch.setattr("app.deps.decide", lambda *_a, **_k: pytest.fail("the dependency decided again"))
    with Session(locked.state.engine) as session:
        user = create_token(session, role="user", name="alice", now=datetime.now(UTC))[1]
        worker = create_token(session, role="worker", name="w", now=datetime.now(UTC))[1]
    with TestClient(locked) as client:
        assert client.get("/api/v1/analyses", headers={"Authorization": f"Bearer {user}"}).status_code == 200
        assert calls == {"identify": 1, "roles": 1}
        calls.clear()
        refused = client.get("/api/v1/workers/register", headers={"Authorization": f"Bearer {worker}"})
        assert refused.status_code == 405 and calls == {}, "a GET reaching no route decides nothing"
        refused = client.get("/api/v1/queue", headers={"Authorization": f"Bearer {worker}"})
        assert refused.status_code == 403 and "needs a admin or user token" in refused.json()["detail"]
        assert calls == {"identify": 1, "roles": 1}
        assert client.get("/api/v1/queue").status_code == 401


def test_a_dashboard_cancel_checks_the_owner_once(tmp_path, monkeypatch):
    from tests.support import synthetic_analyses as synthetic
    from tests.support.web_app import make_settings

    web_app = create_app(make_settings(tmp_path, require_auth=True))
    with Session(web_app.state.engine, expire_on_commit=False) as session:
        synthetic.seed_analyses(session, 2, statuses=("queued",))
        owner = session.scalars(select(Analysis.submitted_by).where(Analysis.id == 1)).one()
        token = create_token(session, role="user", name=owner, now=datetime.now(UTC))[1]
    checks: list[str] = []
    real = app.analysis_actions.is_owner_or_admin

    def counted(principal, submitted_by):  # noqa: ANN001, ANN202
        checks.append(submitted_by)
        return real(principal, submitted_by)

    monkeypatch.setattr(app.analysis_actions, "is_owner_or_admin", counted)
    with TestClient(web_app, base_url=OWN) as client:
        client.post("/login", data={"token": token})
        done = client.post("/analyses/1/cancel", headers={"Origin": OWN}, follow_redirects=False)
        assert done.status_code == 303, done.text
        assert checks == [owner], "the owner is checked once per cancel"
        again = client.post("/api/v1/analyses/1/cancel", headers={"Authorization": f"Bearer {token}"})
        assert again.status_code == 409 and checks == [owner, owner], "the API's cancel: once too (then: done)"
