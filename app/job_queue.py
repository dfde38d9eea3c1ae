"""The job queue. Every job state transition lives in this module, completion included; route handlers stay thin.

States: queued -> running -> succeeded | failed | cancelled. A retry goes back to queued with
`available_at` in the future; `failed` is the dead letter (last error kept). Each claim draws a new
random lease token that fences heartbeat / complete / fail: a worker that lost its lease (re-claimed,
terminal) gets StaleLease (HTTP 409). Expiry is lazy: the claim query itself takes expired running jobs
that still have attempts left; the reaper fails the exhausted ones and marks silent workers lost.
Worker identity: a worker token acts (claims, deregisters) only for the workers it registered; admins
(and the anonymous admin of an open server) for any (NotYourWorker, HTTP 403). A graceful release does
not spend an attempt, so it is counted instead: the `max_releases`-th release of a job dead-letters it.
All state is in the database and the clock is injected, so a server restart needs no recovery step
and tests can move time (docs/deployment.md, "The worker protocol", describes the protocol).
Purposes: an analysis has one "measure" job, on its target's device kind; its status is the analysis' status.
When no worker can claim that job at submission, an "inspect" job (device kind "any": any worker claims it)
gives the analysis its inspection and an unmeasured recommendation meanwhile. An inspect job never changes the
analysis' status, never overwrites a measurement, and ends (cancelled) when its measure job ends.
"""

from __future__ import annotations

import hmac
import logging
import random
import secrets
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, exists, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
from sqlmodel import Session

from advisor.core.early_answer import pending_details
from app.clock import aware, utcnow
from app.models import (
    ACTIVE_JOB_STATUSES,
    ANY_DEVICE,
    INSPECT,
    MEASURE,
    Analysis,
    Job,
    JobEvent,
    JobRequirement,
    JobStatus,
    Worker,
)
from app.outcomes import DecisionFailed, clear_recommendation, decide_recommendation, store_outcome
from app.queue_order import claim_order, claimable, goes_before
from app.queue_policy import QueuePolicy
from app.results import (
    ERROR_CHARS,
    JobBinding,
    ResultsInvalid,
    accept_results,
    check_belongs_to_job,
    check_pending_details,
    truncate_text,
)
from app.service_errors import ErrorCode, ServiceError

log = logging.getLogger("npu_advisor.server")
Clock = Callable[[], datetime]
OutcomeRecorder = Callable[[Session, Job], None]
INSPECT_PRIORITY = 10  # an inspection takes seconds: it goes before the measurements queued on the same workers


class QueueError(ServiceError):
    """A refused transition; its `code` (app.service_errors) gives the HTTP status the API answers with."""

    code = ErrorCode.CONFLICT


class JobNotFound(QueueError):
    code = ErrorCode.NOT_FOUND


class WorkerNotFound(QueueError):
    code = ErrorCode.NOT_FOUND


class StaleLease(QueueError):
    """The caller's lease token no longer owns the job: stop working on it and do not upload."""

    code = ErrorCode.LEASE_LOST


class InvalidTransition(QueueError):
    """The job's status does not allow the transition asked for (a conflict, like every QueueError)."""


class NotYourWorker(QueueError):
    """A worker token tried to act for a worker that another token registered."""

    code = ErrorCode.FORBIDDEN


def not_your_worker(worker_id: str) -> NotYourWorker:
    return NotYourWorker(
        f"worker {worker_id} was registered with another token: a worker token acts only for the workers it "
        "registered (an admin token may act for any)"
    )


@dataclass(frozen=True)
class Actor:
    """Who acts for a worker: its token (`token_id`), or an admin (any worker). Default: the server itself."""

    token_id: int | None = None
    admin: bool = True

    def may_act_for(self, worker_token_id: int | None) -> bool:
        return self.admin or (self.token_id is not None and worker_token_id == self.token_id)


SERVER = Actor()


@dataclass(frozen=True)
class JobClaim:
    job: Job
    lease_token: str
    lease_expires_at: datetime


@dataclass(frozen=True)
class LeaseRenewal:
    lease_expires_at: datetime
    cancel_requested: bool


@dataclass(frozen=True)
class ResultsUpload:
    """A worker's results for the job it holds, a completion's or a ranking's: which job, under which lease, the
    results as they arrived (validated by the queue, app.results) and who sends them."""

    job_id: int
    lease_token: str
    inspection: Any
    measurements: Any
    actor: Actor = SERVER


@dataclass(frozen=True)
class Completion:
    """What a worker's upload came to: the job, whether it succeeded just now (a repeat did not), and - when the
    results were refused (shape, impossible numbers, not the job's) - one {field, message} per problem (the job
    is unchanged: still leased to its worker)."""

    job: Job
    newly_completed: bool
    problems: list[dict] | None = None


ALREADY_RANKED = {"field": "measurements", "message": "this attempt already posted its ranking: one per attempt"}


@dataclass(frozen=True)
class _Upload:
    """A worker's upload's job, read once its fence held (JobQueue._fenced_upload)."""

    job: Job
    analysis_id: int
    purpose: str
    context: dict[str, Any]
    source_report: dict[str, Any] | None
    binding: JobBinding


