"""The queue's one order (app.queue_order): the position a job shows is the order workers claim in, for the single
lookup (`JobQueue.queue_position`), a list page's lookup in one query (`app.analyses.queue_positions`) and the
claim's ORDER BY alike, on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlmodel import Session

from app.analyses import queue_positions
from app.models import Job
from tests.support.service_db import engine_on_both_databases  # noqa: F401 - the `engine` fixture: SQLite and PostgreSQL

from .test_queue import claim, enqueue, register

PRIORITIES = [0, 10, 0, 5, 10, 5, 0]


def test_positions_shown_are_the_order_workers_claim_in(engine, queue, clock):  # noqa: F811
    job_ids = [enqueue(engine, queue, clock, priority=priority) for priority in PRIORITIES]
    with Session(engine) as session:
        jobs = [session.get(Job, job_id) for job_id in job_ids]
        one_by_one = {job.id: queue.queue_position(session, job) for job in jobs}
        in_one_query = queue_positions(session, jobs)
    assert one_by_one == in_one_query
    expected = sorted(job_ids, key=lambda job_id: (-PRIORITIES[job_ids.index(job_id)], job_id))
    assert sorted(job_ids, key=one_by_one.__getitem__) == expected, "highest priority first, then the oldest"
    assert sorted(one_by_one.values()) == list(range(1, len(job_ids) + 1))

    worker = register(engine, queue)
    claimed = [claim(engine, queue, worker).job.id for _ in job_ids]
    assert claimed == expected
    assert claim(engine, queue, worker) is None
