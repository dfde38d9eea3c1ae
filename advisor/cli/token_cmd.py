"""`npu-advisor token create --role admin|user|worker [--name NAME]`: a bearer token, printed once."""

from __future__ import annotations

from enum import StrEnum

import typer

token_app = typer.Typer(help="API tokens for the server (stored hashed; shown once).", no_args_is_help=True)


class Role(StrEnum):
    admin = "admin"
    user = "user"
    worker = "worker"


@token_app.command("create")
def create(
    role: Role = typer.Option(..., "--role", help="admin: everything; user: submit and read; worker: queue protocol"),
    name: str = typer.Option("", "--name", help="who or what uses it (shown as the submitter); default: the role"),
) -> None:
    """Create a token in the server's database and print it (it cannot be shown again)."""
    from sqlmodel import Session

    from app.auth import create_token
    from app.db import create_db_engine, upgrade_database
    from app.queue import utcnow
    from app.settings import get_settings

    settings = get_settings()
    engine = create_db_engine(settings.resolved_database_url)
    try:
        upgrade_database(engine)
        with Session(engine) as session:
            row, token = create_token(session, role=role.value, name=name or role.value, now=utcnow())
            token_id = row.id
    except Exception as exc:  # noqa: BLE001 - one-line error for the user
        typer.echo(f"error: could not create the token: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        engine.dispose()
    typer.echo(token)
    typer.echo(f"token {token_id} ({role.value}, {name or role.value}) created; it is not shown again", err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(token_app, name="token")
