"""Fixtures for the page tests: an app on a temp-file SQLite database, seeded with synthetic analyses."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from app.auth import create_token
from app.main import create_app
from tests.support import synthetic_analyses as synthetic
from tests.support.web_app import Db, make_settings


@pytest.fixture
def app(tmp_path: Path):
    return create_app(make_settings(tmp_path))


@pytest.fixture
def client(app) -> Iterator[TestClient]:
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        yield client


@pytest.fixture
def db(app) -> Db:
    return Db(app.state.engine)


@pytest.fixture
def seeded(db: Db) -> Db:
    """30 analyses: mixed statuses, targets, names and recommended backends."""
    with db.session() as session:
        synthetic.seed_analyses(session, 30)
    return db


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[tuple[TestClient, str, str]]:
    """A server that requires sign-in, with 3 analyses, and (client, a user token, a worker token)."""
    app = create_app(make_settings(tmp_path, require_auth=True))
    with Session(app.state.engine, expire_on_commit=False) as session:
        synthetic.seed_analyses(session, 3)
        now = datetime.now(UTC)
        _, user = create_token(session, role="user", name="alice", now=now)
        _, worker = create_token(session, role="worker", name="node-1", now=now)
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        yield client, user, worker
