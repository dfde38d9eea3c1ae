"""`npu-advisor token create|list|revoke`: bearer tokens for the server, stored hashed, printed once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from sqlmodel import Session

token_app = typer.Typer(help="API tokens for the server (stored hashed; shown once).", no_args_is_help=True)


class Role(StrEnum):
    admin = "admin"
    user = "user"
    worker = "worker"


@contextmanager
def _database() -> Iterator[Session]:
    # the server's database layer, imported by the commands that use it rather than by every CLI start (~0.2 s)
    from sqlmodel import Session

    from app.db import create_db_engine, upgrade_database
    from app.settings import get_settings

    engine = create_db_engine(get_settings().resolved_database_url)
    try:
        upgrade_database(engine)
        with Session(engine) as session:
            yield session
    finally:
        engine.dispose()


@token_app.command("create")
def create(
    role: Role = typer.Option(..., "--role", help="admin: everything; user: submit and read; worker: queue protocol"),
    name: str = typer.Option("", "--name", help="who or what uses it (shown as the submitter); default: the role"),
) -> None:
    """Create a token in the server's database and print it (it cannot be shown again)."""
    from app.auth import create_token
    from app.job_queue import utcnow

    try:
        with _database() as session:
            row, token = create_token(session, role=role.value, name=name or role.value, now=utcnow())
            token_id = row.id
    except Exception as exc:  # noqa: BLE001 - one-line error for the user
        typer.echo(f"error: could not create the token: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(token)
    typer.echo(f"token {token_id} ({role.value}, {name or role.value}) created; it is not shown again", err=True)


@token_app.command("list")
def list_tokens() -> None:
    """List tokens (id, role, name, created, last used, revoked); the tokens themselves are never stored."""
    from sqlmodel import select

    from app.models import ApiToken

    with _database() as session:
        rows = session.exec(select(ApiToken).order_by(ApiToken.id)).all()
        for row in rows:
            used = row.last_used_at.isoformat(timespec="seconds") if row.last_used_at else "never"
            state = "revoked" if row.revoked else "active"
            created = f"{row.created_at:%Y-%m-%d %H:%M}"
            typer.echo(f"{row.id}\t{row.role}\t{row.name}\tcreated {created}\tused {used}\t{state}")
        session.rollback()


@token_app.command("revoke")
def revoke(token_id: int = typer.Argument(..., help="the id shown by `npu-advisor token list`")) -> None:
    """Revoke a token: requests carrying it get 401 from then on."""
    from app.models import ApiToken

    with _database() as session:
        row = session.get(ApiToken, token_id)
        if row is None:
            session.rollback()
            typer.echo(f"error: no token with id {token_id}; see `npu-advisor token list`", err=True)
            raise typer.Exit(1)
        row.revoked = True
        session.add(row)
        session.commit()
    typer.echo(f"token {token_id} revoked", err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(token_app, name="token")
