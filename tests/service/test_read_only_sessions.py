"""GET requests read in deferred transactions (no SQLite write lock); everything else writes with BEGIN IMMEDIATE."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlmodel import Session

from app.deps import get_session
from app.models import ApiToken


def can_write_now(database: str) -> bool:
    """Whether another connection gets the write lock at once (timeout 0: no waiting on busy_timeout)."""
    other = sqlite3.connect(database, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
        return False
    finally:
        other.close()


@pytest.mark.parametrize(("method", "holds_write_lock"), [("GET", False), ("HEAD", False), ("POST", True)])
def test_request_session_takes_the_write_lock_only_for_state_changing_methods(
    make_app, settings, method, holds_write_lock
):
    app = make_app()
    request = SimpleNamespace(method=method, app=app)
    sessions = get_session(request)
    session: Session = next(sessions)
    session.execute(text("SELECT count(*) FROM analysis")).scalar()  # the transaction is open now
    assert can_write_now(str(settings.data_dir / "advisor.db")) is not holds_write_lock
    sessions.close()
    app.state.engine.dispose()


def test_a_get_with_a_bearer_token_still_records_its_last_use(make_app):
    from app.auth import create_token

    with TestClient(make_app(require_auth=True)) as client:
        engine = client.app.state.engine
        with Session(engine) as session:
            row, token = create_token(session, role="user", name="u", now=client.app.state.queue.clock())
            token_id = row.id
        assert client.get("/api/v1/analyses", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        with Session(engine) as session:
            assert session.get(ApiToken, token_id).last_used_at is not None
