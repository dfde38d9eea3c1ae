"""Fixtures for the service tests: a migrated temp-file SQLite database (a copy of one migrated once per test
process), a movable clock, an app.

The helpers they use (the clock, sessions, PostgreSQL) live in tests/support/service_db.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from app.db import create_db_engine, upgrade_database
from app.job_queue import JobQueue, QueuePolicy
from app.settings import Settings
from tests.support.s3_server import CREDENTIALS, REGION, moto_endpoint
from tests.support.service_db import FakeClock, migrated_settings, migrated_sqlite


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return migrated_sqlite(f"sqlite:///{tmp_path / 'advisor.db'}")


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


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "data", max_upload_mb=4, max_inputs_mb=1, lease_ttl_s=60, poll_timeout_s=1)


@pytest.fixture(scope="session")
def model_file(example_mlp_file: Path) -> Path:
    """A real ExportedProgram (advisor.harness.examples' mlp), exported once per test session (tests/conftest.py)."""
    return example_mlp_file


@pytest.fixture
def make_app(settings: Settings, clock: FakeClock):  # noqa: ANN201
    """Build an app on the test's data dir (call again for a 'restarted' server on the same files)."""
    from app.main import create_app

    def build(**overrides):  # noqa: ANN003, ANN202
        return create_app(migrated_settings(settings.model_copy(update=overrides)), clock=clock)

    return build


@pytest.fixture
def client(make_app) -> Iterator:  # noqa: ANN001
    from fastapi.testclient import TestClient

    with TestClient(make_app()) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3 protocol server (moto) on a free port of 127.0.0.1, for the session (skips without moto)."""
    with moto_endpoint() as url:
        yield url


@pytest.fixture
def s3_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The credentials come from the environment, as boto3 reads them everywhere."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def s3(s3_endpoint: str, s3_credentials: None):  # noqa: ANN201
    from app.object_store import s3_client

    return s3_client(endpoint_url=s3_endpoint, region=REGION)


@pytest.fixture
def bucket(s3) -> str:  # noqa: ANN001
    """A fresh bucket."""
    import uuid

    name = f"advisor-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name
