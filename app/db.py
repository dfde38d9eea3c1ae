"""Database engine and schema migrations.

SQLite (default) gets WAL, a busy timeout, foreign keys and `BEGIN IMMEDIATE` write transactions (the
SQLAlchemy pysqlite recipe: pysqlite's own BEGIN is switched off and the `begin` event issues ours).
SQLite has one writer at a time, so the process serialises its own write transactions on a `WriteGate`
instead of letting threads fight over the file lock: a write transaction takes the gate before its
`BEGIN IMMEDIATE` and gives it back at its COMMIT / ROLLBACK. Whoever cannot have it within
`write_wait_s` (or finds `max_waiting` threads already queued for it) gets `DatabaseBusy`, which the
API answers with 503 and Retry-After; a write started on an event loop's own thread (an async route
using its session directly) waits at most ON_LOOP_WAIT_S, so that it cannot stall every request. The
file lock's `busy_timeout` is then only about other processes (the CLI, a second server). Read-only
work (GET requests) issues a plain deferred `BEGIN` and takes no gate: under WAL a reader sees a
consistent snapshot and never blocks, nor waits for, writers. PostgreSQL works by URL with the same
code (row locks, no gate). The schema comes only from Alembic migrations.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlmodel import Session

import migrations
from app.service_errors import ErrorCode, ServiceError

MIGRATIONS_DIR = Path(migrations.__file__).resolve().parent
# Other processes only (the CLI, a second server): in-process writers queue on the WriteGate instead.
SQLITE_BUSY_TIMEOUT_MS = 5_000
WRITE_WAIT_S = 5.0  # how long a write transaction waits for the process's SQLite write gate
MAX_WRITE_WAITING = 16  # threads already queued for the gate beyond which a writer is refused at once
ON_LOOP_WAIT_S = 0.1  # the most a write started on an event loop's thread waits for the gate
POOL_SIZE = 10
POOL_MAX_OVERFLOW = 30  # with POOL_SIZE: anyio's 40 worker threads each get a connection
POOL_TIMEOUT_S = 5.0  # then sqlalchemy.exc.TimeoutError, answered 503


class DatabaseBusy(ServiceError):
    """The database's write gate could not be had in time; the API answers 503 with Retry-After."""

    code = ErrorCode.BUSY


class WriteGate:
    """One SQLite write transaction at a time in this process, taken with a timeout.

    A plain `threading.Lock`, owned by the DBAPI connection whose transaction holds it (its COMMIT or
    ROLLBACK may run on another thread than its BEGIN: FastAPI moves a request between threads)."""

    def __init__(self, *, wait_s: float = WRITE_WAIT_S, max_waiting: int = MAX_WRITE_WAITING) -> None:
        self.wait_s = wait_s
        self.max_waiting = max_waiting
        self._lock = threading.Lock()
        self._counter = threading.Lock()
        self._waiting = 0
        self._owner: Any = None

    @property
    def waiting(self) -> int:
        return self._waiting

    @property
    def held(self) -> bool:
        return self._lock.locked()

    def acquire(self, owner: Any) -> None:
        """Take the gate for `owner` or raise DatabaseBusy (after `wait_s`, or at once when the queue is full)."""
        if not self._lock.acquire(blocking=False):
            with self._counter:
                if self._waiting >= self.max_waiting:
                    raise DatabaseBusy(f"{self._waiting} database writes are already waiting; retry shortly")
                self._waiting += 1
            # on an event loop's thread (an async route using its session directly) a wait stalls every request
            wait_s = min(self.wait_s, ON_LOOP_WAIT_S) if _on_event_loop() else self.wait_s
            try:
                acquired = self._lock.acquire(timeout=wait_s)
            finally:
                with self._counter:
                    self._waiting -= 1
            if not acquired:
                raise DatabaseBusy(f"the database stayed busy with other writes for {wait_s:g} s; retry shortly")
        self._owner = owner

    def release(self, owner: Any) -> None:
        """Give the gate back if `owner` holds it (safe to call for any connection, any number of times)."""
        if owner is not None and self._owner is owner:
            self._owner = None
            self._lock.release()


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def write_gate(engine: Engine) -> WriteGate | None:
    """The engine's WriteGate (SQLite), or None."""
    return getattr(engine.dialect, "advisor_write_gate", None)


