"""Bearer tokens with roles admin / user / worker. Only the sha256 of a token is stored.

Tokens are 256-bit random strings, so a plain sha256 (no salt, no slow hash) is enough: there is
nothing to brute-force. Lookups go by hash; the final comparison uses hmac.compare_digest.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlmodel import Session

from app.models import ROLES, ApiToken

TOKEN_PREFIX = "npa_"
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's name and role, or the anonymous admin of an open loopback server."""

    name: str
    role: str
    token_id: int | None = None


ANONYMOUS = Principal(name="anonymous", role="admin")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, *, role: str, name: str, now: datetime) -> tuple[ApiToken, str]:
    """Store a new token; (row, the token itself - shown to the user once, never stored)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken(name=name, role=role, token_hash=hash_token(token), created_at=now)
    session.add(row)
    session.commit()
    return row, token


def authenticate(session: Session, token: str, *, now: datetime) -> Principal | None:
    """The principal for a presented token, or None when it is unknown or revoked."""
    presented = hash_token(token)
    try:
        row = session.scalars(select(ApiToken).where(ApiToken.token_hash == presented)).first()
    finally:
        # End the lookup's transaction at once: a write transaction (BEGIN IMMEDIATE) holds SQLite's write lock.
        session.commit()
    if row is None or row.revoked or not hmac.compare_digest(row.token_hash, presented):
        return None
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
        # At most one write a minute per token, in its own short transaction that starts with the write, so
        # it is safe in a read-only (deferred BEGIN) session too: no read snapshot has to be upgraded.
        session.execute(
            update(ApiToken)
            .where(ApiToken.id == row.id)
            .values(last_used_at=now)
            .execution_options(synchronize_session=False)
        )
        session.commit()
    return Principal(name=row.name, role=row.role, token_id=row.id)
