"""Database tables and their API shapes (SQLModel: Base -> table / Create / Public per entity).

Timestamps are timezone-aware UTC datetimes (the server clock is the only clock). JSON payloads (context,
inspection, measurements, recommendation) are stored as JSON columns in the shapes of advisor.core.results.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, text
from sqlmodel import Field, SQLModel

from advisor.core.results import Inspection, MeasurementRun, Recommendation
from advisor.core.source_report import SourceReport
from advisor.core.status import AnalysisStatus


class JobStatus(StrEnum):
    """A job's state (app.job_queue makes every transition): queued -> running -> succeeded | failed | cancelled.
    A StrEnum: the stored strings are these values, so no migration came with it."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def analysis_status(self) -> AnalysisStatus:
        """What the analysis of its measure job shows: the same word, except `succeeded` shows as `done`."""
        return AnalysisStatus.DONE if self is JobStatus.SUCCEEDED else AnalysisStatus(self.value)

    @classmethod
    def of_analysis(cls, status: AnalysisStatus | str) -> JobStatus:
        """The job status an analysis status filter means (`done` -> `succeeded`)."""
        return cls.SUCCEEDED if status == AnalysisStatus.DONE else cls(str(status))


ACTIVE_JOB_STATUSES = (JobStatus.QUEUED, JobStatus.RUNNING)  # holds a dedupe key's unique index (Job below)
# A job measures its analysis on the target's device kind, or (for a target no worker serves yet) only inspects it,
# on a worker of any kind, so that the analysis has an unmeasured recommendation meanwhile (app.job_queue).
MEASURE, INSPECT = "measure", "inspect"
ANY_DEVICE = "any"  # the device kind of an inspect job: claimable by every worker
ROLES = ("admin", "user", "worker")


# ---------------------------------------------------------------- Artifact
class ArtifactBase(SQLModel):
    sha256: str = Field(primary_key=True, max_length=64)
    kind: str = Field(default="model", max_length=16)  # "model" | "inputs" | "calibration"
    format: str | None = Field(default=None, max_length=32)  # "exported_program" | "torchscript" for models
    # uploads may pass 2 GiB, where PostgreSQL's INTEGER stops (SQLite's INTEGER holds 8 bytes already)
    size_bytes: int = Field(sa_type=BigInteger().with_variant(Integer(), "sqlite"))
    entries: int | None = None


class Artifact(ArtifactBase, table=True):
    """A content-addressed file in <data>/artifacts/<sha[:2]>/<sha>."""

    archive_name: str | None = None
    custom_op_names: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    created_at: datetime


# ---------------------------------------------------------------- Analysis
class AnalysisBase(SQLModel):
    model_name: str = Field(max_length=200, index=True)
    format: str | None = Field(default=None, max_length=32)
    target: str = Field(max_length=16, index=True)  # device kind the context targets: cpu | cuda | npu
    submitted_by: str = Field(default="anonymous", max_length=200, index=True)
    # a model suite's name (e.g. "nightly-cv"): its analyses are summarised together at /suites/TAG (app.suites)
    tag: str | None = Field(default=None, max_length=64, index=True)


