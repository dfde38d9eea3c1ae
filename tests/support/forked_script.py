"""Run a test's Python script in a process of its own, forked from this test worker's unconfined zygote.

Tests run some code in a separate process so that what it changes process-wide (a custom op it registers, the
torch_npu/torchair test doubles it imports) stays out of the test process. Each such script used to start a fresh
interpreter that imported torch, Dynamo and torch.export (~2.9 s of CPU) before its own first line; here it runs
in a fork of one unconfined zygote per test worker that made those imports once and nothing of any test, so
whatever the script changes ends with its fork. The same zygote serves the CLI source front's factory children
(tests/support/source_zygote.py). Its environment is the test worker's, as the source front hands it to its
children (secrets and the sandbox's own variables left out): a call made while a test has changed it, or from
another working directory, gets a fresh interpreter (advisor.harness.sandbox spawns what a zygote cannot fork), as
do all calls with ADVISOR_TEST_OWN_SANDBOXES=1.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_PER_TEST = "PYTEST_CURRENT_TEST"  # set by pytest for each test: the one variable that differs between tests
_ZYGOTES: list[Any] = []  # this test worker's, started by the first script


def run_script(
    script: str,
    *,
    cwd: Path | str,
    argv: Sequence[str] = (),
    import_paths: Sequence[Path | str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = 180.0,
) -> Any:
    """Run `script` as `python -c script *argv` would from `cwd` (first on the import path, after
    `import_paths`) and return the value it assigns to `result` (None if none); AssertionError if it fails.
    `env`: variables set in the child before the script runs (after torch was imported: not for torch's own)."""
    from advisor.cli.source_front import factory_environment
    from advisor.harness.isolation import NO_ISOLATION
    from advisor.harness.sandbox import run_in_sandbox

    environment = worker_environment(factory_environment())  # as the source front's children get it: one zygote
    zygote = None if os.environ.get("ADVISOR_TEST_OWN_SANDBOXES") else worker_zygote(environment)
    paths = [str(p) for p in import_paths]
    done = run_in_sandbox(
        f"{__name__}:run_here",
        {"script": script, "cwd": str(cwd), "argv": list(argv), "import_paths": paths, "env": dict(env or {})},
        timeout_s=timeout_s,
        memory_limit_mb=None,
        cache_dir=os.environ.get("TORCHINDUCTOR_CACHE_DIR"),  # the test run's, which a spawned interpreter inherits
        extra_env=environment,
        zygote=zygote,
        isolation=NO_ISOLATION,
    )
    if done.status != "ok":
        raise AssertionError(f"script failed ({done.status}): {done.reason}\n{(done.stderr_tail or '')[-4000:]}")
    return done.value


def worker_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` less the variable pytest sets for each test: what the worker zygote and the children it serves get."""
    return {name: value for name, value in env.items() if name != _PER_TEST}


def worker_zygote(env: Mapping[str, str]) -> Any:
    """This test worker's unconfined zygote, started with `env` (a `worker_environment`) on first use: a child whose
    environment differs is spawned instead."""
    from advisor.harness.isolation import NO_ISOLATION
    from advisor.harness.sandbox import Zygote

    if not _ZYGOTES:
        _ZYGOTES.append(Zygote(f"{__name__}:preload", isolation=NO_ISOLATION, extra_env=env))
    return _ZYGOTES[0]


def preload() -> None:
    """The zygote's preload: torch, what exporting or compiling with it imports, and the source front's probe (what
    every factory child imports before the factory's own code runs); nothing of any test."""
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.export  # noqa: F401

    import advisor.harness.source_probe  # noqa: F401


def run_here(script: str, cwd: str, argv: list[str], import_paths: list[str], env: dict[str, str]) -> Any:
    """In the child: the script as the main module, with its directory, arguments, import path and variables set
    up."""
    os.environ.update(env)
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
