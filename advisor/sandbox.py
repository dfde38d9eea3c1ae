"""Run one stage in a fresh, limited child process and always get a status back.

Parent side: `run_in_sandbox` starts `python -m advisor.sandbox SPEC` in its own session (so the
whole process group - Inductor's compile workers, g++ - can be killed at once), with a scrubbed
environment, its own compile-cache directory, an address-space limit and a wall-clock timeout.
A signal, a hang, an out-of-memory or an exception in the child become a `SandboxResult` status
with the output tail; the parent never hangs and never loses the run.

Child side (`_child_main`): applies the limits before anything heavy is imported, calls the
target ("package.module:function") with the JSON kwargs and writes its JSON return value.
Targets choose their failure status by raising `StageError`; `report_progress` streams progress
events back to the parent. This module never imports torch.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SandboxStatus = Literal["ok", "timeout", "crashed", "oom", "runtime_error", "compile_error", "cancelled"]
Cancel = threading.Event | Callable[[], bool] | None

# Environment variables a child may see. Anything else (and anything secret-looking) is dropped.
_KEEP_NAMES = {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "LD_LIBRARY_PATH", "CXX", "CC", "USER"}
_KEEP_PREFIXES = ("ASCEND_", "TORCH", "OMP_", "MKL_", "LC_", "CUDA_", "TRITON_", "KMP_", "OPENBLAS_")
_SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")
_PROGRESS_ENV = "ADVISOR_SANDBOX_PROGRESS"
_TAIL_CHARS = 4000
_POLL_S = 0.05
_OOM_PATTERNS = re.compile(
    r"MemoryError|std::bad_alloc|Cannot allocate memory|can't allocate memory|out of memory|OutOfMemoryError",
    re.IGNORECASE,
)
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)


@dataclass
class SandboxResult:
    status: SandboxStatus
    value: Any = None
    reason: str | None = None
    stderr_tail: str | None = None
    wall_s: float = 0.0


class StageError(Exception):
    """Raised by a sandbox target to report a failure with a chosen status and a readable reason."""

    def __init__(self, status: SandboxStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def scrubbed_environment(source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed part of `source` (default os.environ), minus anything that looks like a secret."""
    env = {}
    for name, value in (os.environ if source is None else source).items():
        upper = name.upper()
        if any(marker in upper for marker in _SECRET_MARKERS):
            continue
        if name in _KEEP_NAMES or upper.startswith(_KEEP_PREFIXES):
            env[name] = value
    return env


