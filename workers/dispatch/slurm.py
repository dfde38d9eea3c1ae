"""The Slurm executor: `sbatch` a one-shot worker, `squeue` this dispatcher's batch jobs, `scancel` them.

The batch script goes to sbatch on its standard input: it holds the worker's command line, which names the token
file, not the token. sbatch runs with the dispatcher's environment minus every $ADVISOR_*TOKEN* variable, so the
batch job, which inherits that environment (`--export=ALL`), never holds the token's value either.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from workers.dispatch.executor import BatchJob, ExecutorError, WorkerLaunch, batch_job_name, queue_job_of

PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
COMMAND_TIMEOUT_S = 60.0
Runner = Callable[..., subprocess.CompletedProcess]


class SlurmExecutor:
    def __init__(
        self,
        launch: WorkerLaunch,
        *,
        tag: str,
        sbatch_args: Sequence[str] = (),
        log_dir: Path | None = None,
        run: Runner = subprocess.run,
    ) -> None:
        self.launch = launch
        self.tag = tag
        self.sbatch_args = list(sbatch_args)
        self.log_dir = log_dir
        self._run = run

    def submit(self, queue_job_id: int) -> str:
        args = ["sbatch", "--parsable", f"--job-name={batch_job_name(self.tag, queue_job_id)}", "--export=ALL"]
        if self.log_dir is not None:
            args.append(f"--output={self.log_dir / 'npu-advisor-worker-%j.out'}")
        args += self.sbatch_args  # after ours: the operator's --output, --export... win
        out = self._call(args, input_text=self.launch.script(queue_job_id))
        job_id = out.strip().split(";", 1)[0]  # --parsable: "id" or "id;cluster"
        if not job_id.isdigit():
            raise ExecutorError(f"sbatch answered {out.strip()[:200]!r}, not a job id")
        return job_id

    def list(self) -> list[BatchJob]:
        out = self._call(["squeue", "--me", "--noheader", "--format=%i|%j|%T"])
        jobs = []
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 3:
                continue
            job_id, name, state = parts
            queue_job_id = queue_job_of(name, self.tag)
            if queue_job_id is None:
                continue  # not this dispatcher's
            jobs.append(BatchJob(job_id, queue_job_id, "pending" if state in PENDING_STATES else "running"))
        return jobs

    def cancel(self, batch_job_ids: list[str]) -> None:
        if batch_job_ids:
            self._call(["scancel", *batch_job_ids])

    def _call(self, args: list[str], *, input_text: str | None = None) -> str:
        env = {key: value for key, value in os.environ.items() if not _holds_token(key)}
        try:
            done = self._run(
                args, input=input_text, capture_output=True, text=True, env=env, timeout=COMMAND_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ExecutorError(f"{args[0]}: {exc}") from exc
        if done.returncode != 0:
            raise ExecutorError(f"{args[0]} exited with {done.returncode}: {(done.stderr or '').strip()[-500:]}")
        return done.stdout or ""


def _holds_token(variable: str) -> bool:
    """$ADVISOR_TOKEN, $ADVISOR_WORKER_TOKEN and the like: never passed on to a batch job."""
    return variable.startswith("ADVISOR_") and "TOKEN" in variable