def create_db_engine(
    url: str,
    *,
    pool_size: int = POOL_SIZE,
    max_overflow: int = POOL_MAX_OVERFLOW,
    pool_timeout_s: float = POOL_TIMEOUT_S,
    write_wait_s: float = WRITE_WAIT_S,
    max_write_waiting: int = MAX_WRITE_WAITING,
) -> Engine:
    """An engine for `url`; SQLite files get their parent directory created, the pragmas set and a WriteGate.

    The pool holds `pool_size` connections plus `max_overflow` more under load; a request that cannot get
    one within `pool_timeout_s` fails with sqlalchemy.exc.TimeoutError (the API answers 503)."""
    pool = {"pool_size": pool_size, "max_overflow": max_overflow, "pool_timeout": pool_timeout_s}
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, **pool)
    database = url.split("///", 1)[1] if "///" in url else ""
    in_memory = not database or database == ":memory:" or "mode=memory" in url
    if not in_memory:
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
        **({} if in_memory else pool),
    )
    event.listen(engine, "connect", _configure_sqlite_connection)
    _install_gate(engine, WriteGate(wait_s=write_wait_s, max_waiting=max_write_waiting))
    return engine


def _install_gate(engine: Engine, gate: WriteGate) -> None:
    """Write transactions take `gate` before BEGIN IMMEDIATE and give it back after COMMIT / ROLLBACK."""

    def begin(conn) -> None:  # noqa: ANN001 - SQLAlchemy Connection
        if conn.get_execution_options().get(READ_ONLY_OPTION):
            conn.exec_driver_sql("BEGIN")
            return
        owner = _raw(conn.connection)
        gate.acquire(owner)
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            gate.release(owner)
            raise

    dialect = engine.dialect  # this engine's own (also its read-only variant's, and kept by dispose())
    dialect.advisor_write_gate = gate  # type: ignore[attr-defined]
    do_commit, do_rollback = dialect.do_commit, dialect.do_rollback

    def commit(dbapi_connection) -> None:  # noqa: ANN001
        try:
            do_commit(dbapi_connection)
        finally:
            gate.release(_raw(dbapi_connection))

    def rollback(dbapi_connection) -> None:  # noqa: ANN001
        try:
            do_rollback(dbapi_connection)
        finally:
            gate.release(_raw(dbapi_connection))

    dialect.do_commit = commit  # type: ignore[method-assign]
    dialect.do_rollback = rollback  # type: ignore[method-assign]
    event.listen(engine, "begin", begin)
    # a connection closed or invalidated inside its transaction (a driver error) must not keep the gate
    event.listen(engine, "checkin", lambda dbapi_connection, _record: gate.release(dbapi_connection))
    event.listen(engine, "invalidate", lambda dbapi_connection, _record, _exc: gate.release(dbapi_connection))
    event.listen(engine, "close", lambda dbapi_connection, _record: gate.release(dbapi_connection))


def _raw(connection: Any) -> Any:
    """The DBAPI connection behind a pool proxy (or itself)."""
    return getattr(connection, "dbapi_connection", connection)


def _configure_sqlite_connection(dbapi_connection, _record) -> None:  # noqa: ANN001 - DBAPI types
    dbapi_connection.isolation_level = None  # we issue BEGIN ourselves (see _install_gate)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


READ_ONLY_OPTION = "advisor_read_only"  # a connection execution option: this transaction only reads


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


MIGRATION_LOCK_KEY = 0x6E70755F616476  # "npu_adv": the PostgreSQL advisory lock replicas migrate under


def upgrade_database(engine: Engine) -> str | None:
    """Apply every pending migration; returns the revision the database is now at.

    On PostgreSQL the migrations run under a transaction-scoped advisory lock, so API replicas starting together
    take turns: the first applies them (PostgreSQL's DDL is transactional: all or nothing), the others wait for its
    commit and then find the database at head, with nothing left to apply."""
    config = alembic_config()
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    return current_revision(engine)


def current_revision(engine: Engine) -> str | None:
    with read_only_engine(engine).connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def database_ready(engine: Engine) -> tuple[bool, str]:
    """(ready, reason): the database answers and is migrated to the newest revision (read-only: no write gate)."""
    engine = read_only_engine(engine)
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
