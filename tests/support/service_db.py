"""The service tests' database helpers: a clock moved by hand, a session per actor, an Analysis row to point
jobs at, the artifact store's files, and the shared PostgreSQL database taken in turns."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlmodel import Session

from app.db import create_db_engine, upgrade_database
from app.models import Analysis, Artifact
from app.settings import Settings


class FakeClock:
    """The queue's clock, moved by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def new_session(engine: Engine) -> Session:
    """A separate session (and connection) per actor, as separate server requests would have."""
    return Session(engine, expire_on_commit=False)


def add_analysis(engine: Engine, clock: FakeClock, target: str = "cpu") -> int:
    """An Analysis row for jobs to point at (the queue tests do not go through the API)."""
    with new_session(engine) as session:
        if session.get(Artifact, "0" * 64) is None:
            session.add(Artifact(sha256="0" * 64, size_bytes=1, created_at=clock()))
            session.commit()
        analysis = Analysis(
            model_name="m",
            target=target,
            artifact_sha256="0" * 64,
            context={},
            dedupe_key="k",
            created_at=clock(),
            updated_at=clock(),
        )
        session.add(analysis)
        session.commit()
        return analysis.id


_MIGRATED: list[bytes] = []  # this process's migrated SQLite file, once a test asked for one


def migrated_sqlite(url: str) -> str:
    """`url`, whose SQLite file (when it has none yet) starts as a copy of a file the product's own
    `upgrade_database` brought to head once per test process: the app then finds its database at head, as after a
    restart, instead of applying every migration again (~20 ms of CPU for each of several hundred apps a run).
    tests/service/test_migrations.py applies them to empty databases; other URLs are returned as they are."""
    database = url.split("///", 1)[1] if url.startswith("sqlite:///") else ""
    if not database or database == ":memory:" or "?" in database or Path(database).exists():
        return url
    if not _MIGRATED:
        with tempfile.TemporaryDirectory(prefix="npu-advisor-migrated-") as scratch:
            engine = create_db_engine(f"sqlite:///{scratch}/advisor.db")
            upgrade_database(engine)
            engine.dispose()  # the last connection closed: the write-ahead log is folded into the file
            _MIGRATED.append((Path(scratch) / "advisor.db").read_bytes())
    Path(database).parent.mkdir(parents=True, exist_ok=True)
    Path(database).write_bytes(_MIGRATED[0])
    return url


def migrated_settings(settings: Settings) -> Settings:
    """`settings`, their SQLite database started as `migrated_sqlite` starts one."""
    migrated_sqlite(settings.resolved_database_url)
    return settings


def stored_files(settings: Settings) -> list[Path]:
    """Every file in the artifact store, temp files included."""
    root = settings.artifacts_dir
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@contextlib.contextmanager
def postgres_to_ourselves() -> Iterator[None]:
    """The PostgreSQL tests share one database (ADVISOR_TEST_POSTGRES_URL) and each drops its schema first: the
    pytest-xdist workers (and any other test run on this machine) take turns."""
    with open(Path(tempfile.gettempdir()) / "npu-advisor-postgres-tests.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def empty_postgres() -> Iterator[str]:
    """ADVISOR_TEST_POSTGRES_URL with an empty schema, ours until the block ends (the test skips without it)."""
    url = os.environ.get("ADVISOR_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("needs a PostgreSQL server: set ADVISOR_TEST_POSTGRES_URL=postgresql+psycopg://...")
    from sqlalchemy import text

    with postgres_to_ourselves():
        engine = create_db_engine(url)
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        engine.dispose()
        yield url


@pytest.fixture(params=["sqlite", "postgresql"], name="engine")
def engine_on_both_databases(request: pytest.FixtureRequest, db_url: str) -> Iterator[Engine]:
    """The queue tests' engine, on SQLite and on an empty PostgreSQL (skipped, saying so, without one): a test
    module that imports it overrides conftest's SQLite-only `engine`."""
    with empty_postgres() if request.param == "postgresql" else contextlib.nullcontext(db_url) as url:
        engine = create_db_engine(url)
        upgrade_database(engine)
        yield engine
        engine.dispose()
