"""The batch job a worker ran in, as its registration reported it (`worker --once` started by a scheduler sets
environment["batch_job"] = {"scheduler": "slurm", "id": "123"}: advisor.cli.worker_cmd.batch_job_environment).

A worker's environment is what the worker says; this reads only a well-formed entry and shows it as a label
("Slurm job 123") on the queue page and beside the worker an analysis was measured by."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

SCHEDULERS = {"slurm": "Slurm", "kubernetes": "Kubernetes"}
JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def batch_job_label(environment: Mapping[str, Any] | None) -> str | None:
    """The label "Slurm job 123" for a worker that ran in one; None otherwise, or when the entry is not well formed."""
    entry = (environment or {}).get("batch_job")
    if not isinstance(entry, Mapping):
        return None
    scheduler, job_id = entry.get("scheduler"), entry.get("id")
    if scheduler not in SCHEDULERS or not isinstance(job_id, str) or not JOB_ID.match(job_id):
        return None
    return f"{SCHEDULERS[scheduler]} job {job_id}"
