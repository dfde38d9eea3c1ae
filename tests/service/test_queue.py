"""The queue's failure cases (lease expiry, stale fencing tokens, crash and re-claim), with a movable clock and one
session per actor on a temp-file SQLite database (and on PostgreSQL when ADVISOR_TEST_POSTGRES_URL is set)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from sqlalchemy import Engine, select

from app.db import create_db_engine, upgrade_database
from app.job_queue import InvalidTransition, JobQueue, QueuePolicy, StaleLease, WorkerNotFound
from app.models import Job, JobEvent
from tests.support.service_db import (
    FakeClock,
    add_analysis,
    engine_on_both_databases,  # noqa: F401 - the `engine` fixture: SQLite and PostgreSQL
    new_session,
)


def enqueue(engine: Engine, queue: JobQueue, clock: FakeClock, **kwargs) -> int:
    target = kwargs.pop("device_kind", "cpu")
    analysis_id = add_analysis(engine, clock, target)
    with new_session(engine) as session:
        job, created = queue.enqueue(session, analysis_id=analysis_id, device_kind=target, **kwargs)
        assert created
        return job.id


def register(engine: Engine, queue: JobQueue, device_kind: str = "cpu", backends=("eager", "inductor")) -> str:
    with new_session(engine) as session:
        return queue.register_worker(session, name="w", device_kind=device_kind, backends=backends).id


def claim(engine: Engine, queue: JobQueue, worker_id: str):  # noqa: ANN201
    with new_session(engine) as session:
        return queue.claim(session, worker_id=worker_id)


def job_row(engine: Engine, job_id: int) -> Job:
    with new_session(engine) as session:
        return session.get(Job, job_id)


def test_worker_dies_mid_job_then_job_is_reclaimed_and_finally_dead_lettered(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    first = register(engine, queue)
    second = register(engine, queue)
    lease1 = claim(engine, queue, first)
    assert lease1.job.id == job_id and lease1.job.attempts == 1

    clock.advance(59)
    assert claim(engine, queue, second) is None, "a live lease must not be re-claimed"
    clock.advance(2)
    lease2 = claim(engine, queue, second)
    assert lease2.job.id == job_id and lease2.job.attempts == 2
    assert lease2.lease_token != lease1.lease_token

    clock.advance(61)
    lease3 = claim(engine, queue, first)
    assert lease3.job.attempts == 3
    clock.advance(61)
    assert claim(engine, queue, second) is None, "attempts exhausted: not claimable again"
    with new_session(engine) as session:
        report = queue.reap(session)
    assert report.failed == [job_id]
    row = job_row(engine, job_id)
    assert row.status == "failed"
    assert "stopped sending heartbeats" in row.last_error and "attempt 3 of 3" in row.last_error


def test_concurrent_claims_take_every_job_exactly_once(engine, clock):
    queue = JobQueue(QueuePolicy(lease_ttl_s=600), clock=clock)
    job_ids = {enqueue(engine, queue, clock) for _ in range(40)}
    workers = [register(engine, queue) for _ in range(8)]
    claimed: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(worker_id: str) -> None:
        try:
            while (lease := claim(engine, queue, worker_id)) is not None:
                with lock:
                    claimed.append(lease.job.id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert Counter(claimed).most_common(1)[0][1] == 1, "a job was claimed twice"
    assert set(claimed) == job_ids


def test_late_result_is_accepted_until_the_job_is_reclaimed(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    worker = register(engine, queue)
    lease = claim(engine, queue, worker)
    clock.advance(120)  # lease expired, nobody re-claimed yet
    with new_session(engine) as session:
        job, newly = queue.complete(session, job_id=job_id, lease_token=lease.lease_token)
    assert newly and job.status == "succeeded"


def test_stale_lease_gets_lease_lost_on_heartbeat_and_complete_after_reclaim(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    old = claim(engine, queue, register(engine, queue))
    clock.advance(120)
    new = claim(engine, queue, register(engine, queue))
    assert new.job.id == job_id
    with new_session(engine) as session:
        with pytest.raises(StaleLease):
            queue.heartbeat(session, job_id=job_id, lease_token=old.lease_token, stage="measure:inductor:default")
        with pytest.raises(StaleLease):
            queue.complete(session, job_id=job_id, lease_token=old.lease_token)
        with pytest.raises(StaleLease):
            queue.fail(session, job_id=job_id, lease_token=old.lease_token, error="x", retryable=True)
        beat = queue.heartbeat(session, job_id=job_id, lease_token=new.lease_token, stage="inspect", progress=0.5)
    assert beat.lease_expires_at > clock()
    row = job_row(engine, job_id)
    assert (row.stage, row.progress, row.status) == ("inspect", 0.5, "running")


def test_duplicate_completion_stores_one_result_and_fail_after_complete_is_refused(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    lease = claim(engine, queue, register(engine, queue))
    recorded: list[int] = []

    def record(session, job) -> None:  # noqa: ANN001
        recorded.append(job.id)

    with new_session(engine) as session:
        first, newly1 = queue.complete(session, job_id=job_id, lease_token=lease.lease_token, record_outcome=record)
    with new_session(engine) as session:
        second, newly2 = queue.complete(session, job_id=job_id, lease_token=lease.lease_token, record_outcome=record)
        assert first.finished_at == second.finished_at
        with pytest.raises(StaleLease, match="already succeeded"):
            queue.fail(session, job_id=job_id, lease_token=lease.lease_token, error="late", retryable=False)
    assert (newly1, newly2) == (True, False)
    assert recorded == [job_id]


def test_cancel_queued_is_immediate(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    with new_session(engine) as session:
        assert queue.cancel(session, job_id=job_id).status == "cancelled"
        with pytest.raises(InvalidTransition, match="already cancelled"):
            queue.cancel(session, job_id=job_id)
    assert claim(engine, queue, register(engine, queue)) is None


def test_cancel_running_is_seen_on_heartbeat_and_acknowledged(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    lease = claim(engine, queue, register(engine, queue))
    with new_session(engine) as session:
        assert queue.cancel(session, job_id=job_id).status == "running"
        beat = queue.heartbeat(session, job_id=job_id, lease_token=lease.lease_token)
        assert beat.cancel_requested
        assert queue.acknowledge_cancel(session, job_id=job_id, lease_token=lease.lease_token).status == "cancelled"
        with pytest.raises(StaleLease):
            queue.heartbeat(session, job_id=job_id, lease_token=lease.lease_token)


def test_cancel_requested_job_whose_worker_vanished_is_cancelled_by_the_reaper(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    claim(engine, queue, register(engine, queue))
    with new_session(engine) as session:
        queue.cancel(session, job_id=job_id)
    clock.advance(61)
    assert claim(engine, queue, register(engine, queue)) is None, "a cancelled job must not be re-run"
    with new_session(engine) as session:
        assert queue.reap(session).cancelled == [job_id]
    assert job_row(engine, job_id).status == "cancelled"


def test_server_restart_keeps_leases_and_recovers_expired_ones(engine, db_url, queue, clock, policy):
    if not str(engine.url).startswith("sqlite"):
        pytest.skip("restart is exercised on the SQLite file; PostgreSQL state lives in the server anyway")
    first_job = enqueue(engine, queue, clock)
    second_job = enqueue(engine, queue, clock)
    worker = register(engine, queue)
    lease_a = claim(engine, queue, worker)
    lease_b = claim(engine, queue, worker)
    engine.dispose()

    restarted = create_db_engine(db_url)
    upgrade_database(restarted)
    queue2 = JobQueue(policy, clock=clock)
    clock.advance(30)
    with new_session(restarted) as session:
        queue2.heartbeat(session, job_id=lease_a.job.id, lease_token=lease_a.lease_token)
    clock.advance(40)  # lease b (never renewed) expired, lease a is alive
    reclaimed = claim(restarted, queue2, worker)
    assert reclaimed.job.id == lease_b.job.id == second_job
    assert job_row(restarted, first_job).lease_token == lease_a.lease_token
    restarted.dispose()


def test_retry_backoff_then_dead_letter_keeps_the_error(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    worker = register(engine, queue)
    for attempt in (1, 2):
        lease = claim(engine, queue, worker)
        assert lease.job.attempts == attempt
        with new_session(engine) as session:
            job = queue.fail(session, job_id=job_id, lease_token=lease.lease_token, error="flaky", retryable=True)
        assert job.status == "queued"
        delay = (job.available_at - clock()).total_seconds()
        assert 10 * 2 ** (attempt - 1) <= delay <= 10 * 2 ** (attempt - 1) * 1.1
        assert claim(engine, queue, worker) is None, "not claimable before its backoff ends"
        clock.advance(delay)
    lease = claim(engine, queue, worker)
    with new_session(engine) as session:
        job = queue.fail(session, job_id=job_id, lease_token=lease.lease_token, error="still flaky", retryable=True)
        again = queue.fail(session, job_id=job_id, lease_token=lease.lease_token, error="still flaky", retryable=True)
    assert (job.status, job.last_error, job.attempts) == ("failed", "still flaky", 3)
    assert again.status == "failed", "a repeated report (lost response) answers the same"


def test_non_retryable_failure_is_dead_lettered_at_once(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    lease = claim(engine, queue, register(engine, queue))
    with new_session(engine) as session:
        job = queue.fail(session, job_id=job_id, lease_token=lease.lease_token, error="bad model", retryable=False)
    assert (job.status, job.attempts) == ("failed", 1)


def test_backoff_is_capped(queue):
    assert queue.backoff_s(1) >= 10
    assert 100 <= queue.backoff_s(30) <= 110


def test_dedupe_key_returns_the_active_job_and_allows_a_new_one_after_it_ends(engine, queue, clock):
    job_id = enqueue(engine, queue, clock, dedupe_key="abc")
    analysis_id = add_analysis(engine, clock)
    with new_session(engine) as session:
        same, created = queue.enqueue(session, analysis_id=analysis_id, device_kind="cpu", dedupe_key="abc")
        assert (same.id, created) == (job_id, False)
        queue.cancel(session, job_id=job_id)
        fresh, created = queue.enqueue(session, analysis_id=analysis_id, device_kind="cpu", dedupe_key="abc")
        assert created and fresh.id != job_id


def test_deregister_releases_held_jobs_without_spending_an_attempt(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    leaving = register(engine, queue)
    lease = claim(engine, queue, leaving)
    with new_session(engine) as session:
        assert queue.release_worker(session, worker_id=leaving) == [job_id]
    row = job_row(engine, job_id)
    assert (row.status, row.attempts) == ("queued", 0)
    other = claim(engine, queue, register(engine, queue))
    assert other.job.id == job_id and other.job.attempts == 1
    with new_session(engine) as session:
        with pytest.raises(StaleLease):
            queue.complete(session, job_id=job_id, lease_token=lease.lease_token)


def test_claim_matches_device_kind_and_required_backends(engine, queue, clock):
    npu_job = enqueue(engine, queue, clock, device_kind="npu", backends=["torchair"])
    cpu_job = enqueue(engine, queue, clock, device_kind="cpu", backends=["inductor"])
    assert claim(engine, queue, register(engine, queue, "npu", ["eager", "inductor"])) is None
    assert claim(engine, queue, register(engine, queue, "cpu", ["eager"])) is None
    assert claim(engine, queue, register(engine, queue, "npu", ["eager", "torchair"])).job.id == npu_job
    assert claim(engine, queue, register(engine, queue, "cpu", ["eager", "inductor"])).job.id == cpu_job


def test_reaper_marks_silent_workers_lost_and_claim_revives_them(engine, queue, clock):
    worker = register(engine, queue)
    clock.advance(91)
    with new_session(engine) as session:
        assert queue.reap(session).lost_workers == [worker]
    claim(engine, queue, worker)
    with new_session(engine) as session:
        assert queue.reap(session).lost_workers == []


def test_unknown_worker_cannot_claim(engine, queue):
    with pytest.raises(WorkerNotFound, match="register again"):
        claim(engine, queue, "nope")


def test_every_transition_is_recorded_as_an_event(engine, queue, clock):
    job_id = enqueue(engine, queue, clock)
    lease = claim(engine, queue, register(engine, queue))
    with new_session(engine) as session:
        queue.fail(session, job_id=job_id, lease_token=lease.lease_token, error="x", retryable=True)
        types = session.scalars(select(JobEvent.type).where(JobEvent.job_id == job_id).order_by(JobEvent.id)).all()
    assert types == ["enqueued", "claimed", "retry_scheduled"]
