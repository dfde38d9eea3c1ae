"""The embedded worker's token: ADVISOR_WORKER_TOKEN, else one token created once and kept 0600 in the data dir."""

from __future__ import annotations

import stat
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlmodel import Session

from app.auth import authenticate
from app.db import create_db_engine
from app.models import ApiToken
from app.worker_token import embedded_worker_token, token_file

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def tokens_in(settings) -> int:  # noqa: ANN001
    engine = create_db_engine(settings.resolved_database_url)
    with Session(engine) as session:
        count = session.scalar(select(func.count()).select_from(ApiToken))
    engine.dispose()
    return count


def test_configured_worker_token_is_used_and_nothing_is_created(settings, monkeypatch):
    monkeypatch.setenv("ADVISOR_WORKER_TOKEN", "npa_from-the-environment")
    configured = type(settings)(data_dir=settings.data_dir)
    found = embedded_worker_token(configured, now=NOW)
    assert found.token == "npa_from-the-environment" and found.source == "ADVISOR_WORKER_TOKEN"
    assert "npa_from" not in repr(configured)  # a SecretStr: not in logs or reprs
    assert not token_file(configured).exists()


def test_created_token_is_kept_private_and_reused_on_the_next_start(settings):
    first = embedded_worker_token(settings, now=NOW)
    path = token_file(settings)
    assert first.token not in first.source and str(path) in first.source
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text().strip() == first.token
    engine = create_db_engine(settings.resolved_database_url)
    with Session(engine) as session:
        principal = authenticate(session, first.token, now=NOW)
        assert principal is not None and principal.role == "worker"
        stored = session.scalars(select(ApiToken)).one()
        assert stored.token_hash != first.token  # only the hash is in the database
    engine.dispose()

    second = embedded_worker_token(settings, now=NOW)
    assert second.token == first.token and tokens_in(settings) == 1


def test_a_revoked_kept_token_is_replaced(settings):
    first = embedded_worker_token(settings, now=NOW)
    engine = create_db_engine(settings.resolved_database_url)
    with Session(engine) as session:
        row = session.scalars(select(ApiToken)).one()
        row.revoked = True
        session.commit()
    engine.dispose()
    second = embedded_worker_token(settings, now=NOW)
    assert second.token != first.token and token_file(settings).read_text().strip() == second.token
    assert stat.S_IMODE(token_file(settings).stat().st_mode) == 0o600


def test_serve_says_where_the_token_came_from_but_never_prints_it(settings, capsys):
    from advisor.cli.serve_cmd import _embedded_worker_token

    token = _embedded_worker_token(settings)
    said = capsys.readouterr()
    assert "embedded worker: using a new worker token" in said.err
    assert token not in said.err + said.out
    assert _embedded_worker_token(settings) == token and tokens_in(settings) == 1
