"""What a dispatcher needs of a scheduler: submit a one-shot worker for a queued job, list the batch jobs it
submitted, cancel some. Slurm implements it (workers.dispatch.slurm); a Kubernetes Job executor would too.

A batch job carries the queue job it was submitted for in its name (`batch_job_name`), so the dispatcher can
rebuild its mapping from the scheduler alone after a restart, and never submits twice for one queued job.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

NAME_PREFIX = "npu-advisor"
TAG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")


@dataclass(frozen=True)
class BatchJob:
    """One batch job a dispatcher submitted: the scheduler's id, the queue job it was for, and whether it still
    waits for resources (`pending`) or was started (`running`: running, completing, suspended...)."""

    id: str
    queue_job_id: int
    state: Literal["pending", "running"]


@dataclass(frozen=True)
class WorkerLaunch:
    """The `npu-advisor worker --once` a batch job runs. The token reaches it as `token_file`, a path the batch job
    can read (a shared filesystem on a cluster), never as a value on a command line or in the job's environment."""

    command: str  # the npu-advisor executable on the compute nodes
    server: str
    token_file: Path
    device: str
    backends: list[str]
    wait_s: float = 60.0
    extra_args: list[str] = field(default_factory=list)  # more worker options, e.g. --memory-limit-mb 8000

    def argv(self) -> list[str]:
        return [
            self.command,
            "worker",
            "--once",
            "--wait",
            f"{self.wait_s:g}",
            "--server",
            self.server,
            "--token-file",
            str(self.token_file),
            "--device",
            self.device,
            "--backends",
            ",".join(self.backends),
            *self.extra_args,
        ]

    def script(self, queue_job_id: int) -> str:
        """The batch script: a shell line that replaces itself with the worker (signals reach the worker)."""
        line = " ".join(shlex.quote(part) for part in self.argv())
        about = f"# npu-advisor worker --once for queue job {queue_job_id} (npu-advisor dispatch)"
        return f"#!/bin/sh\n{about}\nexec {line}\n"


class Executor(Protocol):
    """A scheduler the dispatcher submits one-shot workers to."""

    def submit(self, queue_job_id: int) -> str:
        """Submit a batch job running one worker for `queue_job_id`; its id. Raises ExecutorError."""
        ...

    def list(self) -> list[BatchJob]:
        """This dispatcher's batch jobs that are still pending or running. Raises ExecutorError."""
        ...

    def cancel(self, batch_job_ids: list[str]) -> None:
        """Cancel these batch jobs (those already gone are no error). Raises ExecutorError."""
        ...


class ExecutorError(Exception):
    """The scheduler refused or did not answer (the message says which command and why)."""


def batch_job_name(tag: str, queue_job_id: int) -> str:
    return f"{NAME_PREFIX}-{tag}-q{queue_job_id}"


def queue_job_of(name: str, tag: str) -> int | None:
    """The queue job a batch job of this dispatcher (`tag`) was submitted for, from its name; None for others."""
    prefix = f"{NAME_PREFIX}-{tag}-q"
    digits = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(digits) if digits.isdigit() and len(digits) <= 18 else None
