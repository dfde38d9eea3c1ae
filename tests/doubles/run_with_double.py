"""For tests: run Python code in a process of its own with the torch_npu/torchair TEST DOUBLES importable.

A separate process keeps the doubles (which change process-wide torch state) out of the test process
(tests/support/forked_script.py: a fork of the test worker's zygote, which never imports a double itself).
The code reports back by assigning a JSON-able value to `result`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.forked_script import run_script

DOUBLES_DIR = Path(__file__).resolve().parent
REPO_ROOT = DOUBLES_DIR.parent.parent
_MARKER = "@@RESULT@@"


def run_with_double(code: str, *, env: dict[str, str] | None = None, doubles: bool = True, timeout: float = 180):
    """Execute `code` (which sets `result`) and return `result`; raise AssertionError with stderr if it fails.
    `env`: variables set before the code runs (the doubles read theirs when imported, after the fork);
    `doubles=False`: a fresh interpreter, whose import path is only the checkout's."""
    script = textwrap.dedent(code)
    if doubles:
        return run_script(script, cwd=REPO_ROOT, import_paths=[DOUBLES_DIR], env=env, timeout_s=timeout)
    full_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-c", script + f"\nimport json as _j\nprint({_MARKER!r} + _j.dumps(result))\n"],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(REPO_ROOT),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(_MARKER)]
    if proc.returncode != 0 or not lines:
        raise AssertionError(f"child failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len(_MARKER) :])
