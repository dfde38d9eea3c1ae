"""`npu-advisor db upgrade`: apply the server's database migrations (also done when the server starts)."""

from __future__ import annotations

import typer

db_app = typer.Typer(help="The server's database.", no_args_is_help=True)


@db_app.command("upgrade")
def upgrade() -> None:
    """Migrate the database (ADVISOR_DATABASE_URL, default <ADVISOR_DATA_DIR>/advisor.db) to the newest schema."""
    from app.db import create_db_engine, current_revision, upgrade_database
    from app.settings import get_settings

    settings = get_settings()
    engine = create_db_engine(settings.resolved_database_url)
    try:
        before = current_revision(engine)
        after = upgrade_database(engine)
    except Exception as exc:  # noqa: BLE001 - shown as a one-line error, not a traceback
        typer.echo(f"error: could not migrate {_redacted(settings.resolved_database_url)}: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        engine.dispose()
    change = "already up to date" if before == after else f"upgraded from {before or 'empty'}"
    typer.echo(f"database {_redacted(settings.resolved_database_url)} at revision {after} ({change})")


def _redacted(url: str) -> str:
    """The URL without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
