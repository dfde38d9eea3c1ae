"""The embedded worker's token: ADVISOR_WORKER_TOKEN, else a new one per start that is never written to a file
(issue 26: a token file is something a child could make the host read), earlier starts' tokens revoked."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlmodel import Session

from app.auth import authenticate
from app.db import create_db_engine
from app.models import ApiToken
from app.worker_token import embedded_worker_token, legacy_token_file

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def live_tokens(settings) -> int:  # noqa: ANN001
    engine = create_db_engine(settings.resolved_database_url)
    with Session(engine) as session:
        count = session.scalar(select(func.count()).select_from(ApiToken).where(ApiToken.revoked.is_(False)))
    engine.dispose()
    return count


def files_holding(directory, secret: str) -> list[str]:  # noqa: ANN001
    return [str(p) for p in directory.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_configured_worker_token_is_used_and_nothing_is_created(settings, monkeypatch):
    monkeypatch.setenv("ADVISOR_WORKER_TOKEN", "npa_from-the-environment")
    configured = type(settings)(data_dir=settings.data_dir)
    found = embedded_worker_token(configured, now=NOW)
    assert found.token == "npa_from-the-environment" and found.source == "ADVISOR_WORKER_TOKEN"
    assert "npa_from" not in repr(configured)  # a SecretStr: not in logs or reprs
    assert not configured.resolved_database_url.endswith(".db") or not any(configured.data_dir.glob("*.db"))


def test_each_start_gets_a_new_token_that_no_file_holds_and_earlier_ones_die(settings):
    first = embedded_worker_token(settings, now=NOW)
    assert first.token not in first.source
    assert files_holding(settings.data_dir, first.token) == []  # not in the data dir, nor in the database file
    engine = create_db_engine(settings.resolved_database_url)
    with Session(engine) as session:
        principal = authenticate(session, first.token, now=NOW)
        assert principal is not None and principal.role == "worker"
    second = embedded_worker_token(settings, now=NOW)
    with Session(engine) as session:
        assert second.token != first.token
        assert authenticate(session, first.token, now=NOW) is None  # a leaked earlier token is dead
        assert authenticate(session, second.token, now=NOW) is not None
    engine.dispose()
    assert live_tokens(settings) == 1


def test_a_token_file_of_an_older_version_is_removed(settings):
    legacy = legacy_token_file(settings)
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_text("npa_old-token\n")
    embedded_worker_token(settings, now=NOW)
    assert not legacy.exists()


def test_serve_says_where_the_token_came_from_but_never_prints_it(settings, capsys):
    from advisor.cli.serve_cmd import _embedded_worker_token

    token = _embedded_worker_token(settings)
    said = capsys.readouterr()
    assert "embedded worker: using a new worker token" in said.err
    assert token not in said.err + said.out
