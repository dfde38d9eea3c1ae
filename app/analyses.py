"""Analyses: submission (with dedupe), the public view, storing a worker's results, re-deciding.

An analysis has exactly one job; its status, stage and progress are the job's (no second copy to
keep in sync). Decisions come from `advisor.decide`, reports from `advisor.report`, both torch-free.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, select
from sqlmodel import Session

from app.models import Analysis, Artifact, Job, Measurement
from app.queue import JobQueue
from app.storage import ArtifactStore

ANALYSIS_STATUS = {
    "queued": "queued",
    "running": "running",
    "succeeded": "done",
    "failed": "failed",
    "cancelled": "cancelled",
}
JOB_STATUS = {analysis: job for job, analysis in ANALYSIS_STATUS.items()}
SORTABLE = {
    "created_at": Analysis.created_at,
    "updated_at": Analysis.updated_at,
    "model_name": Analysis.model_name,
    "status": Job.status,
    "target": Analysis.target,
    "id": Analysis.id,
    "speedup": Analysis.speedup_vs_eager,
}


class DecisionFailed(Exception):
    """The decision engine could not produce a recommendation; the message says why."""


class RerunRefused(Exception):
    """An analysis cannot be measured again; `status_code` is the HTTP status the API answers with."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class Submission:
    analysis: Analysis
    job: Job
    deduplicated: bool


def dedupe_key(
    *, artifact_sha256: str, inputs_sha256: str | None, context: dict, target: str, backends: list[str]
) -> str:
    """Same artifact + inputs + context + target + requested backends = the same question."""
    canonical = json.dumps(
        {"a": artifact_sha256, "i": inputs_sha256, "c": context, "t": target, "b": sorted(backends)}, sort_keys=True
    )
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
) -> Submission:
    """Create an analysis and its job, or return a recent identical one (unless `force`)."""
    now = queue.clock()
    key = dedupe_key(
        artifact_sha256=artifact.sha256,
        inputs_sha256=inputs.sha256 if inputs else None,
        context=context,
        target=target,
        backends=backends,
    )
    if not force and (earlier := _recent_duplicate(session, key, now - timedelta(seconds=cache_window_s))):
        return Submission(analysis=earlier[0], job=earlier[1], deduplicated=True)
    analysis = Analysis(
        model_name=model_name,
        format=artifact.format,
        target=target,
        submitted_by=submitted_by,
        artifact_sha256=artifact.sha256,
        inputs_sha256=inputs.sha256 if inputs else None,
        context=context,
        backends=backends,
        dedupe_key=key,
        created_at=now,
        updated_at=now,
    )
    session.add(analysis)
    session.commit()
    job, _ = queue.enqueue(
        session,
        analysis_id=analysis.id,
        device_kind=target,
        backends=backends,
        dedupe_key=None if force else key,
    )
    return Submission(analysis=analysis, job=job, deduplicated=False)


def rerun_analysis(
    session: Session,
    queue: JobQueue,
    store: ArtifactStore,
    *,
    analysis_id: int,
    submitted_by: str,
    cache_window_s: float,
) -> Submission:
    """Measure the stored artifact (and inputs) again with the same context and backends, as a new analysis.

    Always a new measurement (`force`: no dedupe against the earlier one, whose results stay as they are)."""
    old = session.get(Analysis, analysis_id)
    if old is None:
        raise RerunRefused(f"analysis {analysis_id} does not exist", 404)
    artifact = session.get(Artifact, old.artifact_sha256)
    if artifact is None or not store.exists(old.artifact_sha256):
        raise RerunRefused(f"the model file of analysis {analysis_id} is no longer stored; upload it again", 409)
    inputs = session.get(Artifact, old.inputs_sha256) if old.inputs_sha256 else None
    if old.inputs_sha256 and (inputs is None or not store.exists(old.inputs_sha256)):
        raise RerunRefused(f"the inputs file of analysis {analysis_id} is no longer stored; upload it again", 409)
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
    )


def _recent_duplicate(session: Session, key: str, since: datetime) -> tuple[Analysis, Job] | None:
    row = session.execute(
        select(Analysis, Job)
        .join(Job, Job.analysis_id == Analysis.id)
        .where(Analysis.dedupe_key == key, Analysis.created_at >= since)
        .where(Job.status.in_(("queued", "running", "succeeded")))
        .order_by(Analysis.id.desc())
        .limit(1)
    ).first()
    return (row[0], row[1]) if row else None


def job_of(session: Session, analysis_id: int) -> Job | None:
    return session.scalars(select(Job).where(Job.analysis_id == analysis_id).order_by(Job.id.desc())).first()


def analysis_view(session: Session, queue: JobQueue, analysis: Analysis, job: Job | None) -> dict[str, Any]:
    """The public JSON of one analysis (the `GET /api/v1/analyses/{id}` shape)."""
    status = ANALYSIS_STATUS.get(job.status, job.status) if job else "failed"
    return {
        "id": analysis.id,
        "status": status,
        "stage": job.stage if job else None,
        "progress": job.progress if job else None,
        "model_name": analysis.model_name,
        "format": analysis.format,
        "target": analysis.target,
        "context": analysis.context,
        "backends": analysis.backends,
        "inspection": analysis.inspection,
        "measurements": analysis.measurements,
        "recommendation": analysis.recommendation,
        "error": job.last_error if job and status == "failed" else None,
        "submitted_by": analysis.submitted_by,
        "created_at": analysis.created_at,
        "updated_at": _last_change(analysis, job),
        "queue_position": queue.queue_position(session, job) if job else None,
        "job": {"id": job.id, "attempts": job.attempts, "max_attempts": job.max_attempts} if job else None,
    }