@dataclass(frozen=True)
class _Decided:
    """An upload's results once accepted (app.results) and decided on (advisor.core's engine)."""

    inspection: dict | None
    measurements: dict | None
    recommendation: dict


def decide_upload(upload: _Upload, inspection: Any, measurements: Any, *, ranking: bool) -> _Decided:
    """Validate a completion's or a ranking's results against their job and decide on them; the slow part of an
    upload, run outside any transaction. Raises ResultsInvalid (refused: the job unchanged) or DecisionFailed."""
    if ranking and upload.purpose != MEASURE:
        raise ResultsInvalid([("measurements", "an inspect job has no ranking to report")])
    if upload.purpose == INSPECT:
        measurements = None  # an inspection's recommendation is unmeasured whatever was sent
    inspection, measurements = accept_results(inspection, measurements)
    check_belongs_to_job(inspection, measurements, upload.binding)
    if ranking and measurements is None:
        raise ResultsInvalid([("measurements", "a ranking is measurements: none were sent")])
    check_pending_details(measurements, ranking=ranking)
    recommendation = decide_recommendation(upload.context, inspection, measurements, source_report=upload.source_report)
    return _Decided(inspection, measurements, recommendation)


@dataclass
class ReapReport:
    failed: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    lost_workers: list[str] = field(default_factory=list)


@dataclass
class ReleaseReport:
    released: list[int] = field(default_factory=list)  # back to queued, no attempt spent
    dead_lettered: list[int] = field(default_factory=list)  # released max_releases times: now `failed`


@contextmanager
def _transaction(session: Session) -> Iterator[None]:
    """One short write transaction (BEGIN IMMEDIATE on SQLite): commit on success, roll back on error."""
    try:
        yield
        session.commit()
    except BaseException:
        session.rollback()
        raise


