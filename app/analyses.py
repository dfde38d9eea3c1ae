"""Analyses: submission (with dedupe), re-runs, the public view and the list.

An analysis has exactly one measure job; its status, stage and progress are that job's (no second copy to keep in
sync). One submitted while no worker can measure it also gets an inspect job (app.job_queue), whose results give
it an unmeasured recommendation meanwhile; every "job of an analysis" here is its measure job.
What a finished job stores on its analysis (results, recommendation) is app.outcomes, called by the queue's
completion (app.job_queue); reports come from `advisor.core.report`, torch-free.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, func, inspect, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased
from sqlmodel import Session

from advisor.core.noise import is_noisy
from advisor.core.results import Inspection, MeasurementRun, Recommendation, read
from advisor.core.source_report import report_digest, source_report_or_none, with_source_report
from advisor.core.status import AnalysisStatus
from app.batch_jobs import batch_job_label
from app.job_queue import JobQueue
from app.models import (
    ACTIVE_JOB_STATUSES,
    MEASURE,
    Analysis,
    AnalysisDetail,
    Artifact,
    Job,
    JobAttempts,
    JobStatus,
    MeasuredBy,
    Worker,
)
from app.queue_order import goes_before
from app.service_errors import ErrorCode, ServiceError
from app.storage import ArtifactStorage

SUBMIT_ATTEMPTS = 3  # a submission's transaction, again after losing an artifact-row insert race (PostgreSQL)
_measure_job = and_(Job.analysis_id == Analysis.id, Job.purpose == MEASURE)  # the join "analysis and its job"


class RerunRefused(ServiceError):
    """An analysis cannot be measured again; its `code` (app.service_errors) gives the HTTP status of the answer."""

    code = ErrorCode.CONFLICT  # unless given: NOT_FOUND, FORBIDDEN


@dataclass(frozen=True)
class Submission:
    analysis: Analysis
    job: Job
    deduplicated: bool


def dedupe_key(
    *,
    artifact_sha256: str,
    inputs_sha256: str | None,
    context: dict,
    target: str,
    backends: list[str],
    tag: str | None = None,
    source_digest: str | None = None,
    calibration_sha256: str | None = None,
) -> str:
    """Same artifact + inputs + context + target + requested backends (+ suite tag) (+ source-side report) = the same
    question. A tagged submission is never answered by an analysis of another suite (or none): each suite keeps its own
    history. `source_digest` (advisor.core.source_report.report_digest, timings left out): a program uploaded with
    another source-side report is another question, measured again, so that report is stored and decided with, never
    lost behind the earlier one's answer. `calibration_sha256`: the int8 options' calibration file; another file
    calibrates (and measures) them differently, so it is another question too."""
    question = {"a": artifact_sha256, "i": inputs_sha256, "c": context, "t": target, "b": sorted(backends)}
    if tag is not None:  # untagged keys stay what they were before tags existed
        question["g"] = tag
    if source_digest is not None:  # and so do keys without a source-side report
        question["s"] = source_digest
    if calibration_sha256 is not None:  # and without a calibration file
        question["k"] = calibration_sha256
    canonical = json.dumps(question, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def submit_analysis(
    session: Session,
    queue: JobQueue,
    *,
    artifact: Artifact,
    inputs: Artifact | None,
    context: dict,
    target: str,
    model_name: str,
    backends: list[str],
    submitted_by: str,
    force: bool,
    cache_window_s: float,
    tag: str | None = None,
    source_report: dict | None = None,
    calibration: Artifact | None = None,
    upload_names: dict[str, str] | None = None,
) -> Submission:
    """Create an analysis and its job, or return a recent identical one (unless `force`).
    `source_report`: the validated source-side report uploaded with the program (app.intake), stored with it.
    `calibration`: the checked calibration .npz's row (advisor.core.calibration), like `inputs`.
    `upload_names`: the uploaded files' own names (app.upload_names.upload_names), for the reproduce command.

    One short write transaction: the artifact rows (`artifact`, `inputs`: rows to insert unless stored
    already; their files must be in the store), the analysis and its job (`JobQueue.enqueue`, whose commit
    is the only one) are created together or not at all. Nothing slow happens inside it: the files were
    hashed, checked and stored before. A file whose row is never written is an orphan (`collect_orphans`).
    Concurrent identical submissions: serialised by the write lock (SQLite) or a transaction-scoped
    advisory lock on the dedupe key (PostgreSQL), so one creates the job and the others see it."""
    key = dedupe_key(
        artifact_sha256=artifact.sha256,
        inputs_sha256=inputs.sha256 if inputs else None,
        context=context,
        target=target,
        backends=backends,
        tag=tag,
        source_digest=report_digest(source_report) if source_report is not None else None,
        calibration_sha256=calibration.sha256 if calibration else None,
    )
    fields = _NewAnalysis(
        artifact,
        inputs,
        context,
        target,
        model_name,
        backends,
        submitted_by,
        tag,
        source_report,
        calibration,
        upload_names,
    )
    if session.in_transaction():
        session.commit()  # start from a fresh transaction (whatever was read before is not held across)
    for attempt in range(SUBMIT_ATTEMPTS):
        try:
            return _submit_once(session, queue, key, fields, force=force, cache_window_s=cache_window_s)
        except IntegrityError:
            # a concurrent submission of the same file inserted its artifact row first (PostgreSQL): again
            session.rollback()
            if attempt + 1 == SUBMIT_ATTEMPTS:
                raise
        except BaseException:
            session.rollback()
            raise
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class _NewAnalysis:
    """What one submission stores: its files' rows and the analysis' own fields."""

    artifact: Artifact
    inputs: Artifact | None
    context: dict
    target: str
    model_name: str
    backends: list[str]
    submitted_by: str
    tag: str | None = None
    source_report: dict | None = None
    calibration: Artifact | None = None
    upload_names: dict[str, str] | None = None


def _submit_once(
    session: Session, queue: JobQueue, key: str, fields: _NewAnalysis, *, force: bool, cache_window_s: float
) -> Submission:
    now = queue.clock()
    artifact, inputs, target, backends = fields.artifact, fields.inputs, fields.target, fields.backends
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": int(key[:15], 16)})
    if not force and (earlier := _recent_duplicate(session, key, now - timedelta(seconds=cache_window_s))):
        session.commit()  # ends the (read-only so far) transaction
        return Submission(analysis=earlier[0], job=earlier[1], deduplicated=True)
    # Outside the window an identical job may still be queued or running (it holds the key's unique index):
    # this one is measured again, as a job without the key, like a forced one.
    job_key = None if force or queue.active_job_with_key(session, key) is not None else key
    for row in (artifact, inputs, fields.calibration):
        if row is not None and session.get(Artifact, row.sha256) is None:
            session.add(_new_artifact_row(row))
    session.flush()  # the artifact rows first: the analysis refers to them (no ORM relationship orders it)
    analysis = Analysis(
        model_name=fields.model_name,
        format=artifact.format,
        target=target,
        submitted_by=fields.submitted_by,
        tag=fields.tag,
        source_report=fields.source_report,
        artifact_sha256=artifact.sha256,
        inputs_sha256=inputs.sha256 if inputs else None,
        calibration_sha256=fields.calibration.sha256 if fields.calibration else None,
        upload_names=fields.upload_names or None,
        context=fields.context,
        backends=backends,
        dedupe_key=key,
        created_at=now,
        updated_at=now,
    )
    session.add(analysis)
    session.flush()  # the analysis id for its job; enqueue's commit below commits these rows with the job
    job, created = queue.enqueue(
        session,
        analysis_id=analysis.id,
        device_kind=target,
        backends=backends,
        dedupe_key=job_key,
        inspect_meanwhile=queue.should_inspect_meanwhile(session, target, backends),
    )
    if not created:  # cannot happen under the locks above; never leave an analysis without a job
        if inspect(analysis).persistent:
            session.delete(analysis)
            session.commit()
        return Submission(analysis=session.get(Analysis, job.analysis_id), job=job, deduplicated=True)
    return Submission(analysis=analysis, job=job, deduplicated=False)


def _new_artifact_row(template: Artifact) -> Artifact:
    """A fresh row from `template`, field by field (a template may be added again after a rolled-back attempt)."""
    return Artifact.model_validate(template.model_dump())


def collect_orphans(session: Session, store: ArtifactStorage, *, min_age_s: float) -> list[str]:
    """Remove stored files that no artifact row refers to and that were stored more than `min_age_s` ago
    (a submission whose transaction failed after its file was stored); returns their sha256."""
    cutoff = time.time() - min_age_s
    candidates = list(store.stored_before(cutoff))
    removed = []
    for start in range(0, len(candidates), 500):
        batch = candidates[start : start + 500]
        known = set(session.scalars(select(Artifact.sha256).where(Artifact.sha256.in_(batch))))
        session.commit()
        removed += [sha for sha in batch if sha not in known and store.remove_if_before(sha, cutoff)]
    return removed


def rerun_analysis(
    session: Session,
    queue: JobQueue,
    store: ArtifactStorage,
    *,
    analysis_id: int,
    submitted_by: str,
    cache_window_s: float,
) -> Submission:
    """Measure the stored artifact (and inputs, calibration file) again with the same context and backends, as a new
    analysis.

    Always a new measurement (`force`: no dedupe against the earlier one, whose results stay as they are)."""
    old = session.get(Analysis, analysis_id)
    if old is None:
        raise RerunRefused(f"analysis {analysis_id} does not exist", ErrorCode.NOT_FOUND)
    artifact = session.get(Artifact, old.artifact_sha256)
    if artifact is None or not store.exists(old.artifact_sha256):
        raise RerunRefused(f"the model file of analysis {analysis_id} is no longer stored; upload it again")
    inputs = session.get(Artifact, old.inputs_sha256) if old.inputs_sha256 else None
    if old.inputs_sha256 and (inputs is None or not store.exists(old.inputs_sha256)):
        raise RerunRefused(f"the inputs file of analysis {analysis_id} is no longer stored; upload it again")
    calibration = session.get(Artifact, old.calibration_sha256) if old.calibration_sha256 else None
    if old.calibration_sha256 and (calibration is None or not store.exists(old.calibration_sha256)):
        raise RerunRefused(f"the calibration file of analysis {analysis_id} is no longer stored; upload it again")
    return submit_analysis(
        session,
        queue,
        artifact=artifact,
        inputs=inputs,
        context=dict(old.context),
        target=old.target,
        model_name=old.model_name,
        backends=list(old.backends),
        submitted_by=submitted_by,
        force=True,
        cache_window_s=cache_window_s,
        tag=old.tag,  # a re-run stays in its suite
        source_report=old.source_report,  # and keeps the report its program came with
        calibration=calibration,
    )


def _recent_duplicate(session: Session, key: str, since: datetime) -> tuple[Analysis, Job] | None:
    """The newest identical analysis inside the window that is queued, running or done - unless its run was
    noisy (advisor.core.noise): then the new submission measures again."""
    row = session.execute(
        select(Analysis, Job)
        .join(Job, _measure_job)
        .where(Analysis.dedupe_key == key, Analysis.created_at >= since)
        .where(Job.status.in_((*ACTIVE_JOB_STATUSES, JobStatus.SUCCEEDED)))
        .order_by(Analysis.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    if row[1].status == JobStatus.SUCCEEDED and is_noisy(row[0].measurements):
        return None  # a noisy run is measured again, never served as the answer to a new submission
    return row[0], row[1]


def job_of(session: Session, analysis_id: int) -> Job | None:
    """The analysis' measure job (its status is the analysis' status)."""
    query = select(Job).where(Job.analysis_id == analysis_id, Job.purpose == MEASURE).order_by(Job.id.desc())
    return session.scalars(query).first()


def analysis_view(
    session: Session,
    queue: JobQueue,
    analysis: Analysis,
    job: Job | None,
    *,
    positions: dict[int, int] | None = None,
) -> AnalysisDetail:
    """The public shape of one analysis (app.models.AnalysisDetail): what the API answers and the analysis page
    shows. `positions`: the queue positions of a page's jobs, found at once by `queue_positions` (otherwise one
    query here)."""
    view = analysis_core(session, queue, analysis, job, positions=positions)
    return AnalysisDetail(
        **view,
        context=analysis.context,
        backends=analysis.backends,
        upload_names=analysis.upload_names,
        inspection=read(Inspection, analysis.inspection),
        measurements=read(MeasurementRun, analysis.measurements),
        recommendation=read(Recommendation, analysis.recommendation),
        error=job.last_error if job and view["status"] == AnalysisStatus.FAILED else None,
        waiting_for_worker=queue.waiting_for_worker(session, job, unmeasured=_unmeasured(analysis)) if job else None,
        job=JobAttempts(id=job.id, attempts=job.attempts, max_attempts=job.max_attempts) if job else None,
        measured_by=measured_by(session, job),
        source_report=source_report_or_none(analysis.source_report),  # from the submitting machine
    )


def measured_by(session: Session, job: Job | None) -> MeasuredBy | None:
    """The worker whose completion the analysis' measurements are, once its measure job succeeded; None before (an
    unmeasured recommendation, from an inspect job, names no one)."""
    if job is None or job.status != JobStatus.SUCCEEDED or job.worker_id is None:
        return None
    worker = session.get(Worker, job.worker_id)
    if worker is None:
        return MeasuredBy(worker_id=job.worker_id, name="")
    return MeasuredBy(worker_id=job.worker_id, name=worker.name, batch_job=batch_job_label(worker.environment))


def _unmeasured(analysis: Analysis) -> bool:
    """The analysis shows a recommendation without measurements (its inspect job's, while it waits)."""
    return analysis.recommendation is not None and analysis.measurements is None


def analysis_core(
    session: Session,
    queue: JobQueue,
    analysis: Analysis,
    job: Job | None,
    *,
    positions: dict[int, int] | None = None,
) -> dict[str, Any]:
    """What the full view and the list summary (app.summaries) share: columns of the analysis and its job only."""
    if positions is not None:
        position = positions.get(job.id) if job else None
    else:
        position = queue.queue_position(session, job) if job else None
    return {
        "id": analysis.id,
        "status": analysis_status(job),
        "stage": job.stage if job else None,
        "progress": job.progress if job else None,
        "model_name": analysis.model_name,
        "format": analysis.format,
        "target": analysis.target,
        "submitted_by": analysis.submitted_by,
        "tag": analysis.tag,
        "created_at": analysis.created_at,
        "updated_at": _last_change(analysis, job),
        "queue_position": position,
    }


_AHEAD = aliased(Job)
_QUEUE_POSITIONS = select(
    Job.id,
    select(func.count())
    .select_from(_AHEAD)
    .where(_AHEAD.status == JobStatus.QUEUED, _AHEAD.device_kind == Job.device_kind, goes_before(_AHEAD, Job))
    .scalar_subquery(),
).where(
    Job.id.in_(bindparam("ids", expanding=True)), Job.status == JobStatus.QUEUED
)  # built once: a list page's statement


def queue_positions(session: Session, jobs: list[Job | None]) -> dict[int, int]:
    """{job id: position} for the queued ones among `jobs`, in one query (JobQueue.queue_position's numbers)."""
    ids = [job.id for job in jobs if job is not None and job.status == JobStatus.QUEUED]
    if not ids:
        return {}
    return {job_id: int(ahead or 0) + 1 for job_id, ahead in session.execute(_QUEUE_POSITIONS, {"ids": ids})}


def analysis_status(job: Job | None) -> AnalysisStatus:
    """The status an analysis shows: its measure job's (`succeeded` shows as `done`); failed without one."""
    return JobStatus(job.status).analysis_status if job is not None else AnalysisStatus.FAILED


def _last_change(analysis: Analysis, job: Job | None) -> datetime:
    moments = [analysis.updated_at]
    if job is not None:
        moments += [t for t in (job.created_at, job.heartbeat_at, job.finished_at) if t is not None]
    return max(moments)


def report_input(analysis: Analysis) -> dict:
    """The dict `advisor.core.report.render` takes; the source-side report, when the program came with one, in its
    inspection, where the reports list it labelled as the submitting machine's."""
    return {
        "model_name": analysis.model_name,
        "context": analysis.context,
        "inspection": with_source_report(analysis.inspection, analysis.source_report),
        "measurements": analysis.measurements,
        "recommendation": analysis.recommendation,
    }