class Analysis(AnalysisBase, table=True):
    """One submission: an artifact + deployment context, measured by one job, decided by the engine (and, while no
    worker can measure it, inspected by a second job for an unmeasured recommendation meanwhile)."""

    id: int | None = Field(default=None, primary_key=True)
    artifact_sha256: str = Field(foreign_key="artifact.sha256", max_length=64)
    inputs_sha256: str | None = Field(default=None, foreign_key="artifact.sha256", max_length=64)
    # the int8 options' calibration .npz (advisor.core.calibration), checked on upload; None: the example inputs
    calibration_sha256: str | None = Field(default=None, foreign_key="artifact.sha256", max_length=64)
    # the uploaded files' own names ({"model": "resnet.pt2", "calibration": "samples.npz"}; app.upload_names): what the
    # reproduce command names, files the user has
    upload_names: dict[str, str] | None = Field(default=None, sa_column=Column(JSON(none_as_null=True)))
    context: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    backends: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    dedupe_key: str = Field(max_length=64, index=True)
    inspection: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON(none_as_null=True)))
    # the MeasurementRun the worker posted (advisor.core.results.MeasurementRun)
    measurements: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON(none_as_null=True)))
    recommendation: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON(none_as_null=True)))
    # the source-side report `analyze FILE.py:factory --server` uploaded with the program (advisor.core.source_report,
    # validated on upload): from the submitting machine, not measured by a worker; the decision reads it (app.outcomes)
    source_report: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON(none_as_null=True)))
    # Denormalised from `recommendation` (app.outcomes.store_recommendation) so the list sorts on indexes:
    recommended_backend: str | None = Field(default=None, max_length=64, index=True)
    recommended_mode: str | None = Field(default=None, max_length=64, index=True)
    speedup_vs_eager: float | None = Field(default=None, index=True)  # the recommended option's measured speedup
    engine_version: str | None = Field(default=None, max_length=32)
    created_at: datetime = Field(index=True)
    updated_at: datetime


class MeasuredBy(SQLModel):
    """The worker whose completion an analysis' measurements are."""

    worker_id: str
    name: str
    batch_job: str | None = None  # "Slurm job 123": the scheduler's batch job the worker ran in (app.batch_jobs)


class JobAttempts(SQLModel):
    """An analysis' measure job as the API shows it: which one, and how many of its attempts are spent."""

    id: int
    attempts: int
    max_attempts: int


class AnalysisDetail(AnalysisBase):
    """The analysis as the API returns it (`GET /api/v1/analyses/{id}`, and after cancel and re-decide) and the
    analysis page reads it: its one public shape, built by app.analyses.analysis_view. Status, stage and progress
    come from its job; the results are typed (advisor.core.results, read leniently: an analysis stored by an older
    version is served, never a 500), so /openapi.json documents their shapes.

    Served with `response_model_exclude_unset`: a result field that was not stored is not sent, so the JSON is
    the stored results as they were (plus unknown fields, which are kept)."""

    id: int
    status: AnalysisStatus
    stage: str | None  # what the worker is doing now, e.g. "measure:inductor:default"
    progress: float | None
    context: dict[str, Any]
    backends: list[str]
    upload_names: dict[str, str] | None = None  # the uploaded files' names (model, inputs, calibration)
    inspection: Inspection | None
    measurements: MeasurementRun | None
    recommendation: Recommendation | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    queue_position: int | None  # 1 = next for its device kind; None when not waiting
    # queued and no worker can claim it now: why (no worker of its kind seen), and whether the recommendation shown
    # meanwhile is unmeasured ("no worker for npu has been seen; the recommendation below is unmeasured; ...")
    waiting_for_worker: str | None = None
    job: JobAttempts | None
    measured_by: MeasuredBy | None = None  # None until measured (an unmeasured recommendation names no one)
    # uploaded with the program by `analyze FILE.py:factory --server`: from the submitting machine, not measured by a
    # worker (advisor.core.source_report.SourceReport); None for an uploaded file
    source_report: SourceReport | None = None


SUMMARY_ERROR_CHARS = 500


class AnalysisSummary(SQLModel):
    """One item of `GET /api/v1/analyses`: no context, results or recommendation body (those are on
    `GET /api/v1/analyses/{id}`), so a page stays small whatever the workers sent (app.summaries builds it)."""

    id: int
    status: AnalysisStatus
    stage: str | None
    progress: float | None
    model_name: str
    format: str | None
    target: str
    submitted_by: str
    tag: str | None = None  # the model suite it belongs to
    created_at: datetime
    updated_at: datetime
    recommended_backend: str | None  # None: not decided yet, or no backend qualifies
    recommended_mode: str | None
    speedup_vs_eager: float | None  # the recommended option's measured speedup; None when not measured
    error: str | None  # the failure's reason, cut to SUMMARY_ERROR_CHARS characters
    queue_position: int | None


