"""Alembic environment: the schema is app.models' SQLModel metadata; batch mode so SQLite can ALTER."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

import app.models  # noqa: F401 - registers the tables on SQLModel.metadata
from app.db import create_db_engine
from app.settings import get_settings

target_metadata = SQLModel.metadata


def _run(connection) -> None:  # noqa: ANN001 - SQLAlchemy Connection
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:  # app.db.upgrade_database passes its own connection
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url
    engine = create_db_engine(url)
    with engine.begin() as connection:
        _run(connection)
    engine.dispose()


def run_migrations_offline() -> None:
    url = context.config.get_main_option("sqlalchemy.url") or get_settings().resolved_database_url
    context.configure(url=url, target_metadata=target_metadata, render_as_batch=True, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
