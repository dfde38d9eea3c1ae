"""The token of `npu-advisor serve`'s embedded worker on a server that requires auth.

ADVISOR_WORKER_TOKEN when configured; otherwise a worker token that serve creates once (stored hashed in
the database, like every token) and keeps in `<data dir>/embedded-worker.token` (mode 0600), so later
starts on the same data dir reuse it instead of adding a new token each time. Nothing here logs a token.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from app.auth import authenticate, create_token
from app.db import create_db_engine, session_scope, upgrade_database
from app.settings import Settings

TOKEN_FILE_NAME = "embedded-worker.token"
EMBEDDED_WORKER_TOKEN_NAME = "embedded-worker"


@dataclass(frozen=True)
class EmbeddedWorkerToken:
    token: str
    source: str  # where it came from, for one log line (never the token itself)


def token_file(settings: Settings) -> Path:
    return settings.data_dir / TOKEN_FILE_NAME


def embedded_worker_token(settings: Settings, *, now: datetime) -> EmbeddedWorkerToken:
    """The configured token, the one kept in the data dir while it is a valid worker token, or a new one."""
    if settings.worker_token is not None and settings.worker_token.get_secret_value():
        return EmbeddedWorkerToken(settings.worker_token.get_secret_value(), "ADVISOR_WORKER_TOKEN")
    path = token_file(settings)
    engine = create_db_engine(settings.resolved_database_url)
    try:
        upgrade_database(engine)
        with session_scope(engine) as session:
            kept = _read(path)
            principal = authenticate(session, kept, now=now) if kept else None
            if principal is not None and principal.role == "worker":
                return EmbeddedWorkerToken(kept, f"the worker token kept in {path}")
            _row, token = create_token(session, role="worker", name=EMBEDDED_WORKER_TOKEN_NAME, now=now)
    finally:
        engine.dispose()
    _write_private(path, token)
    return EmbeddedWorkerToken(token, f"a new worker token, kept in {path} (mode 0600) for later starts")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None


def _write_private(path: Path, token: str) -> None:
    """Owner-only from the first byte (created 0600, then renamed over any earlier file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(descriptor, 0o600)  # also when the temp file was left over with wider permissions
        os.write(descriptor, (token + "\n").encode())
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
