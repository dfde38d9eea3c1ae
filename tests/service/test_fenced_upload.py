"""One fenced-upload flow for a worker's results, its completion and its ranking alike (app.job_queue
`_upload_results`): fence, end the read, validate and decide outside any transaction, then one short write whose
transaction checks the fence once more.

- a job re-claimed by another worker while its upload is being decided stores nothing (the write's fence), on SQLite
  and on PostgreSQL (ADVISOR_TEST_POSTGRES_URL), where the replicas share the database and nothing else would stop it;
- while a large upload (~16 MiB, the results cap) is being decided, another worker's claim and the job's own
  heartbeat are answered at once: no write gate (SQLite) is held meanwhile."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import select
from sqlmodel import Session

import app.job_queue as job_queue
from app.job_queue import JobQueue, ResultsUpload, StaleLease
from app.models import Analysis, Job, JobEvent
from app.results import TEXT_CHARS
from tests.support.fixtures_decide import inspection, measurement, run
from tests.support.service_db import (
    FakeClock,
    add_analysis,
    engine_on_both_databases,  # noqa: F401 - the `engine` fixture: SQLite and PostgreSQL
    new_session,
)

from .test_api import submit
from .test_completion_binding import leased, post, register, results_for
from .test_ranked_results import post_ranked, ranking_of

CPU_CONTEXT = {"stage": "production", "target": "cpu"}
PROMPT_S = 3.0  # answered within this while an upload is decided (the old flow held the write gate: 503 after 5 s)


def leased_job(engine, queue: JobQueue, clock: FakeClock) -> tuple[int, int, str]:  # noqa: ANN001
    """(analysis id, job id, lease token) of a measure job (eager, inductor) that a first worker holds."""
    analysis_id = add_analysis(engine, clock)
    with new_session(engine) as session:
        session.get(Analysis, analysis_id).context = CPU_CONTEXT
        session.commit()
        job, _ = queue.enqueue(session, analysis_id=analysis_id, device_kind="cpu", backends=["eager", "inductor"])
        worker = queue.register_worker(session, name="first", device_kind="cpu", backends=["eager", "inductor"])
        lease = queue.claim(session, worker_id=worker.id)
    return analysis_id, job.id, lease.lease_token


def honest_results(ranking: bool) -> dict:
    results = {
        "inspection": inspection() | {"artifact_sha256": "0" * 64},  # add_analysis' artifact
        "measurements": run(
            measurement("eager", median_ms=10.0, compile_s=None),
            measurement("inductor", median_ms=5.0, compile_s=8.0, eager_ms=10.0),
            device="cpu",
        ),
    }
    return ranking_of(results) if ranking else results


@pytest.mark.parametrize("ranking", [False, True], ids=["completion", "ranking"])
def test_a_job_re_claimed_while_its_upload_is_decided_stores_nothing(
    engine, queue, clock, policy, monkeypatch, ranking
):
    analysis_id, job_id, token = leased_job(engine, queue, clock)
    with new_session(engine) as session:
        second = queue.register_worker(session, name="second", device_kind="cpu", backends=["eager", "inductor"]).id
    decide = job_queue.decide_recommendation
    re_claimed: list[str] = []

    def re_claim_meanwhile(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        """The first worker's lease runs out while the server decides; another worker claims the job."""
        clock.advance(queue.policy.lease_ttl_s + 1)
        with new_session(engine) as other:
            claimed = queue.claim(other, worker_id=second)
        assert claimed is not None and claimed.job.id == job_id
        re_claimed.append(claimed.lease_token)
        return decide(*args, **kwargs)

    monkeypatch.setattr(job_queue, "decide_recommendation", re_claim_meanwhile)
    upload = queue.record_ranked if ranking else queue.complete_with_results
    with new_session(engine) as session, pytest.raises(StaleLease, match="re-claimed"):
        upload(session, ResultsUpload(job_id=job_id, lease_token=token, **honest_results(ranking)))
    assert re_claimed, "the upload was decided (between its fence and its write)"

    with new_session(engine) as session:
        job = session.get(Job, job_id)
        assert (job.status, job.worker_id, job.attempts, job.lease_token) == ("running", second, 2, re_claimed[0])
        analysis = session.get(Analysis, analysis_id)
        assert analysis.measurements is None and analysis.inspection is None and analysis.recommendation is None
        events = session.scalars(select(JobEvent.type).where(JobEvent.job_id == job_id)).all()
        assert "completed" not in events and "ranked" not in events

    monkeypatch.setattr(job_queue, "decide_recommendation", decide)
    with new_session(engine) as session:  # the worker that holds the job now uploads its own
        done = upload(session, ResultsUpload(job_id=job_id, lease_token=re_claimed[0], **honest_results(ranking)))
    assert done.problems is None and done.newly_completed is not ranking


def bulky(body: dict) -> dict:
    """`body` grown to ~16 MiB (the results cap) with text the server keeps (unknown inspection fields are kept)."""
    body["inspection"]["bulk"] = ["x" * (TEXT_CHARS - 96)] * 4_000
    return body


@pytest.mark.parametrize("ranking", [False, True], ids=["completion", "ranking"])
def test_a_claim_and_a_heartbeat_during_a_large_upload_are_answered_promptly(client, model_file, monkeypatch, ranking):
    analysis_id, lease = leased(client, model_file)
    assert submit(client, model_file, force="true").status_code == 202  # a second job, for a second worker
    other = register(client, name="node-b")
    body = bulky(ranking_of(results_for(lease)) if ranking else results_for(lease))
    deciding, answered = threading.Event(), threading.Event()
    decide = job_queue.decide_recommendation

    def slow_decide(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        """Decide runs until the claim and the heartbeat below were answered (or 15 s)."""
        deciding.set()
        answered.wait(15)
        return decide(*args, **kwargs)

    monkeypatch.setattr(job_queue, "decide_recommendation", slow_decide)
    with ThreadPoolExecutor(1) as pool:
        uploading = pool.submit(post_ranked if ranking else post, client, lease, body)
        try:
            assert deciding.wait(60), "the upload never reached its decision"
            started = time.monotonic()
            claimed = client.post(f"/api/v1/workers/{other}/claim")
            claim_s = time.monotonic() - started
            started = time.monotonic()
            beat = client.post(
                f"/api/v1/jobs/{lease['job']['id']}/heartbeat",
                json={"stage": "measure:inductor:default", "progress": 0.5},
                headers={"X-Lease-Token": lease["lease_token"]},
            )
            heartbeat_s = time.monotonic() - started
        finally:
            answered.set()
        uploaded = uploading.result(120)
    assert claimed.status_code == 200 and claimed.json()["job"]["id"] != lease["job"]["id"], claimed.text
    assert claim_s < PROMPT_S, f"the claim waited {claim_s:.2f} s behind the upload"
    assert beat.status_code == 200 and beat.json()["cancel_requested"] is False, beat.text
    assert heartbeat_s < PROMPT_S, f"the heartbeat waited {heartbeat_s:.2f} s behind the upload"
    assert uploaded.status_code == 200, uploaded.text[:300]
    with Session(client.app.state.engine) as session:
        stored = session.get(Analysis, analysis_id)
        assert len(stored.inspection["bulk"]) == 4_000 and stored.recommendation is not None
