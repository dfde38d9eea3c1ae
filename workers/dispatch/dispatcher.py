"""The dispatcher's loop: watch the queue for jobs a worker of one kind could serve and no live worker will claim,
and submit a one-shot worker for each through an executor (workers.dispatch.executor), within limits.

Each round: read the demand (GET /workers/demand: `waiting` and `unserved`, app.dispatch_demand) and the executor's
list of this dispatcher's batch jobs (the scheduler is the record: each batch job's name carries its queue job), then
- cancel a pending batch job whose queue job is no longer waiting (cancelled, taken by another worker, finished),
  and a pending duplicate of one (there is never more than one batch job per queued job);
- submit one for each unserved job that has none, while fewer than `max_pending` are pending and fewer than
  `max_running` are pending or running.
A batch job submitted moments ago may not be listed yet; it is remembered for `listing_grace_s` so it is not
submitted twice. A batch job that dies (node failure, scancel, time limit) leaves its job's lease to expire; the job
is then claimable, hence unserved, again, and gets a new batch job. On stop the pending batch jobs are cancelled;
running ones finish their job (or exit when none comes within their wait).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from workers.api import WorkerApi
from workers.dispatch.executor import BatchJob, Executor, ExecutorError
from workers.retry import ApiError

log = logging.getLogger("npu_advisor.dispatch")


@dataclass(frozen=True)
class DispatchLimits:
    max_pending: int = 4  # batch jobs waiting in the scheduler's queue at once
    max_running: int = 4  # batch jobs pending or running at once
    poll_s: float = 5.0  # seconds between rounds
    listing_grace_s: float = 30.0  # how long a submitted batch job counts before the scheduler lists it


@dataclass
class RoundReport:
    submitted: dict[int, str]  # queue job -> batch job
    cancelled: list[str]


class Dispatcher:
    def __init__(
        self,
        api: WorkerApi,
        executor: Executor,
        *,
        device: str,
        backends: list[str],
        limits: DispatchLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.executor = executor
        self.device = device
        self.backends = backends
        self.limits = limits or DispatchLimits()
        self.stopping = threading.Event()
        self._clock = clock
        self._recent: dict[str, tuple[int, float]] = {}  # batch job -> (queue job, submitted at), not listed yet

    def run(self) -> int:
        """Rounds until `stop()`; then cancel the pending batch jobs. Exit code 0, or 1 when the server refused."""
        log.info("dispatching %s jobs (backends %s) as batch jobs", self.device, ", ".join(self.backends))
        code = 0
        while not self.stopping.is_set():
            try:
                self.round()
            except ApiError as exc:
                if exc.status in (401, 403):
                    log.error("the server refused this dispatcher: %s", exc)
                    code = 1
                    break
                log.warning("could not read the queue: %s", exc)
            except ExecutorError as exc:
                log.warning("the scheduler: %s", exc)
            self.stopping.wait(self.limits.poll_s)
        self.cancel_pending()
        return code

    def stop(self) -> None:
        self.stopping.set()

    def round(self) -> RoundReport:
        demand = self.api.demand(self.device, self.backends)
        mine = self._batch_jobs()
        waiting = set(demand.waiting)
        report = RoundReport(submitted={}, cancelled=[])
        held: dict[int, BatchJob] = {}
        for job in sorted(mine, key=lambda j: (j.state != "running", j.id)):  # a running one is kept over a pending
            duplicate = job.queue_job_id in held
            if job.state == "pending" and (duplicate or job.queue_job_id not in waiting):
                report.cancelled.append(job.id)
            else:
                held.setdefault(job.queue_job_id, job)
        if report.cancelled:
            self.executor.cancel(report.cancelled)
            log.info("cancelled pending batch jobs %s: their queue jobs no longer wait", ", ".join(report.cancelled))
        kept = [job for job in mine if job.id not in report.cancelled]
        pending = sum(job.state == "pending" for job in kept)
        for queue_job_id in demand.unserved:
            if queue_job_id in held:
                continue
            if pending >= self.limits.max_pending or len(kept) + len(report.submitted) >= self.limits.max_running:
                break
            batch_id = self.executor.submit(queue_job_id)
            self._recent[batch_id] = (queue_job_id, self._clock())
            report.submitted[queue_job_id] = batch_id
            pending += 1
            log.info("queue job %s: submitted batch job %s", queue_job_id, batch_id)
        return report

    def cancel_pending(self) -> list[str]:
        """Cancel every pending batch job of this dispatcher (on stop); the ids cancelled."""
        try:
            pending = [job.id for job in self._batch_jobs() if job.state == "pending"]
            self.executor.cancel(pending)
        except ExecutorError as exc:
            log.error("could not cancel the pending batch jobs: %s", exc)
            return []
        if pending:
            log.info("cancelled pending batch jobs %s", ", ".join(pending))
        return pending

    def _batch_jobs(self) -> list[BatchJob]:
        """The scheduler's list, plus the batch jobs submitted lately that it does not list yet (as pending)."""
        listed = self.executor.list()
        ids = {job.id for job in listed}
        now = self._clock()
        for batch_id, (queue_job_id, at) in list(self._recent.items()):
            if batch_id in ids or now - at > self.limits.listing_grace_s:
                del self._recent[batch_id]  # listed now (the list is the record), or gone for good
            else:
                listed.append(BatchJob(batch_id, queue_job_id, "pending"))
        return listed
