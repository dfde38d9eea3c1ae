"""The job wire: what the server sends a worker for one claimed job, and what the worker asks its stage runner.

`ClaimedJob` is the `job` of `POST /api/v1/workers/{id}/claim`: the server builds it from the queue's row
(app.routes.workers) and the worker reads the claim into it (workers.api); fields a newer server adds are ignored.
`JobSpec` is the stage runner's input (spec.json, read by workers.stages): the worker resolves a claimed job into it
once its files are downloaded. The deployment context is parsed there, once, so the workload, optimizer, decode
tokens and accuracy tolerance the runner measures with are the context's own defaults (advisor.core.context),
applied in one place. Torch-free.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from advisor.core.context import DeploymentContext, Optimizer, Workload, parse_context

JobPurpose = Literal["measure", "inspect"]


class ClaimedJob(BaseModel):
    """One leased job as the worker needs it: which files to fetch, for which context and backends."""

    id: int
    analysis_id: int
    attempt: int
    artifact_sha256: str
    # where to fetch the files: the server's own routes (local store), or presigned URLs of the object store, each
    # for one object and valid for ADVISOR_ARTIFACT_URL_TTL_S; the worker checks what it fetched against the sha256
    artifact_url: str
    inputs_url: str | None
    inputs_sha256: str | None = None
    # the int8 options' calibration .npz (advisor.core.calibration), checked on upload; the worker checks the sha256
    calibration_url: str | None = None
    calibration_sha256: str | None = None
    # the analysis' deployment context as the server stored it (validated on submission); JobSpec parses it
    context: dict[str, Any]
    backends: list[str]
    # "measure": inspect and measure; "inspect": the inspection alone (its analysis' target has no worker yet)
    purpose: JobPurpose = "measure"


class JobSpec(BaseModel):
    """What the stage runner runs for one job: the downloaded files, this worker's device and backends, the
    context. `context` None: the job named none (an older server), so every variant is measured, none pruned."""

    model_config = ConfigDict(extra="forbid")

    stages: str  # "module:function" the runner calls with this spec (workers.stages.run_stages; tests inject fakes)
    artifact_path: str
    inputs_path: str | None = None
    calibration_path: str | None = None
    device: str
    backends: list[str]
    context: DeploymentContext | None = None
    measure: bool = True  # False: an inspect job, the inspection alone
    timeout_s: float | None = None  # each step's child; None: the step's default
    memory_limit_mb: int | None = None
    # the job sandbox's zygote to fork from (advisor.harness.sandbox.Zygote.handle(), an opaque handle) and the
    # descriptor that opens the timed windows once the next job's sandbox is up (workers.job_sandbox)
    zygote: dict[str, Any] | None = None
    measure_gate_fd: int | None = None
    ranked_path: str | None = None  # where the runner writes the results once ranked (workers.stage_process)

    @classmethod
    def for_job(cls, job: ClaimedJob, *, offered: list[str], **fields: Any) -> JobSpec:
        """The spec of a claimed job on a worker that offers the backends `offered`: the job's backends this worker
        has (an int8 mode is asked for by name, `onnxruntime:int8`: its backend decides), else eager; its context
        parsed (a ContextError names the field)."""
        wanted = job.backends or offered
        backends = [name for name in wanted if name.split(":", 1)[0] in offered] or ["eager"]
        context = parse_context(job.context) if job.context else None
        return cls(backends=backends, context=context, measure=job.purpose != "inspect", **fields)

    @property
    def deployment(self) -> DeploymentContext:
        """The context measured for: the job's, else the defaults of every field."""
        return self.context or DeploymentContext()

    @property
    def workload(self) -> Workload:
        return self.deployment.workload

    @property
    def optimizer(self) -> Optimizer:
        return self.deployment.optimizer

    @property
    def decode_tokens(self) -> int:
        return self.deployment.decode_tokens

    @property
    def accuracy_tolerance(self) -> dict[str, Any] | None:
        """The context's override of the accuracy check's tolerances, as the harness takes it; None: dtype defaults."""
        tolerance = self.deployment.accuracy_tolerance
        return None if tolerance is None else tolerance.model_dump(mode="json")