class JobQueue:
    """Queue transitions on a SQLModel session. `clock` and `rng` are injectable for tests."""

    def __init__(self, policy: QueuePolicy | None = None, clock: Clock = utcnow, rng: random.Random | None = None):
        self.policy = policy or QueuePolicy()
        self.clock = clock
        self.rng = rng or random.Random()

    # ------------------------------------------------------------ producers
    def enqueue(
        self,
        session: Session,
        *,
        analysis_id: int,
        device_kind: str,
        backends: Iterable[str] = (),
        dedupe_key: str | None = None,
        priority: int = 0,
        inspect_meanwhile: bool = False,
    ) -> tuple[Job, bool]:
        """Add a measure job; (job, created). An active job with the same dedupe_key is returned instead.

        `inspect_meanwhile`: also add an inspect job for the analysis, in the same transaction (no worker can
        measure it now: see `unclaimable_reason`)."""
        backends = sorted(set(backends))
        with _transaction(session):
            if dedupe_key is not None and (existing := self.active_job_with_key(session, dedupe_key)):
                return existing, False
            now = self.clock()
            job = self._new_job(
                session,
                now,
                analysis_id=analysis_id,
                device_kind=device_kind,
                backends=backends,
                dedupe_key=dedupe_key,
                priority=priority,
            )
            try:
                session.flush()
            except IntegrityError:  # another writer enqueued the same key first (PostgreSQL)
                session.rollback()
                existing = self.active_job_with_key(session, dedupe_key or "")
                if existing is None:
                    raise
                return existing, False
            # a worker offers backends by name: `onnxruntime:int8` (an int8 mode, asked for by name) needs `onnxruntime`
            required = sorted({name.split(":", 1)[0] for name in backends})
            session.add_all(JobRequirement(job_id=job.id, backend=name) for name in required)
            self._event(session, job, "enqueued", at=now)
            if inspect_meanwhile:
                self._add_inspection(session, analysis_id, now)
        return job, True

    def _new_job(self, session: Session, now: datetime, **fields: Any) -> Job:
        """A job as the queue adds it, measure or inspect: claimable from `now`, with the policy's attempts."""
        job = Job(**fields, max_attempts=self.policy.max_attempts, available_at=now, created_at=now)
        session.add(job)
        return job

    def _add_inspection(self, session: Session, analysis_id: int, now: datetime) -> Job:
        inspection = self._new_job(
            session, now, analysis_id=analysis_id, purpose=INSPECT, device_kind=ANY_DEVICE, priority=INSPECT_PRIORITY
        )
        session.flush()
        self._event(session, inspection, "enqueued", at=now)
        return inspection

    def cancel(self, session: Session, *, job_id: int) -> Job:
        """Cancel: a queued job at once; a running one is flagged and its worker sees it on the next heartbeat.
        Cancelling a measure job cancels its analysis' inspection too."""
        with _transaction(session):
            job = self._get(session, job_id)
            if job.status not in ACTIVE_JOB_STATUSES:
                raise InvalidTransition(f"job {job_id} is already {job.status}; there is nothing to cancel")
            self._cancel_one(session, job)
            if job.purpose == MEASURE:
                self._end_inspections(session, job.analysis_id, reason="its analysis was cancelled")
        return job

    def _cancel_one(self, session: Session, job: Job, detail: dict | None = None) -> None:
        if job.status == JobStatus.QUEUED:
            self._finish(session, job, JobStatus.CANCELLED)
            self._event(session, job, "cancelled", detail=detail)
        elif job.status == JobStatus.RUNNING and not job.cancel_requested:
            job.cancel_requested = True
            self._event(session, job, "cancel_requested", detail=detail)

    def _end_inspections(self, session: Session, analysis_id: int, *, reason: str) -> None:
        """Cancel an analysis' active inspect jobs: its measure job ended (or was cancelled), so they are moot."""
        for inspection in session.scalars(
            select(Job)
            .where(Job.analysis_id == analysis_id, Job.purpose == INSPECT, Job.status.in_(ACTIVE_JOB_STATUSES))
            .with_for_update()
        ).all():
            self._cancel_one(session, inspection, detail={"reason": reason})

    # ------------------------------------------------------------ workers
    def register_worker(
        self,
        session: Session,
        *,
        name: str,
        device_kind: str,
        backends: Iterable[str],
        environment: dict | None = None,
        token_id: int | None = None,
    ) -> Worker:
        now = self.clock()
        worker = Worker(
            id=secrets.token_hex(8),
            name=name,
            device_kind=device_kind,
            backends=sorted(set(backends)),
            environment=environment or {},
            token_id=token_id,
            registered_at=now,
            last_seen_at=now,
        )
        with _transaction(session):
            session.add(worker)
        return worker

    def claim(self, session: Session, *, worker_id: str, actor: Actor = SERVER) -> JobClaim | None:
        """Atomically lease the next job this worker can run, or None.

        One `UPDATE job ... WHERE id = (SELECT ... LIMIT 1 [FOR UPDATE SKIP LOCKED]) RETURNING`:
        queued jobs that are due, or running jobs whose lease expired and which have attempts left,
        on the worker's device kind (or inspect jobs, of kind "any"), whose required backends the worker offers.
        Only `actor` may claim for the worker: its registering token or an admin (NotYourWorker otherwise).
        """
        now = self.clock()
        with _transaction(session):
            touch = update(Worker).where(Worker.id == worker_id, Worker.state != "stopped")  # lost + back = active
            if not actor.admin:
                touch = touch.where(Worker.token_id == actor.token_id)
            worker = session.execute(
                touch.values(last_seen_at=now, state="active")
                .returning(Worker.device_kind, Worker.backends)
                .execution_options(synchronize_session=False)
            ).first()
            if worker is None:
                owner = session.execute(select(Worker.token_id).where(Worker.id == worker_id)).first()
                if owner is not None and not actor.may_act_for(owner.token_id):
                    raise not_your_worker(worker_id)
                # Also after deregistration: a long-poll still in flight must neither revive nor lease to it.
                raise WorkerNotFound(f"worker {worker_id} is not registered (or has deregistered); register again")
            token = secrets.token_hex(16)
            expires = now + timedelta(seconds=self.policy.lease_ttl_s)
            job = session.scalars(
                _CLAIM_STATEMENT,
                {
                    "claim_now": now,
                    "wanted_device_kind": worker.device_kind,
                    "offered": list(worker.backends),
                    "new_token": token,
                    "new_worker_id": worker_id,
                    "new_expiry": expires,
                },
                execution_options={"populate_existing": True, "synchronize_session": False},
            ).first()
            if job is None:
                return None
            self._drop_ranking(session, job)  # a ranking of an earlier attempt (its lease expired) is not this one's
            self._event(session, job, "claimed", at=now)
        return JobClaim(job=job, lease_token=token, lease_expires_at=expires)

    def heartbeat(
        self,
        session: Session,
        *,
        job_id: int,
        lease_token: str,
        stage: str | None = None,
        progress: float | None = None,
    ) -> LeaseRenewal:
        """Extend the lease and record progress; tells the worker whether a cancel was requested."""
        with _transaction(session):
            job = self._leased(session, job_id, lease_token)
            now = self.clock()
            job.lease_expires_at = now + timedelta(seconds=self.policy.lease_ttl_s)
            job.heartbeat_at = now
            if stage is not None:
                job.stage = stage
            if progress is not None:
                job.progress = progress
            self._touch_worker(session, job.worker_id, now)
        return LeaseRenewal(lease_expires_at=job.lease_expires_at, cancel_requested=job.cancel_requested)

    def complete(
        self, session: Session, *, job_id: int, lease_token: str, record_outcome: OutcomeRecorder | None = None
    ) -> tuple[Job, bool]:
        """Mark the job succeeded; (job, newly_completed). Repeating it with the same token changes nothing.

        `record_outcome(session, job)` runs in the same transaction, so the result is stored exactly once.
        """
        done = self._fenced_write(session, job_id, lease_token, ranking=False, store=record_outcome)
        return done.job, done.newly_completed

    def complete_with_results(self, session: Session, results: ResultsUpload) -> Completion:
        """A worker's completion, start to end (`_upload_results`): fence, validate (app.results), decide
        (advisor.core only), then store and finish in one fenced write.

        Only for the job and lease the worker holds: the job is running under `lease_token` (StaleLease otherwise;
        a repeat of a completion that succeeded is answered as before), and `actor` may act for the worker that
        claimed it (NotYourWorker). Results that do not have the documented shape, hold impossible numbers, or are
        not the job's (another artifact, a backend or mode it did not ask for) change nothing: `problems` says why
        and the job stays leased to its worker, which may fail it or complete it correctly. Results the engine
        cannot decide on fail the job (not retried) with the reason."""
        return self._upload_results(session, results, ranking=False)

    def record_ranked(self, session: Session, results: ResultsUpload) -> Completion:
        """A measure job's results once its options are ranked, before the recommended option's details are measured
        (advisor.harness.pipeline's `on_ranked`; the details do not change the pick): fenced, validated and decided
        like a completion (`_upload_results`), then stored on the analysis, which shows the recommendation while its
        job runs on; the completion replaces them. `problems` (the job unchanged) for results that are refused, for
        an inspect job, for a second ranking of the same attempt and for results the engine cannot decide on (the
        completion will fail the job for that). A job that is no longer running under `lease_token` - completed
        included - is StaleLease: a late ranking never overwrites."""
        return self._upload_results(session, results, ranking=True)

    def _upload_results(self, session: Session, results: ResultsUpload, *, ranking: bool) -> Completion:
        """The one flow of a worker's results, a completion's or a ranking's: (1) fence and read what the job's
        results are checked against, ending that read's transaction (`_fenced_upload`); (2) validate and decide
        outside any transaction, so no write gate (SQLite) or row lock is held while they run, however large the
        results; (3) one short write whose transaction holds the fence's one check (`_fence`): a job re-claimed,
        ended or ranked meanwhile stores nothing."""
        job_id, lease_token = results.job_id, results.lease_token
        upload = self._fenced_upload(session, job_id, lease_token, results.actor, ranking=ranking)
        if isinstance(upload, Completion):  # answered by the fence: a repeated completion, a second ranking
            return upload
        try:
            decided = decide_upload(upload, results.inspection, results.measurements, ranking=ranking)
        except ResultsInvalid as exc:
            return self._refused(session, upload.job, "ranked" if ranking else "complete", exc.problems)
        except DecisionFailed as exc:
            reason = truncate_text(str(exc), ERROR_CHARS, keep="both")
            if ranking:  # the completion will fail the job for it
                return self._refused(session, upload.job, "ranked", [{"field": "measurements", "message": reason}])
            failed = self.fail(session, job_id=job_id, lease_token=lease_token, error=reason, retryable=False)
            return Completion(failed, newly_completed=False)
        return self._fenced_write(session, job_id, lease_token, ranking=ranking, store=self._storer(upload, decided))

    def _storer(self, upload: _Upload, decided: _Decided) -> OutcomeRecorder:
        """What the fenced write stores: a measure job's results (ranked or complete) on its analysis; an inspect
        job's never over a measured (or ended) analysis, nor over its measure job's ranking."""
        now = self.clock()
        args = (decided.inspection, decided.measurements, decided.recommendation, now)

        def store(session: Session, job: Job) -> None:
            if upload.purpose == MEASURE:
                store_outcome(session, upload.analysis_id, *args)
            elif self._awaits_measurement(session, upload.analysis_id) and not _has_measurements(
                session, upload.analysis_id
            ):
                store_outcome(session, upload.analysis_id, decided.inspection, None, decided.recommendation, now)

        return store

    def _fenced_upload(
        self, session: Session, job_id: int, lease_token: str, actor: Actor, *, ranking: bool
    ) -> _Upload | Completion:
        """What an upload of results needs to know of its job, once the fence holds (`_fence`; its early answer,
        when it has one) and `actor` may act for the job's worker. Ends the read's transaction (write-locking, on
        SQLite): validating and deciding, which follow, are slow."""
        try:
            job = session.get(Job, job_id, populate_existing=True)
            if job is None:
                raise JobNotFound(f"job {job_id} does not exist")
            answered = self._fence(session, job, lease_token, ranking=ranking)
            worker = session.get(Worker, job.worker_id) if job.worker_id is not None else None
            if not actor.may_act_for(worker.token_id if worker is not None else None):
                raise NotYourWorker(
                    f"job {job_id} is leased to worker {job.worker_id}, which was registered with another token: a "
                    "worker token completes only the jobs of the workers it registered"
                )
            if answered is not None:
                return answered
            analysis = session.get(Analysis, job.analysis_id)
            return _Upload(
                job=job,
                analysis_id=job.analysis_id,
                purpose=job.purpose,
                context=dict(analysis.context),
                source_report=analysis.source_report,  # the submitter's, decided with (app.outcomes)
                binding=JobBinding(
                    artifact_sha256=analysis.artifact_sha256,
                    backends=tuple(job.backends or (worker.backends if worker is not None else ())),
                ),
            )
        finally:
            session.commit()  # ends the read (and its write gate on SQLite) whatever the fence said

    def _fenced_write(
        self, session: Session, job_id: int, lease_token: str, *, ranking: bool, store: OutcomeRecorder | None
    ) -> Completion:
        """The upload's one short write: in its transaction the fence is checked once more (`_fence`: re-claimed,
        ended or already ranked since the upload's read stores nothing), then `store(session, job)` and the
        transition: a completion finishes the job (succeeded); a ranking is recorded and ends the inspection."""
        with _transaction(session):
            job = self._get(session, job_id)
            answered = self._fence(session, job, lease_token, ranking=ranking)
            if answered is not None:
                return answered
            if store is not None:
                store(session, job)
            if ranking:
                self._event(session, job, "ranked")
                self._end_inspections(session, job.analysis_id, reason="its analysis' measure job ranked its options")
                return Completion(job, newly_completed=False)
            job.progress = 1.0
            self._finish(session, job, JobStatus.SUCCEEDED)
            self._event(session, job, "completed")
            self._touch_worker(session, job.worker_id, self.clock())
        return Completion(job, newly_completed=True)

    def _fence(self, session: Session, job: Job, lease_token: str, *, ranking: bool) -> Completion | None:
        """The one check of an upload's fence: the job runs under `lease_token` (StaleLease otherwise). Its answer
        without a write: a completion repeated under the lease it succeeded with (idempotent), a second ranking of
        the same attempt (one per attempt). None: go on."""
        if not ranking and job.status == JobStatus.SUCCEEDED and self._token_matches(job, lease_token):
            return Completion(job, newly_completed=False)
        self._check_leased(job, lease_token)
        if ranking and self._ranked_already(session, job):
            return Completion(job, newly_completed=False, problems=[ALREADY_RANKED])
        return None

    def _refused(self, session: Session, job: Job, route: str, problems: list[dict]) -> Completion:
        """Refused results change nothing of the job (its state, lease, error), but the job names the worker that
        sent them: a `results_refused` event on the job (that worker's id, the attempt, the route, the problems), and
        a warning in the server's log."""
        sender, attempt = job.worker_id, job.attempts  # as the fence saw them: the worker that sent these
        first = problems[0] if problems else {"field": "results", "message": "refused"}
        log.warning(
            "job %s: worker %s sent results the server refused (%s): %s: %s",
            job.id,
            sender,
            route,
            first["field"],
            first["message"],
        )
        with _transaction(session):
            session.add(
                JobEvent(
                    job_id=job.id,
                    attempt=attempt,
                    worker_id=sender,
                    type="results_refused",
                    at=self.clock(),
                    detail={"route": route, "problems": problems},
                )
            )
        return Completion(job, newly_completed=False, problems=problems)

    @staticmethod
    def _ranked_already(session: Session, job: Job) -> bool:
        query = select(JobEvent.id).where(
            JobEvent.job_id == job.id, JobEvent.attempt == job.attempts, JobEvent.type == "ranked"
        )
        return session.scalar(query.limit(1)) is not None

    def fail(self, session: Session, *, job_id: int, lease_token: str, error: str, retryable: bool) -> Job:
        """Record a failed attempt: back to queued after a backoff, or `failed` (dead letter) when exhausted."""
        with _transaction(session):
            job = self._get(session, job_id)
            if (
                job.status in (JobStatus.QUEUED, JobStatus.FAILED)
                and job.last_error == error
                and self._token_matches(job, lease_token)
            ):
                return job  # the same report again (lost response)
            job = self._leased(session, job_id, lease_token)
            now = self.clock()
            job.last_error = error
            if job.cancel_requested:
                self._finish(session, job, JobStatus.CANCELLED)
                self._event(session, job, "cancelled", detail={"error": error})
            elif retryable and job.attempts < job.max_attempts:
                delay = self.backoff_s(job.attempts)
                job.status = JobStatus.QUEUED
                job.available_at = now + timedelta(seconds=delay)
                job.lease_expires_at = None
                self._drop_ranking(session, job)
                self._event(session, job, "retry_scheduled", detail={"error": error, "delay_s": round(delay, 3)})
            else:
                self._finish(session, job, JobStatus.FAILED)
                self._event(session, job, "failed", detail={"error": error, "retryable": retryable})
            self._touch_worker(session, job.worker_id, now)
        return job

    def acknowledge_cancel(self, session: Session, *, job_id: int, lease_token: str) -> Job:
        """The worker stopped a job whose cancel it saw on a heartbeat."""
        with _transaction(session):
            job = self._get(session, job_id)
            if job.status == JobStatus.CANCELLED and self._token_matches(job, lease_token):
                return job
            job = self._leased(session, job_id, lease_token)
            self._finish(session, job, JobStatus.CANCELLED)
            self._event(session, job, "cancelled")
        return job

    def release_worker(self, session: Session, *, worker_id: str, actor: Actor = SERVER) -> list[int]:
        """Graceful deregistration: put the worker's running jobs back without spending an attempt.

        The ids of the jobs put back (see `deregister_worker` for the ones dead-lettered instead)."""
        return self.deregister_worker(session, worker_id=worker_id, actor=actor).released

    def deregister_worker(self, session: Session, *, worker_id: str, actor: Actor = SERVER) -> ReleaseReport:
        """Stop the worker and release its running jobs. Only the worker's own token or an admin may (403).

        A release spends no attempt, so a deregister loop could hold a job forever; releases are counted
        (`released` events) and the `max_releases`-th one sends the job to the dead letter with its reason."""
        report = ReleaseReport()
        with _transaction(session):
            worker = session.get(Worker, worker_id, populate_existing=True)
            if worker is None:
                raise WorkerNotFound(f"worker {worker_id} is not registered")
            if not actor.may_act_for(worker.token_id):
                raise not_your_worker(worker_id)
            now = self.clock()
            worker.state = "stopped"
            worker.last_seen_at = now
            jobs = session.scalars(select(Job).where(Job.worker_id == worker_id, Job.status == JobStatus.RUNNING)).all()
            earlier = self._release_counts(session, [job.id for job in jobs])
            for job in jobs:
                if job.cancel_requested:  # its worker left instead of confirming the cancel: done, not re-run
                    self._finish(session, job, JobStatus.CANCELLED)
                    self._event(session, job, "cancelled", detail={"reason": f"worker {worker_id} deregistered"})
                    continue
                releases = earlier.get(job.id, 0) + 1
                if releases >= self.policy.max_releases:
                    job.last_error = (
                        f"released {releases} times by its workers without finishing (the last by worker "
                        f"{worker_id} deregistering); a job is dead-lettered after {self.policy.max_releases} "
                        "releases so that workers leaving repeatedly cannot hold it forever"
                    )
                    job.attempts = max(0, job.attempts - 1)  # a release spends no attempt, the last one included
                    self._finish(session, job, JobStatus.FAILED)
                    self._event(session, job, "failed", detail={"error": job.last_error, "releases": releases})
                    report.dead_lettered.append(job.id)
                    continue
                job.status = JobStatus.QUEUED
                job.attempts = max(0, job.attempts - 1)
                job.available_at = now
                job.lease_expires_at = None
                job.stage = None
                job.progress = None
                self._drop_ranking(session, job)
                self._event(session, job, "released", detail={"releases": releases})
                report.released.append(job.id)
        return report

    def reap(self, session: Session) -> ReapReport:
        """Fail exhausted expired jobs, finish cancelled ones whose worker vanished, mark silent workers lost."""
        report = ReapReport()
        with _transaction(session):
            now = self.clock()
            expired = session.scalars(
                select(Job)
                .where(Job.status == JobStatus.RUNNING, Job.lease_expires_at < now)
                .where(or_(Job.cancel_requested.is_(True), Job.attempts >= Job.max_attempts))
                .with_for_update(skip_locked=True)
            ).all()
            for job in expired:
                if job.cancel_requested:
                    self._finish(session, job, JobStatus.CANCELLED)
                    self._event(session, job, "cancelled", detail={"reason": "lease expired after cancel"})
                    report.cancelled.append(job.id)
                else:
                    job.last_error = (
                        f"lease expired: worker {job.worker_id} stopped sending heartbeats "
                        f"(attempt {job.attempts} of {job.max_attempts})"
                    )
                    self._finish(session, job, JobStatus.FAILED)
                    self._event(session, job, "failed", detail={"error": job.last_error})
                    report.failed.append(job.id)
            silent_since = now - timedelta(seconds=self.policy.worker_lost_after_s)
            for worker in session.scalars(
                select(Worker).where(Worker.state == "active", Worker.last_seen_at < silent_since)
            ).all():
                worker.state = "lost"
                report.lost_workers.append(worker.id)
        return report

    # ------------------------------------------------------------ reads
    def holds_live_lease(
        self, session: Session, actor: Actor, *, sha256: str | None = None, analysis_id: int | None = None
    ) -> bool:
        """Whether `actor` acts for a worker that holds a live lease (running, not expired) on a job of the
        analysis `analysis_id`, or of an analysis whose model, inputs or calibration file is `sha256`. Admins always
        do. What a worker token may download: only the files of the jobs it is working on now."""
        if actor.admin:
            return True
        if actor.token_id is None:
            return False
        query = (
            select(Job.id)
            .join(Worker, Worker.id == Job.worker_id)
            .join(Analysis, Analysis.id == Job.analysis_id)
            .where(
                Job.status == JobStatus.RUNNING, Job.lease_expires_at > self.clock(), Worker.token_id == actor.token_id
            )
        )
        if sha256 is not None:
            query = query.where(
                or_(
                    Analysis.artifact_sha256 == sha256,
                    Analysis.inputs_sha256 == sha256,
                    Analysis.calibration_sha256 == sha256,
                )
            )
        if analysis_id is not None:
            query = query.where(Job.analysis_id == analysis_id)
        return session.scalar(query.limit(1)) is not None

    def waiting_for_worker(self, session: Session, job: Job, *, unmeasured: bool = False) -> str | None:
        """Why a queued measure job cannot be claimed by anyone now (see `unclaimable_reason`), worded for its
        analysis: `unmeasured` when the analysis shows an unmeasured recommendation (from its inspect job) meanwhile.
        None when some worker could claim it (or it is not queued)."""
        if job.status != JobStatus.QUEUED or job.purpose != MEASURE:
            return None
        reason = self.unclaimable_reason(session, job.device_kind, job.backends or ())
        kind = job.device_kind
        if reason == "no_worker":
            then = (
                "the recommendation below is unmeasured; it is measured when one joins"
                if unmeasured
                else "the analysis waits in the queue until one joins"
            )
            return f"no worker for {kind} has been seen; {then} (`npu-advisor worker --device {kind}` on such a node)"
        if reason == "no_backend":
            then = "the recommendation below is unmeasured until one does" if unmeasured else "it waits until one does"
            needed = ", ".join(sorted(set(job.backends or ())))
            return f"no {kind} worker offers every backend this analysis asked for ({needed}); {then}"
        return None

    def should_inspect_meanwhile(self, session: Session, device_kind: str, backends: Iterable[str]) -> bool:
        """Whether a new analysis also gets an inspect job: no worker can measure it now, but some worker (of
        another kind) can inspect it at once. With no worker at all, none is added: the first to join may well be
        one that measures it (an inspection first would be work thrown away)."""
        if self.unclaimable_reason(session, device_kind, backends) is None:
            return False
        seen_since = self.clock() - timedelta(seconds=self.policy.worker_lost_after_s)
        live = select(Worker.id).where(Worker.state == "active", Worker.last_seen_at >= seen_since).limit(1)
        return session.scalar(live) is not None

    def unclaimable_reason(self, session: Session, device_kind: str, backends: Iterable[str]) -> str | None:
        """Why no worker could claim a job of this kind and backends now: "no_worker" (none of the kind was seen
        lately) or "no_backend" (none of them offers every backend in `backends`); None when some worker could."""
        seen_since = self.clock() - timedelta(seconds=self.policy.worker_lost_after_s)
        offers = session.scalars(
            select(Worker.backends).where(
                Worker.device_kind == device_kind, Worker.state == "active", Worker.last_seen_at >= seen_since
            )
        ).all()
        if not offers:
            return "no_worker"
        needed = {name.split(":", 1)[0] for name in backends}  # `onnxruntime:int8` needs a worker offering onnxruntime
        if needed and not any(needed <= set(offered or ()) for offered in offers):
            return "no_backend"
        return None

    def queue_position(self, session: Session, job: Job) -> int | None:
        """1 = next for its device kind; None when the job is not waiting. Inspect jobs (kind "any") are not
        counted: they take seconds, and a worker of the kind would also take them first."""
        if job.status != JobStatus.QUEUED:
            return None
        ahead = session.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.status == JobStatus.QUEUED, Job.device_kind == job.device_kind, goes_before(Job, job))
        )
        return int(ahead or 0) + 1

    def depth(self, session: Session) -> dict:
        """Jobs per state and device kind, and how long the oldest queued job of each kind has waited."""
        now = self.clock()
        by_state: dict[str, dict[str, int]] = {}
        for status, kind, count in session.execute(
            select(Job.status, Job.device_kind, func.count()).group_by(Job.status, Job.device_kind)
        ):
            by_state.setdefault(status, {})[kind] = count
        oldest: dict[str, dict] = {}
        for kind, created in session.execute(
            select(Job.device_kind, func.min(Job.created_at))
            .where(Job.status == JobStatus.QUEUED)
            .group_by(Job.device_kind)
        ):
            created = aware(created)
            oldest[kind] = {"created_at": created, "waiting_s": round((now - created).total_seconds(), 3)}
        seen_since = now - timedelta(seconds=self.policy.worker_lost_after_s)
        served = set(
            session.scalars(
                select(Worker.device_kind).where(Worker.state == "active", Worker.last_seen_at >= seen_since).distinct()
            ).all()
        )
        # queued work no worker can take, per device kind (inspect jobs, of kind "any", wait with their analyses)
        unserved = sorted(kind for kind in oldest if kind not in served and kind != ANY_DEVICE)
        return {"by_state": by_state, "oldest_waiting": oldest, "no_worker_for": unserved}

    def backoff_s(self, attempt: int) -> float:
        """Delay before retry number `attempt`: min(cap, base * 2^(attempt-1)) * (1 + jitter * U[0,1))."""
        base = min(self.policy.backoff_cap_s, self.policy.backoff_base_s * 2 ** max(0, attempt - 1))
        return base * (1 + self.policy.backoff_jitter * self.rng.random())

    # ------------------------------------------------------------ internals
    def _get(self, session: Session, job_id: int) -> Job:
        job = session.get(Job, job_id, populate_existing=True, with_for_update=True)
        if job is None:
            raise JobNotFound(f"job {job_id} does not exist")
        return job

    def _leased(self, session: Session, job_id: int, lease_token: str) -> Job:
        job = self._get(session, job_id)
        self._check_leased(job, lease_token)
        return job

    def _check_leased(self, job: Job, lease_token: str) -> None:
        """StaleLease unless `job` is running under `lease_token`."""
        if not self._token_matches(job, lease_token):
            raise StaleLease(
                f"job {job.id}: this lease is no longer valid (the job was re-claimed); stop working on it"
            )
        if job.status != JobStatus.RUNNING:
            raise StaleLease(f"job {job.id} is already {job.status}; stop working on it")

    @staticmethod
    def _release_counts(session: Session, job_ids: list[int]) -> dict[int, int]:
        if not job_ids:
            return {}
        rows = session.execute(
            select(JobEvent.job_id, func.count())
            .where(JobEvent.job_id.in_(job_ids), JobEvent.type == "released")
            .group_by(JobEvent.job_id)
        )
        return {job_id: int(count) for job_id, count in rows}

    @staticmethod
    def _token_matches(job: Job, lease_token: str) -> bool:
        return job.lease_token is not None and hmac.compare_digest(job.lease_token, lease_token or "")

    def _finish(self, session: Session, job: Job, status: JobStatus) -> None:
        """End a job. A measure job that ends (any way) ends its analysis' inspection too: it would be moot; one
        that ends without its results drops the ranking it posted."""
        job.status = status
        job.finished_at = self.clock()
        job.lease_expires_at = None
        if job.purpose == MEASURE:
            self._end_inspections(session, job.analysis_id, reason=f"its analysis' measurement {status}")
            if status != JobStatus.SUCCEEDED:
                self._drop_ranking(session, job)

    def _drop_ranking(self, session: Session, job: Job) -> None:
        """Remove the ranking a measure job's attempt posted (`record_ranked`) from its analysis: the attempt ended
        without its completion (failed, retried, cancelled, released, its lease expired), so the ranking is no
        one's answer. Results that are not a ranking (a completion's, an inspection's meanwhile) stay."""
        if job.purpose != MEASURE:
            return
        analysis = session.get(Analysis, job.analysis_id, with_for_update=True, populate_existing=True)
        if analysis is None or not pending_details(analysis.measurements):
            return
        analysis.measurements = None
        clear_recommendation(analysis, self.clock())

    @staticmethod
    def _awaits_measurement(session: Session, analysis_id: int) -> bool:
        """The analysis' measure job is still queued or running, so an inspection may show its recommendation.

        Its row is locked, SKIP LOCKED (PostgreSQL): one being changed right now (e.g. completing, which then ends
        this inspection) counts as not waiting, so this never waits for a lock the other side holds while it
        waits for this inspect job's (no deadlock)."""
        query = (
            select(Job.id)
            .where(Job.analysis_id == analysis_id, Job.purpose == MEASURE, Job.status.in_(ACTIVE_JOB_STATUSES))
            .with_for_update(skip_locked=True)
        )
        return session.scalar(query) is not None

    @staticmethod
    def active_job_with_key(session: Session, dedupe_key: str) -> Job | None:
        """The queued or running job with this dedupe key (its unique index allows one)."""
        return session.scalars(
            select(Job).where(Job.dedupe_key == dedupe_key, Job.status.in_(ACTIVE_JOB_STATUSES))
        ).first()

    def _touch_worker(self, session: Session, worker_id: str | None, now: datetime) -> None:
        if worker_id is not None:
            session.execute(
                update(Worker)
                .where(Worker.id == worker_id)
                .values(last_seen_at=now)
                .execution_options(synchronize_session=False)
            )

    def _event(
        self, session: Session, job: Job, type_: str, *, at: datetime | None = None, detail: dict | None = None
    ) -> None:
        session.add(
            JobEvent(
                job_id=job.id,
                attempt=job.attempts,
                worker_id=job.worker_id,
                type=type_,
                at=at or self.clock(),
                detail=detail,
            )
        )