def run_in_sandbox(
    target: str,
    kwargs: dict,
    *,
    timeout_s: float,
    memory_limit_mb: int | None,
    cache_dir: str | None = None,
    stage: str = "",
    cancel: Cancel = None,
    on_progress: Callable[[dict], None] | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> SandboxResult:
    """Run `target(**kwargs)` in a fresh child process; see the module docstring.

    `cache_dir` becomes the child's TORCHINDUCTOR_CACHE_DIR (and ADVISOR_COMPILE_CACHE_DIR for other
    compilers); None gives it a fresh empty one. `cancel` (an Event or a callable returning True)
    kills the child and yields status "cancelled". `on_progress` receives the child's
    `report_progress` events, in the parent's thread.
    """
    workdir = Path(tempfile.mkdtemp(prefix="advisor-sandbox-"))
    label = f"stage {stage!r}" if stage else f"{target}"
    try:
        spec = {"target": target, "kwargs": kwargs, "memory_limit_mb": memory_limit_mb,
                "result_path": str(workdir / "result.json"), "import_paths": _parent_import_paths()}  # fmt: skip
        spec_path = workdir / "spec.json"
        spec_path.write_text(json.dumps(spec))
        env = _child_environment(cache_dir or str(workdir / "cache"), workdir / "progress.jsonl", extra_env)
        output_path = workdir / "output.log"
        started = time.perf_counter()
        with open(output_path, "wb") as output:
            proc = subprocess.Popen(
                [sys.executable, "-m", "advisor.sandbox", str(spec_path)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            ended_by = _wait(proc, timeout_s, cancel, workdir / "progress.jsonl", on_progress)
        wall_s = time.perf_counter() - started
        tail = _tail(output_path)
        return _classify(proc.returncode, ended_by, workdir / "result.json", tail, wall_s, timeout_s, label)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def report_progress(event: dict) -> None:
    """Child side: send one progress event to the parent (a no-op outside the sandbox)."""
    path = os.environ.get(_PROGRESS_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(event) + "\n")


# ------------------------------------------------------------------ parent internals
def _child_environment(cache_dir: str, progress_path: Path, extra_env: Mapping[str, str] | None) -> dict[str, str]:
    env = scrubbed_environment()
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    env["TRITON_CACHE_DIR"] = os.path.join(cache_dir, "triton")
    env["ADVISOR_COMPILE_CACHE_DIR"] = cache_dir
    env[_PROGRESS_ENV] = str(progress_path)
    inherited = filter(None, env.get("PYTHONPATH", "").split(os.pathsep))
    paths = [_PROJECT_ROOT, os.getcwd(), *inherited]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra_env or {})
    return env


def _parent_import_paths() -> list[str]:
    """The parent's own import path entries (not the interpreter's): the child can import what the parent can.

    The child appends them *after* its standard library, so a script directory holding e.g. a `queue.py`
    cannot shadow a standard module there."""
    interpreter = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return [p for p in sys.path if p and os.path.isdir(p) and not p.startswith(interpreter)]


def _cancelled(cancel: Cancel) -> bool:
    if cancel is None:
        return False
    if isinstance(cancel, threading.Event):
        return cancel.is_set()
    return bool(cancel())


def _wait(
    proc: subprocess.Popen,
    timeout_s: float,
    cancel: Cancel,
    progress_path: Path,
    on_progress: Callable[[dict], None] | None,
) -> Literal["exit", "timeout", "cancelled"]:
    deadline = time.monotonic() + timeout_s
    progress_offset = 0
    ended_by: Literal["exit", "timeout", "cancelled"] = "exit"
    while proc.poll() is None:
        if time.monotonic() > deadline:
            ended_by = "timeout"
            break
        if _cancelled(cancel):
            ended_by = "cancelled"
            break
        progress_offset = _forward_progress(progress_path, progress_offset, on_progress)
        time.sleep(_POLL_S)
    # Kill the whole group either way: leftover compile workers or g++ must not outlive the stage.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _forward_progress(progress_path, progress_offset, on_progress)
    return ended_by


def _forward_progress(path: Path, offset: int, on_progress: Callable[[dict], None] | None) -> int:
    if on_progress is None or not path.exists():
        return offset
    with open(path, encoding="utf-8") as fh:
        fh.seek(offset)
        chunk = fh.read()
    complete, _, _partial = chunk.rpartition("\n")
    for line in complete.splitlines():
        with contextlib.suppress(ValueError):
            on_progress(json.loads(line))
    return offset + (len(complete) + 1 if "\n" in chunk else 0)  # JSON lines are ASCII: chars == bytes


def _tail(path: Path) -> str | None:
    data = path.read_bytes()[-_TAIL_CHARS:]
    text = data.decode("utf-8", errors="replace").strip()
    return text or None


def _classify(
    returncode: int, ended_by: str, result_path: Path, tail: str | None, wall_s: float, timeout_s: float, label: str
) -> SandboxResult:
    if ended_by == "timeout":
        return SandboxResult("timeout", None, f"{label} did not finish within {timeout_s:g} s and was killed", tail,
                             wall_s)  # fmt: skip
    if ended_by == "cancelled":
        return SandboxResult("cancelled", None, f"{label} was cancelled", tail, wall_s)
    if result_path.exists():
        try:
            result = json.loads(result_path.read_text())
        except ValueError:
            result = None
        if isinstance(result, dict) and "status" in result:
            return SandboxResult(result["status"], result.get("value"), result.get("reason"), tail, wall_s)
    looks_oom = bool(tail and _OOM_PATTERNS.search(tail))
    if returncode < 0:
        sig = -returncode
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else f"signal {sig}"
        if looks_oom:
            return SandboxResult("oom", None, f"{label} ran out of memory (killed by {name})", tail, wall_s)
        if sig == signal.SIGKILL:
            return SandboxResult("oom", None, f"{label} was killed by SIGKILL, most likely by the out-of-memory "
                                 "killer", tail, wall_s)  # fmt: skip
        return SandboxResult("crashed", None, f"{label} crashed: the process was killed by {name}", tail, wall_s)
    if looks_oom:
        return SandboxResult("oom", None, f"{label} ran out of memory (exit code {returncode})", tail, wall_s)
    return SandboxResult("crashed", None, f"{label} exited with code {returncode} without a result", tail, wall_s)


# ------------------------------------------------------------------ child side
def _set_parent_death_signal() -> None:
    """Die with the parent (Linux): a killed worker must not leave orphaned measurements running."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _limit_address_space(memory_limit_mb: int | None) -> None:
    if not memory_limit_mb:
        return
    import resource

    limit = int(memory_limit_mb) * 1024 * 1024
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def _failure(exc: BaseException) -> dict:
    if isinstance(exc, StageError):
        return {"status": exc.status, "reason": exc.reason}
    message = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, MemoryError) or _OOM_PATTERNS.search(message):
        return {"status": "oom", "reason": f"out of memory: {message}"[:2000]}
    return {"status": "runtime_error", "reason": message[:2000]}


def _child_main(spec_path: str) -> None:
    _set_parent_death_signal()
    spec = json.loads(Path(spec_path).read_text())
    _limit_address_space(spec.get("memory_limit_mb"))
    sys.path.extend(p for p in spec.get("import_paths", []) if p not in sys.path)
    try:
        module_name, _, func_name = spec["target"].partition(":")
        func = getattr(importlib.import_module(module_name), func_name)
        result = {"status": "ok", "value": func(**spec["kwargs"])}
        payload = json.dumps(result)
    except BaseException as exc:  # noqa: BLE001 - every failure must become a status
        traceback.print_exc()
        payload = json.dumps(_failure(exc))
    Path(spec["result_path"]).write_text(payload)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: lingering compile-worker pools or non-daemon threads must not hang the exit.
    os._exit(0)


if __name__ == "__main__":
    # Run from the imported module, not __main__, so targets' `StageError` is the same class.
    from advisor.sandbox import _child_main as child_main

    child_main(sys.argv[1])
