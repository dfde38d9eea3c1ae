"""The environment of the real services tests start (`serve`, `worker`) and of in-process CLI runs that measure
without passing `timing`. Torch-free, importable from any test."""

from __future__ import annotations

import json
import os

from advisor.harness.inductor_headers import CACHE_ENV
from advisor.harness.measurement.run import TIMING_ENV

# Windows of 0.05-0.3 s instead of 0.5-5 s: these tests assert what was measured and how it is reported, not how
# precisely; warm-cache children and dynamic sizes are kept, so every stage of a real analysis still runs.
FAST_TIMING_ENV = {TIMING_ENV: json.dumps({"min_iters": 10, "min_time_s": 0.05, "max_time_s": 0.3, "warmup_iters": 2})}

# No prepared sandbox waiting ahead: a test's worker claims one or a few jobs, and the spare it would keep ready
# for the next one (an interpreter importing torch, ~3.5 s of CPU) was, at the end of every test, started and never
# used; each job's sandbox starts when the job is claimed. tests/workers/test_job_sandbox.py checks spares serving
# jobs back to back, tests/workers/test_agent.py a worker preparing them.
NO_SPARE_ENV = {"ADVISOR_SPARE_SANDBOXES": "0"}


def service_environment() -> dict[str, str]:
    """This process's environment without its ADVISOR_* settings (a service reads them), plus the short timing
    policy, no spare sandbox (each job's starts when it is claimed) and the run's trusted-header cache
    (tests/conftest.py): a service never builds a header of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")} | FAST_TIMING_ENV | NO_SPARE_ENV
    if CACHE_ENV in os.environ:
        env[CACHE_ENV] = os.environ[CACHE_ENV]
    return env
