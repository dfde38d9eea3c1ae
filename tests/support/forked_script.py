"""Run a test's Python script in a process of its own, forked from this test worker's zygote.

Tests run some code in a separate process so that what it changes process-wide (a custom op it registers, the
torch_npu/torchair test doubles it imports) stays out of the test process. Each such script used to start a fresh
interpreter that imported torch, Dynamo and torch.export (~2.9 s of CPU) before its own first line; here it runs
in a fork of one unconfined zygote per test worker that made those imports once and nothing else, so whatever the
script changes ends with its fork. The zygote's environment is the test worker's: a call made while a test has
changed it gets a fresh interpreter (advisor.harness.sandbox spawns what a zygote cannot fork), as do all calls
with ADVISOR_TEST_OWN_SANDBOXES=1.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_PER_TEST = "PYTEST_CURRENT_TEST"  # set by pytest for each test: the one variable that differs between tests
_ZYGOTES: list[Any] = []  # this test worker's, started by the first script


def run_script(
    script: str, *, cwd: Path | str, argv: Sequence[str] = (), import_paths: Sequence[Path | str] = (), timeout_s=180.0
) -> Any:
    """Run `script` as `python -c script *argv` would from `cwd` (first on the import path, after
    `import_paths`) and return the value it assigns to `result` (None if none); AssertionError if it fails."""
    from advisor.harness.isolation import NO_ISOLATION
    from advisor.harness.sandbox import Zygote, run_in_sandbox

    env = {name: value for name, value in os.environ.items() if name != _PER_TEST}
    zygote = None
    if not os.environ.get("ADVISOR_TEST_OWN_SANDBOXES"):
        if not _ZYGOTES:
            _ZYGOTES.append(Zygote(f"{__name__}:preload", isolation=NO_ISOLATION, extra_env=env))
        zygote = _ZYGOTES[0]
    paths = [str(p) for p in import_paths]
    done = run_in_sandbox(
        f"{__name__}:run_here",
        {"script": script, "cwd": str(cwd), "argv": list(argv), "import_paths": paths},
        timeout_s=timeout_s,
        memory_limit_mb=None,
        cache_dir=env.get("TORCHINDUCTOR_CACHE_DIR"),  # the test run's, which a spawned interpreter inherits
        extra_env=env,
        zygote=zygote,
        isolation=NO_ISOLATION,
    )
    if done.status != "ok":
        raise AssertionError(f"script failed ({done.status}): {done.reason}\n{(done.stderr_tail or '')[-4000:]}")
    return done.value


def preload() -> None:
    """The zygote's preload: torch and what exporting or compiling with it imports; nothing of any test."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.export  # noqa: F401


def run_here(script: str, cwd: str, argv: list[str], import_paths: list[str]) -> Any:
    """In the child: the script as the main module, with its directory, arguments and import path set up."""
    os.chdir(cwd)
    sys.argv = ["-c", *argv]
    sys.path[:0] = [*import_paths, cwd]
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(script, "<string>", "exec"), namespace)  # noqa: S102 - the tests' own code
    return json.loads(json.dumps(namespace.get("result")))


def close() -> None:
    """At the end of the test worker's session."""
    while _ZYGOTES:
        _ZYGOTES.pop().close()
