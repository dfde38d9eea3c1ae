"""Bearer tokens and roles: who may call what, and when tokens are required."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from app.auth import create_token, hash_token
from app.models import ApiToken
from app.settings import Settings, auth_mode


@pytest.fixture
def secured(make_app):  # noqa: ANN001, ANN201
    with TestClient(make_app(require_auth=True)) as client:
        yield client


def token_for(client: TestClient, role: str, name: str | None = None) -> dict[str, str]:
    with Session(client.app.state.engine) as session:
        _, token = create_token(session, role=role, name=name or role, now=client.app.state.queue.clock())
    return {"Authorization": f"Bearer {token}"}


def test_tokens_are_stored_hashed(secured):
    headers = token_for(secured, "user")
    token = headers["Authorization"].split()[1]
    with Session(secured.app.state.engine) as session:
        row = session.exec(select(ApiToken)).one()
    assert row.token_hash == hash_token(token) and token not in row.token_hash
    assert len(token) >= 40


def test_missing_or_bad_token_is_401_with_a_way_forward(secured):
    missing = secured.get("/api/v1/analyses")
    assert missing.status_code == 401
    assert "npu-advisor token create" in missing.json()["detail"]
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = secured.get("/api/v1/analyses", headers={"Authorization": "Bearer npa_nope"})
    assert wrong.status_code == 401 and "unknown or revoked" in wrong.json()["detail"]
    scheme = secured.get("/api/v1/analyses", headers={"Authorization": "Basic abc"})
    assert scheme.status_code == 401 and "Bearer <token>" in scheme.json()["detail"]


def test_revoked_token_is_refused(secured):
    headers = token_for(secured, "user")
    with Session(secured.app.state.engine) as session:
        row = session.exec(select(ApiToken)).one()
        row.revoked = True
        session.add(row)
        session.commit()
    assert secured.get("/api/v1/analyses", headers=headers).status_code == 401


def test_user_submits_and_is_recorded_as_submitter(secured, model_file):
    headers = token_for(secured, "user", "alice")
    with open(model_file, "rb") as fh:
        response = secured.post(
            "/api/v1/analyze",
            headers=headers,
            files={"model": ("m.pt2", fh)},
            data={"context": json.dumps({"target": "cpu"})},
        )
    assert response.status_code == 202
    detail = secured.get(f"/api/v1/analyses/{response.json()['id']}", headers=headers).json()
    assert detail["submitted_by"] == "alice"
    mine = secured.get("/api/v1/analyses", headers=headers, params={"submitter": "alice"}).json()
    assert mine["total"] == 1


def test_worker_token_is_limited_to_the_worker_protocol_and_downloads(secured, model_file):
    user, worker = token_for(secured, "user"), token_for(secured, "worker", "npu-node-1")
    with open(model_file, "rb") as fh:
        secured.post(
            "/api/v1/analyze",
            headers=user,
            files={"model": ("m.pt2", fh)},
            data={"context": json.dumps({"target": "cpu"})},
        )
    forbidden = secured.get("/api/v1/analyses", headers=worker)
    assert forbidden.status_code == 403 and "needs a admin or user token" in forbidden.json()["detail"]
    with open(model_file, "rb") as fh:
        assert secured.post("/api/v1/analyze", headers=worker, files={"model": ("m.pt2", fh)}).status_code == 403

    registered = secured.post(
        "/api/v1/workers/register", headers=worker, json={"name": "n1", "device_kind": "cpu", "backends": ["eager"]}
    )
    assert registered.status_code == 200
    lease = secured.post(f"/api/v1/workers/{registered.json()['worker_id']}/claim", headers=worker).json()
    assert secured.get(lease["job"]["artifact_url"], headers=worker).status_code == 200

    assert (
        secured.post("/api/v1/workers/register", headers=user, json={"name": "n2", "device_kind": "cpu"}).status_code
        == 403
    )


def test_admin_may_do_both(secured):
    admin = token_for(secured, "admin")
    assert secured.get("/api/v1/analyses", headers=admin).status_code == 200
    assert (
        secured.post("/api/v1/workers/register", headers=admin, json={"name": "n", "device_kind": "cpu"}).status_code
        == 200
    )


def test_health_endpoints_stay_open(secured):
    assert secured.get("/healthz").status_code == 200
    assert secured.get("/readyz").status_code == 200
    assert secured.get("/metrics").status_code == 200


def test_open_loopback_server_needs_no_token(client):
    assert client.get("/api/v1/analyses").status_code == 200


@pytest.mark.parametrize(
    ("host", "explicit", "required"),
    [
        ("127.0.0.1", None, False),
        ("::1", None, False),
        ("0.0.0.0", None, True),
        ("10.1.2.3", None, True),
        ("127.0.0.1", True, True),
        ("0.0.0.0", False, False),
    ],
)
def test_auth_mode_follows_the_listen_address(host, explicit, required):
    mode = auth_mode(Settings(host=host, require_auth=explicit))
    assert mode.required is required
    assert mode.message.startswith("auth: ")
    if not required and host != "127.0.0.1" and host != "::1":
        assert "OPEN" in mode.message


def test_unknown_role_is_refused(secured):
    with Session(secured.app.state.engine) as session, pytest.raises(ValueError, match="unknown role"):
        create_token(session, role="root", name="x", now=secured.app.state.queue.clock())
