"""Database engine and schema migrations.

SQLite (default) gets WAL, a busy timeout, foreign keys and `BEGIN IMMEDIATE` write transactions so
that concurrent writers wait on `busy_timeout` instead of failing with SQLITE_BUSY (the SQLAlchemy
pysqlite recipe: pysqlite's own BEGIN is switched off and the `begin` event issues ours). Read-only
work (`read_only_session`, used for GET requests) issues a plain deferred `BEGIN` instead: under WAL a
reader sees a consistent snapshot and never blocks, nor waits for, writers and queue claims.
PostgreSQL works by URL with the same code. The schema comes only from Alembic migrations.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlmodel import Session

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
SQLITE_BUSY_TIMEOUT_MS = 15_000  # 16 concurrent claimers on 2 busy cores waited > 5 s


def create_db_engine(url: str) -> Engine:
    """An engine for `url`; SQLite files get their parent directory created and the pragmas set."""
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True)
    database = url.split("///", 1)[1] if "///" in url else ""
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
    event.listen(engine, "connect", _configure_sqlite_connection)
    event.listen(engine, "begin", _begin_immediate)
    return engine


def _configure_sqlite_connection(dbapi_connection, _record) -> None:  # noqa: ANN001 - DBAPI types
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (see _begin_immediate)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


READ_ONLY_OPTION = "advisor_read_only"  # a connection execution option: this transaction only reads


def _begin_immediate(conn) -> None:  # noqa: ANN001 - SQLAlchemy Connection
    """Writers take the write lock up front; read-only connections take none (a deferred BEGIN)."""
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY_OPTION) else "BEGIN IMMEDIATE")


def read_only_engine(engine: Engine) -> Engine:
    """The same engine (pool, events) whose transactions are read-only: deferred `BEGIN` on SQLite."""
    return engine.execution_options(**{READ_ONLY_OPTION: True})


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config pointing at the migrations shipped inside the package."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade_database(engine: Engine) -> str | None:
    """Apply every pending migration; returns the revision the database is now at."""
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    return current_revision(engine)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def database_ready(engine: Engine) -> tuple[bool, str]:
    """(ready, reason): the database answers and is migrated to the newest revision."""
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        current, head = current_revision(engine), head_revision()
    except Exception as exc:  # noqa: BLE001 - any driver error means "not ready", with its text
        return False, f"database unreachable: {exc}"
    if current != head:
        return False, f"database at revision {current}, expected {head}: run `npu-advisor db upgrade`"
    return True, f"database at revision {current}"


@contextmanager
def session_scope(engine: Engine) -> Iterator[Session]:
    """A session that is closed afterwards; callers commit what they write."""
    with Session(engine, expire_on_commit=False) as session:
        yield session
