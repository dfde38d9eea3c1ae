"""The worker agent loop: register, claim (with jitter), run one job at a time, upload, repeat.

Each job's stage runner forks its sandbox children from a zygote in a sandbox of the job's own, which the agent
prepared before the job arrived and stops when it ends (workers.job_sandbox; unless `prepare_sandboxes` is off, when
the runner starts one itself).

Signals: the first SIGTERM/SIGINT stops claiming; a running job gets `grace_s` to finish (then its
result is uploaded as usual), otherwise its runner is stopped and the job is released by
deregistering (no attempt spent). A second signal stops everything at once.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.core.job_wire import JobSpec
from advisor.core.progress import ProgressEvent
from advisor.harness.measurement import builds_inductor_cpp, exports_onnx
from workers.api import LeasedJob, LeaseLost, Registration, WorkerApi
from workers.heartbeat import Heartbeat
from workers.job_sandbox import JobSandboxes
from workers.ranking import RankingRelay
from workers.retry import ApiError, RetryPolicy
from workers.stage_process import OnProgress, StageProcess
from workers.stages import DEFAULT_STAGES, RANKED

log = logging.getLogger("npu_advisor.worker")


@dataclass
class AgentConfig:
    name: str
    device: str
    backends: list[str]
    work_dir: Path
    environment: dict[str, Any] = field(default_factory=dict)
    grace_s: float = 30.0  # after the first signal: how long a running job may still take
    child_stop_grace_s: float = 5.0  # SIGTERM -> SIGKILL for a runner being stopped
    claim_jitter_s: float = 2.0  # random pause after an empty poll, so workers do not poll in lockstep
    stages: str = DEFAULT_STAGES  # "module:function" the runner calls; tests inject fakes here
    max_jobs: int | None = None  # stop after this many jobs (tests, one-shot runs)
    # stop when no job came within this many seconds of the first claim (`worker --once`: exit, do not wait forever)
    claim_deadline_s: float | None = None
    stage_options: dict[str, Any] = field(default_factory=dict)  # timeout_s, memory_limit_mb for the runner
    # prepare each job's sandbox ahead of time (workers.job_sandbox): no `import torch` on a job's critical path;
    # off, each job's runner starts its own
    prepare_sandboxes: bool = False
    spare_sandboxes: int = 2  # how many prepared sandboxes wait for the next jobs (each holds torch imported)


class ShutdownRequested(BaseException):
    """Raised by the signal handler to abandon a long-poll claim or a registration attempt."""


class WorkerAgent:
    def __init__(self, api: WorkerApi, config: AgentConfig, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = api
        self.config = config
        self.stopping = threading.Event()
        self.jobs_done = 0
        self.registration: Registration | None = None
        self._sleep = sleep
        self._interruptible = False  # True while waiting on the server with no job held: a signal may abort it
        self._current: StageProcess | None = None
        self._signals_seen = 0
        self._rng = random.Random()
        self._backoff = RetryPolicy(sleep=sleep)
        self.sandboxes: JobSandboxes | None = None
        if config.prepare_sandboxes:
            offered = [name.partition(":")[::2] for name in config.backends]  # (backend, mode)
            self.sandboxes = JobSandboxes(
                config.device,
                config.work_dir,
                inductor=builds_inductor_cpp(offered),
                onnx=exports_onnx(offered),
                spares=config.spare_sandboxes,
            )

    # ---------------------------------------------------------------- the loop
    def run(self) -> int:
        """Exit code: 0 after a normal stop, 1 when the server refused this worker."""
        try:
            self.registration = self._register()
        except ShutdownRequested:
            return 0
        except ApiError as exc:
            log.error("could not register with the server: %s", _explain(exc))
            return 1
        log.info(
            "registered as %s (%s; backends %s)",
            self.registration.worker_id,
            self.config.device,
            ", ".join(self.config.backends),
        )
        code = 0
        try:
            self._prepare_sandbox()  # the first job's, while the worker waits for work
            code = self._claim_loop(self.registration)
        finally:
            self._deregister()
            if self.sandboxes is not None:
                self.sandboxes.close()
        return code

    def _register(self) -> Registration:
        """Register, waiting out an unreachable or failing server (workers may start before the API)."""
        failures = 0
        self._interruptible = True
        try:
            while True:
                if self.stopping.is_set():
                    raise ShutdownRequested
                try:
                    return self.api.register(
                        self.config.name, self.config.device, self.config.backends, self.config.environment
                    )
                except ApiError as exc:
                    if not exc.retryable:
                        raise
                    delay = self._backoff.delay(failures)
                    failures += 1
                    log.warning("server not ready (%s); trying again in %.1f s", exc, delay)
                self._sleep(delay)
        finally:
            self._interruptible = False

    def _claim_loop(self, registration: Registration) -> int:
        failures = 0
        deadline = None if self.config.claim_deadline_s is None else time.monotonic() + self.config.claim_deadline_s
        while not self.stopping.is_set():
            if self.config.max_jobs is not None and self.jobs_done >= self.config.max_jobs:
                return 0
            wait_s = registration.poll_timeout_s
            if deadline is not None:
                wait_s = min(wait_s, deadline - time.monotonic())
                if wait_s <= 0:
                    log.info("no job came within %.0f s; exiting", self.config.claim_deadline_s)
                    return 0
            try:
                claim = self._claim(registration, wait_s)
            except ShutdownRequested:
                return 0
            except ApiError as exc:
                if exc.status in (401, 403):
                    log.error("the server refused this worker: %s", _explain(exc))
                    return 1
                if exc.status == 404:  # the server forgot us (e.g. a fresh database): register again
                    log.warning("server does not know worker %s; registering again", registration.worker_id)
                    try:
                        self.registration = registration = self._register()
                    except ShutdownRequested:
                        return 0
                    except ApiError as again:
                        log.error("could not register again: %s", _explain(again))
                        return 1
                    continue
                self._sleep(self._backoff.delay(failures))
                failures += 1
                log.warning("claim failed, retrying: %s", exc)
                continue
            failures = 0
            if claim is None:
                self._prepare_sandbox()  # idle: the next job's sandbox, if it is not ready yet
                jitter = self._rng.uniform(0, self.config.claim_jitter_s)
                self._sleep(jitter if deadline is None else max(0.0, min(jitter, deadline - time.monotonic())))
                continue
            self.run_job(claim, registration)
            self.jobs_done += 1  # right after a job: claim again without the jitter pause
        return 0

    def _claim(self, registration: Registration, wait_s: float) -> LeasedJob | None:
        self._interruptible = True
        try:
            if self.stopping.is_set():
                raise ShutdownRequested
            return self.api.claim(registration.worker_id, wait_s)
        finally:
            self._interruptible = False

    # ---------------------------------------------------------------- one job
    def run_job(self, claim: LeasedJob, registration: Registration) -> str:
        """Run one claimed job to an outcome: completed, failed, cancelled, lease_lost, released or upload_failed.

        Never raises: a bug or an OS error here fails this job (retryable), not the worker.
        """
        job_dir = self.config.work_dir / f"job-{claim.job_id}-{claim.job.attempt}"
        log.info("claimed job %s (analysis %s)", claim.job_id, claim.job.analysis_id)
        try:
            return self._run_job(claim, registration, job_dir)
        except Exception as exc:  # noqa: BLE001 - the agent outlives any one job
            log.exception("job %s: unexpected error in the worker", claim.job_id)
            return self._report_failure(claim, f"worker error: {type(exc).__name__}: {exc}", retryable=True)
        finally:
            self._current = None
            if self.sandboxes is not None:
                self.sandboxes.end_job()  # the job's processes, files and memory go with its sandbox
            self._prepare_sandbox(after_current=True)
            shutil.rmtree(job_dir, ignore_errors=True)

    def _prepare_sandbox(self, *, after_current: bool = False) -> None:
        """A sandbox for the next job to be claimed; `after_current` while a job is held. None when `max_jobs` says
        no further job comes (a `worker --once` never starts a second interpreter beside its measurement)."""
        if self.sandboxes is None:
            return
        if self.config.max_jobs is not None and self.jobs_done + after_current >= self.config.max_jobs:
            return
        self.sandboxes.prepare()

    def _run_job(self, claim: LeasedJob, registration: Registration, job_dir: Path) -> str:
        job_dir.mkdir(parents=True, exist_ok=True)
        wake = threading.Event()
        heartbeat = Heartbeat(
            self.api,
            claim,
            interval_s=registration.heartbeat_interval_s,
            lease_ttl_s=registration.lease_ttl_s,
            on_event=wake.set,
        ).start()
        try:  # the lease is renewed until the result is uploaded, so slow upload retries do not lose it
            try:
                heartbeat.update(ProgressEvent("download", 0.0))
                spec = self._spec(claim, job_dir)
            except ApiError as exc:
                error = f"could not download the job's files: {exc}"
                return self._report_failure(claim, error, retryable=exc.retryable)
            ranked_path = StageProcess.ranked_path(job_dir)
            ranking = RankingRelay(self.api, claim, ranked_path, lambda inspection: _with_artifact(claim, inspection))
            process = self._start_runner(spec, job_dir, _relay(heartbeat, ranking))
            self._current = process
            outcome = self._supervise(process, heartbeat, wake)
            return self._finish(claim, process, heartbeat, outcome, ranking)
        finally:
            heartbeat.stop()

    def _start_runner(self, spec: JobSpec, job_dir: Path, on_progress: OnProgress) -> StageProcess:
        """The job's stage runner, forking from the job's sandbox when there is one. The next job's sandbox starts
        now, while this one downloads and inspects; the runner's first timed window waits until it is up."""
        if self.sandboxes is None or self.sandboxes.current is None:
            return StageProcess(spec, job_dir, on_progress=on_progress)
        zygote, pass_fds = self.sandboxes.current.handle()
        self._prepare_sandbox(after_current=True)
        gate = self.sandboxes.readiness_fd()
        try:
            runner_spec = spec.model_copy(update={"zygote": zygote, "measure_gate_fd": gate})
            return StageProcess(runner_spec, job_dir, on_progress=on_progress, pass_fds=(*pass_fds, gate))
        finally:
            os.close(gate)  # the runner holds its own copy

    def _supervise(self, process: StageProcess, heartbeat: Heartbeat, wake: threading.Event) -> str:
        """Wait for the runner, a cancel, a lost lease or the end of the shutdown grace period."""
        deadline: float | None = None
        while process.poll() is None:
            if heartbeat.lease_lost.is_set():
                return "lease_lost"
            if heartbeat.cancel_requested.is_set():
                return "cancelled"
            if self.stopping.is_set():
                deadline = deadline or time.monotonic() + self.config.grace_s
                if time.monotonic() >= deadline:
                    return "released"
            wake.wait(0.2)
        return "exited"

    def _finish(
        self, claim: LeasedJob, process: StageProcess, heartbeat: Heartbeat, outcome: str, ranking: RankingRelay
    ) -> str:
        if outcome != "exited":
            process.stop(self.config.child_stop_grace_s)
        if outcome == "lease_lost":
            log.warning("job %s: %s; stopped its runner, result discarded", claim.job_id, heartbeat.lost_reason)
            return outcome
        if outcome == "cancelled":
            log.info("job %s: cancelled by the server; runner stopped", claim.job_id)
            try:
                self.api.acknowledge_cancel(claim)
            except ApiError as exc:
                log.warning("job %s: could not acknowledge the cancel: %s", claim.job_id, exc)
            return outcome
        if outcome == "released":
            log.info("job %s: shutdown grace period over; runner stopped, job released", claim.job_id)
            return outcome
        result = process.result()
        if process.violation is not None:  # it was killed for it; another attempt would only do the same
            return self._report_failure(claim, f"{process.violation}; it was stopped", retryable=False)
        if result is None:
            tail = process.stderr_tail()[-2000:]
            error = f"the stage runner exited with code {process.process.returncode}" + (f":\n{tail}" if tail else "")
            return self._report_failure(claim, error, retryable=True)
        if result.get("error"):
            return self._report_failure(claim, str(result["error"]), retryable=bool(result.get("retryable")))
        heartbeat.update(ProgressEvent("upload", 1.0))
        ranking.finish()  # a ranking still being posted goes first: the completion replaces it
        return self._upload(claim, result)

    def _upload(self, claim: LeasedJob, result: dict[str, Any]) -> str:
        inspection = _with_artifact(claim, result.get("inspection"))
        try:
            reply = self.api.complete(claim, inspection, result.get("measurements"))
        except LeaseLost:
            log.warning("job %s: lease lost before the upload; result discarded", claim.job_id)
            return "lease_lost"
        except ApiError as exc:
            log.error("job %s: upload failed: %s", claim.job_id, exc)
            if exc.status is not None and not exc.retryable:  # the server rejected the result itself
                self._report_failure(claim, f"the server rejected the results: {exc}", retryable=False)
            return "upload_failed"
        log.info("job %s: uploaded; analysis %s is %s", claim.job_id, reply.get("analysis_id"), reply.get("status"))
        return "completed"

    def _report_failure(self, claim: LeasedJob, error: str, *, retryable: bool) -> str:
        log.warning("job %s failed (%s): %s", claim.job_id, "will retry" if retryable else "final", error)
        try:
            self.api.fail(claim, error, retryable=retryable)
        except ApiError as exc:
            log.warning("job %s: could not report the failure: %s", claim.job_id, exc)
        return "failed"

    def _spec(self, claim: LeasedJob, job_dir: Path) -> JobSpec:
        job = claim.job
        # with a prepared sandbox, the downloads go to its inbox: the only host files its children can read
        sandbox = self.sandboxes.take() if self.sandboxes is not None else None
        downloads = sandbox.inbox if sandbox is not None else job_dir
        artifact = self.api.download(job.artifact_url, downloads / "model", sha256=job.artifact_sha256)
        inputs = self.api.download(job.inputs_url, downloads / "inputs") if job.inputs_url else None
        calibration = None
        if job.calibration_url:  # checked against its sha256: the file the server checked on upload
            calibration = self.api.download(
                job.calibration_url, downloads / "calibration.npz", sha256=job.calibration_sha256
            )
        return JobSpec.for_job(
            job,
            offered=self.config.backends,
            stages=self.config.stages,
            artifact_path=str(artifact),
            inputs_path=str(inputs) if inputs else None,
            calibration_path=str(calibration) if calibration else None,
            device=self.config.device,
            **self.config.stage_options,
        )

    # ---------------------------------------------------------------- shutdown
    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._signals_seen += 1
        if self._signals_seen > 1:
            log.warning("second signal: exiting now")
            if self._current is not None:
                self._current.kill_now()
            os._exit(128 + signum)
        log.info("signal %d: no more claims; finishing the current job (at most %.0f s)", signum, self.config.grace_s)
        self.stopping.set()
        if self._interruptible:
            raise ShutdownRequested

    def _deregister(self) -> None:
        if self.registration is None:
            return
        try:
            self.api.deregister(self.registration.worker_id)
            log.info("deregistered %s", self.registration.worker_id)
        except ApiError as exc:
            log.warning("could not deregister: %s", exc)


def _relay(heartbeat: Heartbeat, ranking: RankingRelay) -> OnProgress:
    """The runner's progress lines: its `ranked` signal to the ranking relay, everything else to the heartbeat."""

    def relay(event: ProgressEvent) -> None:
        if event.step == RANKED:
            ranking.ranked()
        else:
            heartbeat.update(event)

    return relay


def _with_artifact(claim: LeasedJob, inspection: dict | None) -> dict | None:
    """The inspection with the sha256 `_spec`'s download verified (the server checks it), when the job names one."""
    if not claim.job.artifact_sha256:
        return inspection
    return {**(inspection or {}), "artifact_sha256": claim.job.artifact_sha256}


def _explain(exc: ApiError) -> str:
    if exc.status == 401:
        return f"{exc} - the worker token is missing or wrong (pass --token or set ADVISOR_TOKEN)"
    if exc.status == 403:
        return f"{exc} - this token does not have the worker role"
    if exc.status is None:
        return f"{exc} - is the server running and reachable?"
    return str(exc)
