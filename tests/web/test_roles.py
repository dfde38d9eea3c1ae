"""Roles on the dashboard: worker tokens cannot sign in, users change only their own analyses, /login checks
Origin, and the open loopback mode answers only loopback Host names (DNS rebinding)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlmodel import Session

from app.analysis_actions import ActionRefused, owned_analysis
from app.auth import ANONYMOUS, Principal, create_token
from app.cookie_auth import COOKIE_NAME
from app.host_check import host_allowed
from app.main import create_app
from app.models import Analysis, Job
from tests.support import synthetic_analyses as synthetic
from tests.support.web_app import make_settings

OWN = "http://127.0.0.1:8000"


@pytest.fixture
def team(tmp_path) -> Iterator[tuple]:
    """A server that requires sign-in, 6 queued analyses (by alice, bob, carol, alice, bob, carol) and tokens."""
    app = create_app(make_settings(tmp_path, require_auth=True))
    with Session(app.state.engine, expire_on_commit=False) as session:
        synthetic.seed_analyses(session, 6, statuses=("queued",))
        now = datetime.now(UTC)
        tokens = {
            role: create_token(session, role=role, name=name, now=now)[1]
            for role, name in (("user", "alice"), ("admin", "root"), ("worker", "node-1"))
        }
        owners = dict(session.execute(select(Analysis.id, Analysis.submitted_by)).all())
    with TestClient(app, base_url=OWN) as client:
        yield client, tokens, owners


def status_of(client: TestClient, analysis_id: int) -> str:
    with Session(client.app.state.engine) as session:
        return session.scalars(select(Job.status).where(Job.analysis_id == analysis_id)).one()


def test_a_worker_token_cannot_sign_in_to_the_dashboard(team):
    client, tokens, _ = team
    refused = client.post("/login", data={"token": tokens["worker"], "next": "/"}, follow_redirects=False)
    assert refused.status_code == 403 and "worker token cannot sign in to the dashboard" in refused.text
    assert COOKIE_NAME not in refused.headers.get("set-cookie", "")
    assert client.get("/", follow_redirects=False).status_code == 303


def test_a_cookie_holding_a_worker_token_grants_nothing(team):
    client, tokens, _ = team
    client.cookies.set(COOKIE_NAME, tokens["worker"])
    assert client.get("/analyses/1", follow_redirects=False).status_code == 303  # to /login
    assert client.get("/api/v1/analyses").status_code == 401
    assert client.post("/api/v1/analyses/1/cancel", headers={"Origin": OWN}).status_code == 401
    assert client.post("/analyses/1/cancel", headers={"Origin": OWN}, follow_redirects=False).status_code == 303
    assert status_of(client, 1) == "queued"
    # the same token as a bearer still works for the worker protocol
    bearer = {"Authorization": f"Bearer {tokens['worker']}"}
    register = {"name": "w", "device_kind": "cpu", "backends": [], "environment": {}}
    assert client.post("/api/v1/workers/register", json=register, headers=bearer).status_code == 200


def test_login_refuses_posts_from_another_site(team):
    client, tokens, _ = team
    for foreign in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {"Referer": "https://evil.example/x"}):
        refused = client.post("/login", data={"token": tokens["user"]}, headers=foreign, follow_redirects=False)
        assert refused.status_code == 403 and "Cross-site sign-in refused" in refused.text, foreign
        assert COOKIE_NAME not in refused.headers.get("set-cookie", "")
    signed = client.post("/login", data={"token": tokens["user"]}, headers={"Origin": OWN}, follow_redirects=False)
    assert signed.status_code == 303 and COOKIE_NAME in signed.headers["set-cookie"]


def test_users_cancel_and_rerun_only_their_own_analyses_admins_any(team):
    client, tokens, owners = team
    bobs = next(i for i, who in sorted(owners.items()) if who == "bob")
    alices = next(i for i, who in sorted(owners.items()) if who == "alice")
    client.post("/login", data={"token": tokens["user"]})
    assert f"/analyses/{bobs}/cancel" not in client.get(f"/analyses/{bobs}").text  # no button that would be refused
    assert f"/analyses/{alices}/cancel" in client.get(f"/analyses/{alices}").text
    for action in ("cancel", "rerun"):
        refused = client.post(f"/analyses/{bobs}/{action}", headers={"Origin": OWN}, follow_redirects=False)
        assert refused.status_code == 403, action
        assert "only the submitter (bob) or an admin can" in refused.text
    assert status_of(client, bobs) == "queued"
    own = client.post(f"/analyses/{alices}/cancel", headers={"Origin": OWN}, follow_redirects=False)
    assert own.status_code == 303 and status_of(client, alices) == "cancelled"

    client.post("/logout", headers={"Origin": OWN})
    client.post("/login", data={"token": tokens["admin"]})
    by_admin = client.post(f"/analyses/{bobs}/cancel", headers={"Origin": OWN}, follow_redirects=False)
    assert by_admin.status_code == 303 and status_of(client, bobs) == "cancelled"


def test_owned_analysis_decides_ownership_once_404_first():
    analysis = Analysis(
        id=3,
        model_name="m",
        target="cpu",
        submitted_by="bob",
        artifact_sha256="0",
        context={},
        dedupe_key="k",
        created_at=datetime.now(UTC),
        updated_at=datetime.now(UTC),
    )

    class OneAnalysis:  # the only thing owned_analysis asks of its session
        def get(self, _model: object, analysis_id: int) -> Analysis | None:
            return analysis if analysis_id == 3 else None

    session = OneAnalysis()
    for allowed in (ANONYMOUS, Principal("root", "admin", 1), Principal("bob", "user", 2)):
        assert owned_analysis(session, allowed, 3, "cancel") is analysis
    with pytest.raises(ActionRefused) as refused:
        owned_analysis(session, Principal("alice", "user", 3), 3, "cancel")
    assert refused.value.status_code == 403
    assert str(refused.value).startswith("only the submitter (bob) or an admin can cancel analysis 3")
    with pytest.raises(ActionRefused) as missing:
        owned_analysis(session, Principal("alice", "user", 3), 4, "cancel")
    assert missing.value.status_code == 404


# ------------------------------------------------------------------ Host (DNS rebinding)
def test_open_loopback_server_answers_only_loopback_host_names(client: TestClient):
    for host in ("evil.example", "evil.example:8000", "127.0.0.1.evil.example", "10.0.0.5:8000"):
        refused = client.get("/api/v1/analyses", headers={"Host": host})
        assert refused.status_code == 421, host
        assert "DNS-rebinding" in refused.json()["detail"]
    posted = client.post("/api/v1/workers/register", json={}, headers={"Host": "evil.example"})
    assert posted.status_code == 421
    for host in ("127.0.0.1:8000", "localhost:8000", "localhost", "[::1]:8000", "127.0.0.1"):
        assert client.get("/api/v1/analyses", headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_setting_adds_names(client: TestClient):
    app = client.app
    app.state.settings = app.state.settings.model_copy(update={"allowed_hosts": ["advisor.lan"]})
    assert client.get("/api/v1/analyses", headers={"Host": "advisor.lan:8000"}).status_code == 200
    assert client.get("/api/v1/analyses", headers={"Host": "evil.example"}).status_code == 421


def test_a_server_that_requires_tokens_does_not_check_host(team):
    client, tokens, _ = team
    bearer = {"Authorization": f"Bearer {tokens['user']}", "Host": "advisor.team.example"}
    assert client.get("/api/v1/analyses", headers=bearer).status_code == 200


def test_host_allowed():
    assert all(host_allowed(h) for h in ("127.0.0.1", "127.1.2.3:80", "LOCALHOST:1", "localhost.", "[::1]", "::1"))
    assert not any(host_allowed(h) for h in ("evil.example", "0.0.0.0", "[::]:80", "testserver", "localhost.evil"))
    assert host_allowed("advisor.lan:8000", ["advisor.lan"]) and host_allowed("advisor.lan:8000", ["advisor.lan:8000"])
    assert host_allowed("b.lan", "a.lan, b.lan") and not host_allowed("c.lan", "a.lan,b.lan")
    assert host_allowed("testserver", in_process_test=True)
