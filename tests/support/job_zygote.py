"""A child forked from an unconfined zygote prepared as a measuring job's (advisor.harness.measurement.child.preload):
what the tests of a zygote's once-per-process setup run their probes in."""

from __future__ import annotations

from advisor.harness.isolation import NO_ISOLATION
from advisor.harness.measurement.plan import PRELOAD
from advisor.harness.sandbox import SandboxResult, Zygote, run_in_sandbox


def run_in_job_zygote(preload_kwargs: dict, target: str, kwargs: dict) -> SandboxResult:
    """`target(**kwargs)` in a child of a fresh unconfined zygote whose preload got `preload_kwargs`; the zygote
    itself must have started and forked without a problem."""
    with Zygote(PRELOAD, preload_kwargs, isolation=NO_ISOLATION) as zygote:
        seen = run_in_sandbox(target, kwargs, timeout_s=300, memory_limit_mb=None, zygote=zygote)
        assert zygote.problem is None, zygote.problem
    return seen