class AnalysisSummaryPage(SQLModel):
    items: list[AnalysisSummary]
    total: int
    page: int
    per_page: int


# ---------------------------------------------------------------- Job
class JobBase(SQLModel):
    analysis_id: int = Field(foreign_key="analysis.id", index=True)
    device_kind: str = Field(max_length=16)
    priority: int = 0
    max_attempts: int = 3


class Job(JobBase, table=True):
    """A unit of queue work. Every transition is made by app.job_queue."""

    __table_args__ = (
        Index("ix_job_claim", "status", "priority", "id"),
        Index("ix_job_lease", "status", "lease_expires_at"),
        Index(
            "uq_job_active_dedupe_key",
            "dedupe_key",
            unique=True,
            sqlite_where=text("status IN ('queued', 'running')"),
            postgresql_where=text("status IN ('queued', 'running')"),
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    purpose: str = Field(default=MEASURE, max_length=16, sa_column_kwargs={"server_default": MEASURE})
    backends: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    dedupe_key: str | None = Field(default=None, max_length=64)
    status: str = Field(default=JobStatus.QUEUED, max_length=16)  # a JobStatus
    attempts: int = 0
    available_at: datetime
    lease_token: str | None = Field(default=None, max_length=64)
    worker_id: str | None = Field(default=None, foreign_key="worker.id", max_length=32)
    lease_expires_at: datetime | None = None
    heartbeat_at: datetime | None = None
    cancel_requested: bool = False
    stage: str | None = Field(default=None, max_length=120)
    progress: float | None = None
    last_error: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class JobRequirement(SQLModel, table=True):
    """One backend a job needs; a worker may claim the job only if it offers all of them."""

    __tablename__ = "job_requirement"

    job_id: int = Field(foreign_key="job.id", primary_key=True)
    backend: str = Field(primary_key=True, max_length=64)


# ---------------------------------------------------------------- JobEvent
class JobEvent(SQLModel, table=True):
    """History of a job: claimed, heartbeat-lost, retried, released, completed, ..."""

    __tablename__ = "job_event"

    id: int | None = Field(default=None, primary_key=True)
    job_id: int = Field(foreign_key="job.id", index=True)
    attempt: int
    worker_id: str | None = Field(default=None, max_length=32)
    type: str = Field(max_length=32)
    at: datetime
    detail: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON(none_as_null=True)))


# ---------------------------------------------------------------- Worker
class WorkerBase(SQLModel):
    name: str = Field(max_length=200)
    device_kind: str = Field(max_length=16)
    backends: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    environment: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class Worker(WorkerBase, table=True):
    """A registered worker process on some node; `state` is active | lost (silent) | stopped (deregistered)."""

    id: str = Field(primary_key=True, max_length=32)
    token_id: int | None = Field(default=None, foreign_key="api_token.id")
    state: str = Field(default="active", max_length=16)
    registered_at: datetime
    last_seen_at: datetime


class WorkerCreate(SQLModel):
    """What a worker sends to register (POST /api/v1/workers/register)."""

    name: str = Field(min_length=1, max_length=200)
    device_kind: Literal["cpu", "cuda", "npu"]
    backends: list[str] = []
    environment: dict[str, Any] = {}


class WorkerPublic(SQLModel):
    id: str
    name: str
    device_kind: str
    backends: list[str]
    environment: dict[str, Any]
    state: str
    registered_at: datetime
    last_seen_at: datetime
    current_job_id: int | None = None


# ---------------------------------------------------------------- ApiToken
class ApiTokenBase(SQLModel):
    name: str = Field(max_length=200)
    role: str = Field(max_length=16)  # admin | user | worker


class ApiToken(ApiTokenBase, table=True):
    """A bearer token; only its sha256 is stored."""

    __tablename__ = "api_token"

    id: int | None = Field(default=None, primary_key=True)
    token_hash: str = Field(max_length=64, unique=True)
    created_at: datetime
    last_used_at: datetime | None = None
    revoked: bool = False
