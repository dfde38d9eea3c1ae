"""Fixtures for the service tests: a migrated temp-file SQLite database, a movable clock, an app."""

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
from app.job_queue import JobQueue, QueuePolicy
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


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'advisor.db'}"


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    engine = create_db_engine(db_url)
    upgrade_database(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def policy() -> QueuePolicy:
    return QueuePolicy(lease_ttl_s=60, max_attempts=3, backoff_base_s=10, backoff_cap_s=100, backoff_jitter=0.1)


@pytest.fixture
def queue(policy: QueuePolicy, clock: FakeClock) -> JobQueue:
    return JobQueue(policy, clock=clock)


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


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", max_upload_mb=4, max_inputs_mb=1, lease_ttl_s=60, poll_timeout_s=1)


@pytest.fixture(scope="session")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ExportedProgram (advisor.harness.examples' mlp), exported once per test session."""
    from advisor.harness.examples import export_example

    return export_example("mlp", tmp_path_factory.mktemp("models") / "mlp.pt2")


@pytest.fixture
def make_app(settings: Settings, clock: FakeClock):  # noqa: ANN201
    """Build an app on the test's data dir (call again for a 'restarted' server on the same files)."""
    from app.main import create_app

    def build(**overrides):  # noqa: ANN003, ANN202
        return create_app(settings.model_copy(update=overrides), clock=clock)

    return build


@pytest.fixture
def client(make_app) -> Iterator:  # noqa: ANN001
    from fastapi.testclient import TestClient

    with TestClient(make_app()) as test_client:
        yield test_client


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