def _last_change(analysis: Analysis, job: Job | None) -> datetime:
    moments = [analysis.updated_at]
    if job is not None:
        moments += [t for t in (job.created_at, job.heartbeat_at, job.finished_at) if t is not None]
    return max(moments)


def list_analyses(
    session: Session,
    *,
    status: str | None = None,
    target: str | None = None,
    backend: str | None = None,
    model: str | None = None,
    submitter: str | None = None,
    sort: str = "created_at",
    order: str = "desc",
    page: int = 1,
    per_page: int = 20,
) -> tuple[list[tuple[Analysis, Job]], int]:
    """A page of (analysis, job) rows matching the filters, and the total count."""
    conditions = []
    if status:
        conditions.append(Job.status == JOB_STATUS.get(status, status))
    if target:
        conditions.append(Analysis.target == target)
    if backend:
        conditions.append(Analysis.recommended_backend == backend)
    if model:
        conditions.append(Analysis.model_name.contains(model, autoescape=True))
    if submitter:
        conditions.append(Analysis.submitted_by == submitter)
    where = and_(True, *conditions)
    base = select(Analysis, Job).join(Job, Job.analysis_id == Analysis.id).where(where)
    total = session.scalar(select(func.count()).select_from(base.subquery())) or 0
    column = SORTABLE[sort]
    ordering = column.asc() if order == "asc" else column.desc()
    if sort == "speedup":
        ordering = ordering.nulls_last()  # unmeasured recommendations last either way (and on PostgreSQL too)
    rows = session.execute(
        base.order_by(ordering, Analysis.id.desc()).offset((page - 1) * per_page).limit(per_page)
    ).all()
    return [(row[0], row[1]) for row in rows], total


def decide_recommendation(context: dict, inspection: dict | None, measurements: dict | None) -> dict:
    """Run the decision engine on stored data; the result carries `engine_version`."""
    try:
        from advisor.context import parse_context
        from advisor.decide import ENGINE_VERSION, decide

        recommendation = dict(decide(parse_context(context), inspection, measurements))
    except Exception as exc:  # noqa: BLE001 - surfaced to the user as the analysis' error
        raise DecisionFailed(f"the decision engine failed: {type(exc).__name__}: {exc}") from exc
    recommendation.setdefault("engine_version", ENGINE_VERSION)
    return recommendation


def outcome_recorder(
    analysis_id: int, inspection: dict | None, measurements: dict | None, recommendation: dict, now: datetime
) -> Callable[[Session, Job], None]:
    """What `JobQueue.complete` stores in its transaction: results, recommendation, measurement rows."""

    def record(session: Session, job: Job) -> None:
        analysis = session.get(Analysis, analysis_id)
        analysis.inspection = inspection
        analysis.measurements = measurements
        store_recommendation(analysis, recommendation, now)
        for row in (measurements or {}).get("measurements", []):
            session.add(measurement_row(analysis_id, row))

    return record


def store_recommendation(analysis: Analysis, recommendation: dict, now: datetime) -> None:
    """Store the recommendation and its denormalised, indexed columns (the dashboard sorts on them)."""
    analysis.recommendation = recommendation
    columns = recommendation_columns(recommendation, analysis.measurements)
    analysis.recommended_backend = columns["recommended_backend"]
    analysis.recommended_mode = columns["recommended_mode"]
    analysis.speedup_vs_eager = columns["speedup_vs_eager"]
    analysis.engine_version = recommendation.get("engine_version")
    analysis.updated_at = now


def recommendation_columns(recommendation: dict | None, measurements: dict | None) -> dict[str, Any]:
    """recommended_backend / recommended_mode ("default" when the engine names none) / speedup_vs_eager: the
    side-by-side speedup of the recommended backend+mode's measurement row, None when it was not measured."""
    backend = (recommendation or {}).get("backend")
    if not backend:
        return {"recommended_backend": None, "recommended_mode": None, "speedup_vs_eager": None}
    mode = (recommendation or {}).get("mode") or "default"
    speedup = None
    for row in (measurements or {}).get("measurements", []):
        if row.get("backend") == backend and (row.get("mode") or "default") == mode:
            value = row.get("speedup_vs_eager")
            speedup = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
            break
    return {"recommended_backend": backend, "recommended_mode": mode, "speedup_vs_eager": speedup}


def measurement_row(analysis_id: int, row: dict) -> Measurement:
    latency = row.get("latency") or {}
    return Measurement(
        analysis_id=analysis_id,
        backend=str(row.get("backend", "?")),
        mode=row.get("mode"),
        device=row.get("device"),
        status=str(row.get("status", "?")),
        median_ms=latency.get("median_ms"),
        compile_s_cold=row.get("compile_s_cold"),
        speedup_vs_eager=row.get("speedup_vs_eager"),
        data=row,
    )


def report_input(analysis: Analysis) -> dict:
    """The dict `advisor.report.render` takes."""
    return {
        "model_name": analysis.model_name,
        "context": analysis.context,
        "inspection": analysis.inspection,
        "measurements": analysis.measurements,
        "recommendation": analysis.recommendation,
    }
