"""The API accepts the dashboard's sign-in cookie; state-changing calls signed by it must come from our pages."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlmodel import Session

from app.auth import create_token
from app.main import create_app
from app.models import Job
from tests.support import synthetic_analyses as synthetic
from tests.support.web_app import make_settings

OWN = "http://127.0.0.1:8000"


@pytest.fixture
def signed_in(tmp_path):
    app = create_app(make_settings(tmp_path, require_auth=True))
    with Session(app.state.engine, expire_on_commit=False) as session:
        synthetic.seed_analyses(session, 6, statuses=("queued",))
        _, token = create_token(session, role="user", name="alice", now=datetime.now(UTC))
        queued = list(session.scalars(select(Job.analysis_id).where(Job.status == "queued")))
    with TestClient(app, base_url=OWN) as client:
        assert client.get("/api/v1/analyses").status_code == 401  # not signed in yet
        client.post("/login", data={"token": token})
        yield client, queued


def test_api_reads_work_with_the_sign_in_cookie(signed_in):
    client, queued = signed_in
    listed = client.get("/api/v1/analyses")
    assert listed.status_code == 200 and listed.json()["total"] == 6
    detail = client.get(f"/api/v1/analyses/{queued[0]}").json()
    assert detail["id"] == queued[0] and detail["status"] == "queued"
    report = client.get(f"/api/v1/analyses/{queued[0]}/report.md")  # the detail page's download link
    assert report.status_code == 200 and detail["model_name"] in report.text


def test_cookie_signed_api_posts_need_this_servers_origin_or_referer(signed_in):
    client, queued = signed_in
    cancel = "/api/v1/analyses/{}/cancel".format
    no_proof = client.post(cancel(queued[0]))
    assert no_proof.status_code == 403 and "cross-site request refused" in no_proof.json()["detail"]
    assert client.post(cancel(queued[0]), headers={"Origin": "https://evil.example"}).status_code == 403
    assert client.post(cancel(queued[0]), headers={"Origin": "null"}).status_code == 403
    assert client.post(cancel(queued[0]), headers={"Referer": "https://evil.example/x"}).status_code == 403
    by_origin = client.post(cancel(queued[0]), headers={"Origin": OWN})
    assert by_origin.status_code == 200 and by_origin.json()["status"] == "cancelled"
    by_referer = client.post(cancel(queued[3]), headers={"Referer": f"{OWN}/analyses/{queued[3]}"})
    assert by_referer.status_code == 200 and by_referer.json()["status"] == "cancelled"


def test_dashboard_form_posts_signed_by_cookie_need_proof_too(signed_in):
    client, queued = signed_in
    refused = client.post(f"/analyses/{queued[3]}/cancel", follow_redirects=False)
    assert refused.status_code == 403
    done = client.post(f"/analyses/{queued[3]}/cancel", headers={"Origin": OWN}, follow_redirects=False)
    assert done.status_code == 303


def test_open_server_refuses_posts_from_another_sites_pages(client: TestClient):
    register = {"name": "w", "device_kind": "cpu", "backends": [], "environment": {}}
    foreign = client.post("/api/v1/workers/register", json=register, headers={"Origin": "https://evil.example"})
    assert foreign.status_code == 403
    assert client.post("/api/v1/workers/register", json=register).status_code == 200  # scripts send no Origin
