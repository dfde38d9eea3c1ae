"""The token of `npu-advisor serve`'s embedded worker on a server that requires auth.

ADVISOR_WORKER_TOKEN when configured; otherwise serve creates a worker token at each start (stored hashed in the
database, like every token) and hands it to its worker process by environment only: it is never written to a file,
so no sandbox can read it and no child can make the host read it. The embedded worker tokens of earlier starts are
revoked then, so they do not pile up and one that leaked is dead at the next start; a token file an older version
kept in the data dir is removed. Nothing here logs a token.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import select

from app.auth import create_token
from app.db import create_db_engine, session_scope, upgrade_database
from app.models import ApiToken
from app.settings import Settings

LEGACY_TOKEN_FILE_NAME = "embedded-worker.token"  # where versions before issue 26 kept it
EMBEDDED_WORKER_TOKEN_NAME = "embedded-worker"


@dataclass(frozen=True)
class EmbeddedWorkerToken:
    token: str
    source: str  # where it came from, for one log line (never the token itself)


def legacy_token_file(settings: Settings) -> Path:
    return settings.data_dir / LEGACY_TOKEN_FILE_NAME


def embedded_worker_token(settings: Settings, *, now: datetime) -> EmbeddedWorkerToken:
    """The configured token, or a new worker token for this start (earlier starts' revoked)."""
    legacy_token_file(settings).unlink(missing_ok=True)
    if settings.worker_token is not None and settings.worker_token.get_secret_value():
        return EmbeddedWorkerToken(settings.worker_token.get_secret_value(), "ADVISOR_WORKER_TOKEN")
    engine = create_db_engine(settings.resolved_database_url)
    try:
        upgrade_database(engine)
        with session_scope(engine) as session:
            earlier = select(ApiToken).where(
                ApiToken.name == EMBEDDED_WORKER_TOKEN_NAME, ApiToken.role == "worker", ApiToken.revoked.is_(False)
            )
            for row in session.scalars(earlier):
                row.revoked = True
            _row, token = create_token(session, role="worker", name=EMBEDDED_WORKER_TOKEN_NAME, now=now)
    finally:
        engine.dispose()
    return EmbeddedWorkerToken(token, "a new worker token for this start, held in memory only")
