"""The recommended backend / mode / speedup are stored as indexed columns whenever a recommendation is stored."""

from __future__ import annotations

from datetime import UTC, datetime

from alembic import command
from sqlalchemy import text

from app.db import alembic_config, create_db_engine, head_revision
from app.models import Analysis
from tests.support.fixtures_decide import inspection, measurement, run

from .test_api import claim, register_worker, submit


def measured(backend: str, median_ms: float, speedup: float | None, mode: str = "default") -> dict:
    row = measurement(backend, mode=mode, median_ms=median_ms, compile_s=None if backend == "eager" else 4.0)
    row["device"] = "cpu"
    row["speedup_vs_eager"] = speedup
    return row


def results(inductor_speedup: float | None = 2.5) -> dict:
    return {
        "inspection": inspection(),
        "measurements": run(measured("eager", 10.0, 1.0), measured("inductor", 4.0, inductor_speedup), device="cpu"),
    }


def complete(client, model_file, body: dict, **form) -> int:  # noqa: ANN001, ANN003
    analysis_id = submit(client, model_file, **form).json()["id"]
    lease = claim(client, register_worker(client)).json()
    body = body | {"inspection": body["inspection"] | {"artifact_sha256": lease["job"]["artifact_sha256"]}}
    done = client.post(
        f"/api/v1/jobs/{lease['job']['id']}/complete", headers={"X-Lease-Token": lease["lease_token"]}, json=body
    )
    assert done.status_code == 200, done.text
    return analysis_id


def stored(client, analysis_id: int) -> Analysis:  # noqa: ANN001
    from sqlmodel import Session

    with Session(client.app.state.engine) as session:
        return session.get(Analysis, analysis_id)


def test_completion_stores_the_recommended_options_speedup(client, model_file):
    analysis_id = complete(client, model_file, results(inductor_speedup=2.5))
    row = stored(client, analysis_id)
    recommendation = client.get(f"/api/v1/analyses/{analysis_id}").json()["recommendation"]
    assert (row.recommended_backend, row.recommended_mode) == (recommendation["backend"], "default")
    assert row.speedup_vs_eager == {"inductor": 2.5, "eager": 1.0}[recommendation["backend"]]


def test_redecide_refreshes_the_columns(client, model_file):
    analysis_id = complete(client, model_file, results())
    with client.app.state.engine.begin() as connection:  # as if stored by an older engine / before 0002
        connection.execute(
            text("UPDATE analysis SET recommended_mode = NULL, speedup_vs_eager = NULL WHERE id = :id"),
            {"id": analysis_id},
        )
    assert client.post(f"/api/v1/analyses/{analysis_id}/redecide").status_code == 200
    row = stored(client, analysis_id)
    assert row.recommended_mode == "default" and row.speedup_vs_eager is not None


def test_api_sorts_by_speedup_with_unmeasured_options_as_null(client, model_file):
    fast = complete(client, model_file, results(inductor_speedup=3.0), model_name="fast")
    slow = complete(client, model_file, results(inductor_speedup=1.5), model_name="slow", force="true")
    unmeasured = complete(client, model_file, results(inductor_speedup=None), model_name="none", force="true")
    assert [stored(client, i).recommended_backend for i in (fast, slow, unmeasured)] == ["inductor"] * 3
    assert [stored(client, i).speedup_vs_eager for i in (fast, slow, unmeasured)] == [3.0, 1.5, None]
    for order, expected in (("desc", [fast, slow, unmeasured]), ("asc", [slow, fast, unmeasured])):
        listed = client.get("/api/v1/analyses", params={"sort": "speedup", "order": order}).json()["items"]
        assert [item["id"] for item in listed] == expected


def test_migration_0002_backfills_from_the_stored_json(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    config = alembic_config(url)
    command.upgrade(config, "0001")
    engine = create_db_engine(url)
    now = datetime(2026, 1, 1, tzinfo=UTC).isoformat(" ")
    with engine.begin() as db:
        db.execute(text("INSERT INTO artifact VALUES ('a', 'model', NULL, 1, NULL, NULL, '[]', :now)"), {"now": now})
        for analysis_id, recommendation, backend in (
            (1, '{"backend": "inductor", "mode": "max-autotune"}', "inductor"),
            (2, '{"backend": "eager", "mode": null}', "eager"),
            (3, None, None),
        ):
            db.execute(
                text(
                    "INSERT INTO analysis (id, model_name, target, submitted_by, artifact_sha256, context, backends,"
                    " dedupe_key, recommendation, recommended_backend, created_at, updated_at)"
                    " VALUES (:id, 'm', 'cpu', 'x', 'a', '{}', '[]', 'k', :rec, :backend, :now, :now)"
                ),
                {"id": analysis_id, "rec": recommendation, "backend": backend, "now": now},
            )
        rows = ((1, "inductor", "default", 1.3), (1, "inductor", "max-autotune", 2.0), (2, "eager", "default", 1.0))
        for analysis_id, backend, mode, speedup in rows:
            db.execute(
                text(
                    "INSERT INTO measurement (analysis_id, backend, mode, status, speedup_vs_eager, data)"
                    " VALUES (:a, :b, :m, 'ok', :s, '{}')"
                ),
                {"a": analysis_id, "b": backend, "m": mode, "s": speedup},
            )
        db.execute(
            text(
                "INSERT INTO worker (id, name, device_kind, backends, environment, state, registered_at, last_seen_at)"
                " VALUES ('w1', 'n', 'cpu', '[]', '{}', 'gone', :now, :now)"
            ),
            {"now": now},
        )
    engine.dispose()

    command.upgrade(config, "head")
    engine = create_db_engine(url)
    with engine.connect() as db:
        rows = db.execute(text("SELECT id, recommended_mode, speedup_vs_eager FROM analysis ORDER BY id")).all()
        worker_state = db.execute(text("SELECT state FROM worker")).scalar()
        revision = db.execute(text("SELECT version_num FROM alembic_version")).scalar()
    engine.dispose()
    assert [tuple(r) for r in rows] == [(1, "max-autotune", 2.0), (2, "default", 1.0), (3, None, None)]
    assert worker_state == "stopped" and revision == head_revision()

    command.downgrade(config, "0001")  # with rows that reference analysis (foreign keys on)
    command.upgrade(config, "head")
