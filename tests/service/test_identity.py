"""Worker identity: a worker token acts only for the workers it registered; releases are bounded (dead letter)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from app.auth import create_token
from app.job_queue import Actor, JobQueue, NotYourWorker, QueuePolicy
from app.models import Job
from tests.support.service_db import add_analysis, new_session

REGISTER = {"name": "node", "device_kind": "cpu", "backends": ["eager"], "environment": {}}


@pytest.fixture
def secured(make_app) -> Iterator[TestClient]:  # noqa: ANN001
    with TestClient(make_app(require_auth=True)) as client:
        yield client


def bearer(client: TestClient, role: str, name: str) -> dict[str, str]:
    with Session(client.app.state.engine) as session:
        _, token = create_token(session, role=role, name=name, now=client.app.state.queue.clock())
    return {"Authorization": f"Bearer {token}"}


def enqueue_job(client: TestClient, clock) -> int:  # noqa: ANN001
    app = client.app
    analysis_id = add_analysis(app.state.engine, clock)
    with new_session(app.state.engine) as session:
        job, _ = app.state.queue.enqueue(session, analysis_id=analysis_id, device_kind="cpu")
        return job.id


def register(client: TestClient, headers: dict[str, str]) -> str:
    response = client.post("/api/v1/workers/register", json=REGISTER, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["worker_id"]


def job_row(client: TestClient, job_id: int) -> Job:
    with new_session(client.app.state.engine) as session:
        return session.get(Job, job_id)


def test_a_worker_token_cannot_claim_as_or_deregister_another_tokens_worker(secured, clock):
    node_a, node_b = bearer(secured, "worker", "node-a"), bearer(secured, "worker", "node-b")
    worker_a = register(secured, node_a)
    job_id = enqueue_job(secured, clock)

    stolen = secured.post(f"/api/v1/workers/{worker_a}/claim", headers=node_b)
    assert stolen.status_code == 403
    assert "acts only for the workers it registered" in stolen.json()["detail"]
    assert job_row(secured, job_id).status == "queued"  # nothing was leased

    lease = secured.post(f"/api/v1/workers/{worker_a}/claim", headers=node_a)
    assert lease.status_code == 200 and lease.json()["job"]["id"] == job_id
    refused = secured.post(f"/api/v1/workers/{worker_a}/deregister", headers=node_b)
    assert refused.status_code == 403 and "registered with another token" in refused.json()["detail"]
    assert job_row(secured, job_id).status == "running"  # the release was refused

    # The job calls are fenced by the lease token, and by the token that registered the job's worker too.
    lease_header = {"X-Lease-Token": lease.json()["lease_token"]}
    beat = secured.post(f"/api/v1/jobs/{job_id}/heartbeat", json={}, headers=node_b | lease_header)
    assert beat.status_code == 403 and f"job {job_id} is leased to worker {worker_a}" in beat.json()["detail"]
    assert secured.post(f"/api/v1/jobs/{job_id}/heartbeat", json={}, headers=node_a | lease_header).status_code == 200


def test_an_admin_may_act_for_any_worker(secured, clock):
    node_a, admin = bearer(secured, "worker", "node-a"), bearer(secured, "admin", "root")
    worker_a = register(secured, node_a)
    job_id = enqueue_job(secured, clock)
    assert secured.post(f"/api/v1/workers/{worker_a}/claim", headers=node_a).json()["job"]["id"] == job_id
    released = secured.post(f"/api/v1/workers/{worker_a}/deregister", headers=admin)
    assert released.status_code == 200 and released.json()["released_jobs"] == [job_id]
    assert job_row(secured, job_id).status == "queued"
    # the stopped worker cannot claim again, whoever asks
    assert secured.post(f"/api/v1/workers/{worker_a}/claim", headers=node_a).status_code == 404


def test_a_deregister_loop_ends_in_the_dead_letter_with_its_reason(secured, clock):
    node = bearer(secured, "worker", "node-a")
    job_id = enqueue_job(secured, clock)
    max_releases = secured.app.state.queue.policy.max_releases
    for round_ in range(1, max_releases + 1):
        worker = register(secured, node)
        assert secured.post(f"/api/v1/workers/{worker}/claim", headers=node).json()["job"]["id"] == job_id
        left = secured.post(f"/api/v1/workers/{worker}/deregister", headers=node).json()
        if round_ < max_releases:
            assert left["released_jobs"] == [job_id] and left["dead_lettered_jobs"] == []
            assert job_row(secured, job_id).attempts == 0  # a release spends no attempt
        else:
            assert left["released_jobs"] == [] and left["dead_lettered_jobs"] == [job_id]
    row = job_row(secured, job_id)
    assert row.status == "failed"
    assert row.last_error.startswith(f"released {max_releases} times by its workers without finishing")
    nobody = register(secured, node)
    assert secured.post(f"/api/v1/workers/{nobody}/claim", headers=node).status_code == 204


def test_queue_release_rules(engine, clock):
    queue = JobQueue(QueuePolicy(max_releases=2), clock=clock)
    analysis_id = add_analysis(engine, clock)
    with new_session(engine) as session:
        ours, theirs = (create_token(session, role="worker", name=n, now=clock())[0].id for n in ("a", "b"))
        job, _ = queue.enqueue(session, analysis_id=analysis_id, device_kind="cpu")
        mine = queue.register_worker(session, name="a", device_kind="cpu", backends=[], token_id=ours)
    stranger, owner, admin = Actor(token_id=theirs, admin=False), Actor(token_id=ours, admin=False), Actor()
    with new_session(engine) as session:
        with pytest.raises(NotYourWorker):
            queue.claim(session, worker_id=mine.id, actor=stranger)
        assert queue.claim(session, worker_id=mine.id, actor=owner).job.id == job.id
        with pytest.raises(NotYourWorker):
            queue.release_worker(session, worker_id=mine.id, actor=stranger)
        assert queue.release_worker(session, worker_id=mine.id, actor=owner) == [job.id]
        again = queue.register_worker(session, name="b", device_kind="cpu", backends=[], token_id=theirs)
        assert queue.claim(session, worker_id=again.id, actor=admin).job.id == job.id
        report = queue.deregister_worker(session, worker_id=again.id, actor=admin)
        assert (report.released, report.dead_lettered) == ([], [job.id])
        assert session.get(Job, job.id).status == "failed"
