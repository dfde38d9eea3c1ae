"""/readyz tells anyone ready or not; where the artifacts live and the database's revision only to an admin."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from app.auth import create_token
from app.cookie_auth import COOKIE_NAME
from app.db import head_revision

PLAIN_KEYS = {"status", "database", "store"}


@pytest.fixture
def secured(make_app):  # noqa: ANN001, ANN201
    app = make_app(require_auth=True)
    with Session(app.state.engine) as session:
        tokens = {
            role: create_token(session, role=role, name=role, now=app.state.queue.clock())[1]
            for role in ("admin", "user", "worker")
        }
    with TestClient(app) as client:
        yield client, tokens


def revealing(body: dict, settings) -> list[str]:  # noqa: ANN001
    text = repr(body)
    leaks = [head_revision(), str(settings.data_dir), "revision", "artifact store", "local"]
    return [leak for leak in leaks if leak in text]


def test_anyone_reads_ready_and_nothing_about_the_deployment(secured):
    client, tokens = secured
    settings = client.app.state.settings
    callers = {
        "nobody": {},
        "user": {"Authorization": f"Bearer {tokens['user']}"},
        "worker": {"Authorization": f"Bearer {tokens['worker']}"},
        "unknown token": {"Authorization": "Bearer npa_not-a-token"},
        "malformed": {"Authorization": f"Basic {tokens['admin']}"},
    }
    for who, headers in callers.items():
        answer = client.get("/readyz", headers=headers)
        assert answer.status_code == 200, (who, answer.text)
        body = answer.json()
        assert body == {"status": "ready", "database": {"ready": True}, "store": {"ready": True}}, who
        assert set(body) == PLAIN_KEYS and not revealing(body, settings), who


def test_an_admin_reads_the_details_by_token_or_cookie(secured):
    client, tokens = secured
    for headers in (
        {"Authorization": f"bearer  {tokens['admin']}"},
        {"Cookie": f"{COOKIE_NAME}={tokens['admin']}"},
    ):
        body = client.get("/readyz", headers=headers).json()
        assert body["status"] == "ready"
        assert body["database"] == {"ready": True, "detail": f"database at revision {head_revision()}"}
        assert body["store"]["kind"] == "local" and str(client.app.state.settings.data_dir) in body["store"]["detail"]
        assert "reason" in body


def test_not_ready_says_which_part_to_anyone_and_why_only_to_an_admin(secured, monkeypatch):
    client, tokens = secured

    def unreachable() -> None:
        raise OSError("bucket s3://secret-bucket/team refused the credentials of key AKIA-SECRET")

    monkeypatch.setattr(client.app.state.store, "check_ready", unreachable)
    anonymous = client.get("/readyz")
    assert anonymous.status_code == 503
    assert anonymous.json() == {"status": "not ready", "database": {"ready": True}, "store": {"ready": False}}
    admin = client.get("/readyz", headers={"Authorization": f"Bearer {tokens['admin']}"})
    assert admin.status_code == 503 and "secret-bucket" in admin.json()["reason"]


def test_the_anonymous_admin_of_an_open_loopback_server_reads_the_details(client):
    body = client.get("/readyz").json()
    assert body["status"] == "ready" and body["database"]["detail"] == f"database at revision {head_revision()}"