def _claim_statement():  # noqa: ANN202 - an ORM UPDATE ... RETURNING Job, built once and reused
    candidate = aliased(Job, name="candidate")
    moment = Job.__table__.c.available_at.type
    now = bindparam("claim_now", type_=moment)
    unmet_requirement = (
        select(JobRequirement.job_id)
        .where(
            JobRequirement.job_id == candidate.id,
            JobRequirement.backend.not_in(bindparam("offered", expanding=True)),
        )
        .correlate(candidate)
    )
    next_job_id = (
        select(candidate.id)
        .where(
            claimable(candidate, now),
            candidate.device_kind.in_((bindparam("wanted_device_kind"), ANY_DEVICE)),
            ~exists(unmet_requirement),
        )
        .order_by(*claim_order(candidate))
        .limit(1)
        .with_for_update(skip_locked=True)  # PostgreSQL; SQLite has one writer at a time anyway
        .scalar_subquery()
    )
    return (
        update(Job)
        .where(Job.id == next_job_id)
        .values(
            status=JobStatus.RUNNING,
            attempts=Job.attempts + 1,
            lease_token=bindparam("new_token"),
            worker_id=bindparam("new_worker_id"),
            lease_expires_at=bindparam("new_expiry", type_=moment),
            heartbeat_at=now,
            started_at=now,
            stage=None,
            progress=None,
        )
        .returning(Job)
    )


_CLAIM_STATEMENT = _claim_statement()


def _has_measurements(session: Session, analysis_id: int) -> bool:
    """The analysis holds measurements (its measure job's, ranked or complete)."""
    query = select(Analysis.id).where(Analysis.id == analysis_id, Analysis.measurements.is_not(None))
    return session.scalar(query) is not None
