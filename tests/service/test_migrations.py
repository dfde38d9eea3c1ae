"""The schema comes only from Alembic, and the migrations match the models."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect
from sqlmodel import SQLModel

from app.db import (
    SQLITE_BUSY_TIMEOUT_MS,
    create_db_engine,
    current_revision,
    database_ready,
    head_revision,
    upgrade_database,
)
from tests.support.service_db import empty_postgres


def test_upgrade_from_empty_reaches_head_and_is_idempotent(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    assert database_ready(engine)[0] is False
    assert "npu-advisor db upgrade" in database_ready(engine)[1]
    assert upgrade_database(engine) == head_revision()
    assert upgrade_database(engine) == head_revision()
    tables = set(inspect(engine).get_table_names())
    assert {"artifact", "analysis", "job", "job_event", "worker", "api_token"} <= tables
    assert "measurement" not in tables  # nothing read it: dropped by 0007
    assert database_ready(engine) == (True, f"database at revision {current_revision(engine)}")


def test_migrations_match_the_models(engine):
    import app.models  # noqa: F401

    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    assert diff == [], f"models and migrations differ; add a migration: {diff}"


def test_sqlite_connections_use_wal_foreign_keys_and_a_busy_timeout(engine):
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == SQLITE_BUSY_TIMEOUT_MS


def test_unreachable_database_is_not_ready(tmp_path):
    engine = create_db_engine(f"sqlite:///{tmp_path}")  # a directory, not a database file
    ready, reason = database_ready(engine)
    assert ready is False and reason.startswith("database unreachable")


def test_migration_0003_makes_every_existing_job_a_measure_job(tmp_path):
    from datetime import UTC, datetime

    from alembic import command
    from sqlalchemy import text

    from app.db import alembic_config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    config = alembic_config(url)
    command.upgrade(config, "0002")
    engine = create_db_engine(url)
    now = datetime(2026, 1, 1, tzinfo=UTC).isoformat(" ")
    with engine.begin() as db:
        db.execute(text("INSERT INTO artifact VALUES ('a', 'model', NULL, 1, NULL, NULL, '[]', :now)"), {"now": now})
        db.execute(
            text(
                "INSERT INTO analysis (id, model_name, target, submitted_by, artifact_sha256, context, backends,"
                " dedupe_key, created_at, updated_at) VALUES (1, 'm', 'npu', 'x', 'a', '{}', '[]', 'k', :now, :now)"
            ),
            {"now": now},
        )
        db.execute(
            text(
                "INSERT INTO job (id, analysis_id, device_kind, priority, max_attempts, backends, status, attempts,"
                " available_at, cancel_requested, created_at) VALUES (1, 1, 'npu', 0, 3, '[]', 'queued', 0, :now,"
                " 0, :now)"
            ),
            {"now": now},
        )
    engine.dispose()

    command.upgrade(config, "head")
    engine = create_db_engine(url)
    with engine.begin() as db:
        assert db.execute(text("SELECT purpose FROM job")).scalars().all() == ["measure"]
        db.execute(
            text(
                "INSERT INTO job (id, analysis_id, purpose, device_kind, priority, max_attempts, backends, status,"
                " attempts, available_at, cancel_requested, created_at) VALUES (2, 1, 'inspect', 'any', 10, 3, '[]',"
                " 'queued', 0, :now, 0, :now)"
            ),
            {"now": now},
        )
    engine.dispose()

    command.downgrade(config, "0002")  # an inspect job would read as a measurement to the older code: removed
    engine = create_db_engine(url)
    with engine.connect() as db:
        assert db.execute(text("SELECT id, device_kind FROM job")).all() == [(1, "npu")]
    engine.dispose()
    command.upgrade(config, "head")


def test_migration_0007_drops_the_measurement_table_and_its_downgrade_refills_it_from_the_results(tmp_path):
    """The rows were a copy of each analysis' MeasurementRun; going back to 0006 rebuilds them from it."""
    import json
    from datetime import UTC, datetime

    from alembic import command
    from sqlalchemy import text

    from app.db import alembic_config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    config = alembic_config(url)
    command.upgrade(config, "head")
    engine = create_db_engine(url)
    assert "measurement" not in inspect(engine).get_table_names()
    now = datetime(2026, 1, 1, tzinfo=UTC).isoformat(" ")
    run = {
        "measurements": [
            {"backend": "eager", "mode": None, "device": "cpu", "status": "ok", "latency": {"median_ms": 2.0}},
            {
                "backend": "inductor",
                "mode": "default",
                "device": "cpu",
                "status": "ok",
                "latency": {"median_ms": 1.0},
                "compile_s_cold": 3.5,
                "speedup_vs_eager": 2.0,
            },
        ]
    }
    with engine.begin() as db:
        db.execute(text("INSERT INTO artifact VALUES ('a', 'model', NULL, 1, NULL, NULL, '[]', :now)"), {"now": now})
        for analysis_id, measurements in ((1, json.dumps(run)), (2, None)):  # 2: not measured (yet)
            db.execute(
                text(
                    "INSERT INTO analysis (id, model_name, target, submitted_by, artifact_sha256, context, backends,"
                    " dedupe_key, measurements, created_at, updated_at)"
                    " VALUES (:id, 'm', 'cpu', 'x', 'a', '{}', '[]', 'k', :run, :now, :now)"
                ),
                {"id": analysis_id, "run": measurements, "now": now},
            )
    engine.dispose()

    command.downgrade(config, "0006")
    engine = create_db_engine(url)
    with engine.connect() as db:
        rows = db.execute(
            text(
                "SELECT analysis_id, backend, mode, status, median_ms, compile_s_cold, speedup_vs_eager"
                " FROM measurement"
            )
        ).all()
    engine.dispose()
    assert sorted(rows, key=lambda row: row[1]) == [
        (1, "eager", None, "ok", 2.0, None, None),
        (1, "inductor", "default", "ok", 1.0, 3.5, 2.0),
    ]
    command.upgrade(config, "head")


@pytest.fixture
def postgres_engine() -> Iterator:
    with empty_postgres() as url:
        engine = create_db_engine(url)
        yield engine
        engine.dispose()


def test_on_postgresql_the_migrations_match_the_models_and_a_3_gib_upload_is_stored(postgres_engine):
    """The upload cap defaults to 4 GiB; PostgreSQL's INTEGER stops at 2 GiB, so the size column is BIGINT there."""
    from datetime import UTC, datetime

    from sqlmodel import Session

    import app.models
    from app.settings import Settings

    assert upgrade_database(postgres_engine) == head_revision()
    with postgres_engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), SQLModel.metadata) == []
    size = 3 * 2**30
    assert size <= Settings().max_upload_bytes
    with Session(postgres_engine) as session:
        session.add(app.models.Artifact(sha256="a" * 64, size_bytes=size, created_at=datetime.now(UTC)))
        session.commit()
    with Session(postgres_engine) as session:
        assert session.get(app.models.Artifact, "a" * 64).size_bytes == size
