"""The CLI's source front forks its factory children from the test worker's unconfined zygote.

`npu-advisor inspect|analyze path/file.py:factory` runs the user's factory in a child process of its own, unconfined
(advisor.cli.source_front.probe -> advisor.harness.sandbox.run_in_sandbox): a fresh interpreter that imports torch,
Dynamo and torch.export (~2 s of CPU) before the factory runs, a few dozen times a test run. Tests are trusted code:
here those children fork from a zygote that made those imports once (tests/conftest.py: shared_sandbox; the zygote
is tests/support/forked_script.py's, which the tests' own scripts fork from too). A zygote
forks only a child whose environment is its own - the working directory included, which is on the child's
PYTHONPATH - so a test that changes either gets a spawned child, as `npu-advisor` always does; tests marked
`own_sandbox` and runs with ADVISOR_TEST_OWN_SANDBOXES=1 spawn every one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from advisor.cli.source_front import PROBE_TARGET
from advisor.harness.isolation import NO_ISOLATION
from advisor.harness.sandbox import SandboxResult
from tests.support.forked_script import worker_environment, worker_zygote


def forking_source_probes(run_in_sandbox: Callable[..., SandboxResult], home: str) -> Callable[..., SandboxResult]:
    """`run_in_sandbox` with the source front's children handed this worker's zygote while the working directory is
    `home` (where the zygote was started); every other call goes through unchanged."""

    def run(target: str, kwargs: dict, *, extra_env: Mapping[str, str] | None = None, **options: Any) -> SandboxResult:
        if target == PROBE_TARGET and options.get("zygote") is None and options.get("isolation") is NO_ISOLATION:
            if os.getcwd() == home:
                extra_env = worker_environment(extra_env or {})
                options["zygote"] = worker_zygote(extra_env)
        return run_in_sandbox(target, kwargs, extra_env=extra_env, **options)

    return run
