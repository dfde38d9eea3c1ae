"""Submission is atomic: the artifact rows, the analysis and its job are written together or not at all; a
stored file whose submission failed is an orphan that the sweep removes; concurrent submissions (distinct and
identical) each end with exactly one job per analysis, on SQLite and on PostgreSQL (ADVISOR_TEST_POSTGRES_URL)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import OperationalError
from sqlmodel import Session

from app.analyses import collect_orphans
from app.models import Analysis, Artifact, Job
from app.storage import ArtifactStore
from tests.support.service_db import empty_postgres, stored_files
from tests.support.synthetic_models import exported_program_bytes

CPU_CONTEXT = json.dumps({"stage": "production", "target": "cpu"})


def post_model(client, data: bytes, **form):  # noqa: ANN001, ANN003, ANN201
    return client.post("/api/v1/analyze", files={"model": ("m.pt2", data)}, data={"context": CPU_CONTEXT, **form})


def counts(engine) -> dict[str, int]:  # noqa: ANN001
    with Session(engine) as session:
        models = (Analysis, Artifact, Job)
        return {model.__name__: session.scalar(select(func.count()).select_from(model)) for model in models}


def test_a_failed_job_insert_leaves_no_rows_and_its_stored_file_is_collected(client, settings):
    def locked(*_args) -> None:  # noqa: ANN002
        raise OperationalError("INSERT INTO job ...", {}, Exception("database is locked"))

    event.listen(Job, "before_insert", locked)
    try:
        response = post_model(client, exported_program_bytes(1))
    finally:
        event.remove(Job, "before_insert", locked)
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    engine = client.app.state.engine
    assert counts(engine) == {"Analysis": 0, "Artifact": 0, "Job": 0}
    [orphan] = [path for path in stored_files(settings) if ".incoming" not in path.parts]

    store = ArtifactStore(settings.artifacts_dir)
    with Session(engine) as session:
        assert collect_orphans(session, store, min_age_s=600) == [], "a fresh file may belong to an upload in flight"
        assert collect_orphans(session, store, min_age_s=0) == [orphan.name]
    assert not orphan.exists()

    again = post_model(client, exported_program_bytes(1))  # the same upload, now without the failure
    assert again.status_code == 202
    assert counts(engine) == {"Analysis": 1, "Artifact": 1, "Job": 1}


def test_the_server_sweeps_orphans_at_start_and_keeps_referenced_files(make_app, settings):
    from fastapi.testclient import TestClient

    with TestClient(make_app()) as client:
        assert post_model(client, exported_program_bytes(2)).status_code == 202
    kept = stored_files(settings)
    store = ArtifactStore(settings.artifacts_dir)
    orphan = store.path_for("ab" * 32)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"left by a submission whose transaction failed")
    old = time.time() - 3600
    for path in [*kept, orphan]:
        os.utime(path, (old, old))
    make_app(orphan_min_age_s=60)  # a restart
    assert stored_files(settings) == kept


def submit_until_accepted(client, data: bytes) -> httpx.Response:  # noqa: ANN001
    """Send until the answer is not 429 / 503 (honouring Retry-After, shortened for the test)."""
    for _ in range(200):
        response = post_model(client, data)
        if response.status_code not in (429, 503):
            return response
        assert "retry-after" in response.headers
        time.sleep(0.05)
    raise AssertionError("never accepted")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, db_url: str) -> Iterator[str]:
    if request.param == "sqlite":
        yield db_url
        return
    with empty_postgres() as url:
        yield url


def test_concurrent_submissions_each_get_one_job_and_identical_ones_one_analysis(make_app, database_url):
    from fastapi.testclient import TestClient

    distinct = [exported_program_bytes(100 + n) for n in range(14)]
    identical = exported_program_bytes(99)
    uploads = distinct + [identical] * 6
    answers: list[httpx.Response | BaseException] = [None] * len(uploads)  # type: ignore[list-item]
    with TestClient(make_app(database_url=database_url, max_uploads_per_client=0)) as client:

        def send(index: int) -> None:
            try:
                answers[index] = submit_until_accepted(client, uploads[index])
            except BaseException as exc:  # noqa: BLE001 - reported below
                answers[index] = exc

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(uploads))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        statuses = Counter(getattr(answer, "status_code", repr(answer)) for answer in answers)
        assert set(statuses) <= {200, 202}, statuses
        identical_ids = {answer.json()["id"] for answer in answers[len(distinct) :]}
        assert len(identical_ids) == 1, "identical submissions share one analysis"
        assert statuses[202] == len(distinct) + 1 and statuses[200] == 5

        engine = client.app.state.engine
        with Session(engine) as session:
            rows = session.execute(
                select(Analysis.id, func.count(Job.id))
                .select_from(Analysis)
                .outerjoin(Job, Job.analysis_id == Analysis.id)
                .group_by(Analysis.id)
            ).all()
        assert {analysis_id for analysis_id, _ in rows} == {answer.json()["id"] for answer in answers}
        assert all(jobs == 1 for _, jobs in rows), "every analysis has exactly one job"
