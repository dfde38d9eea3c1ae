"""Run one stage in a fresh, limited child process and always get a status back.

Parent side: `run_in_sandbox` starts `python -m advisor.harness.sandbox SPEC` in its own session (so the
whole process group - Inductor's compile workers, g++ - can be killed at once), with a scrubbed
environment, its own compile-cache directory, an address-space limit and a wall-clock timeout.
A signal, a hang, an out-of-memory or an exception in the child become a `SandboxResult` status
with the output tail; the parent never hangs and never loses the run.

Child side (`_child_main`): applies the limits before anything heavy is imported, calls the
target ("package.module:function") with the JSON kwargs and writes its JSON return value.
Targets choose their failure status by raising `StageError`; `report_progress` streams progress
events back to the parent. This module never imports torch.

`Zygote` (optional) saves each child the seconds of `import torch`: one pre-started interpreter,
itself started with the scrubbed environment, runs a preload (e.g. `import torch`, nothing that holds
compile state) and then forks each child. The forked child gets the same treatment as a spawned one:
its own session, its own scrubbed environment and cache directory, the address-space limit, the
parent-death signal, the same status classification. Only children whose environment differs from
the zygote's in the per-child keys (cache directories, progress file) are forked; any other child,
or any child after the zygote failed, is spawned as usual.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from advisor.harness import safe_unpickle
from advisor.harness.isolation import Isolation, resolve_isolation
from advisor.harness.owned_temp import owned_temp_dir
from advisor.harness.process_tree import kill_descendants, running

SandboxStatus = Literal[
    "ok", "timeout", "crashed", "oom", "runtime_error", "compile_error", "cancelled", "rejected", "load_error"
]
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
_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True)
class ChildLimits:
    """Kernel limits of one child (rlimits), beyond the wall-clock timeout the parent enforces.

    `cpu_s`: CPU seconds over all threads (default: the timeout times the cores, i.e. never before the wall
    clock unless something spins); `file_mb`: the largest file it may write; `processes`: how many processes
    its uid may have (not enforced by the kernel when the worker runs as root)."""

    memory_mb: int | None = None
    cpu_s: float | None = None
    file_mb: int | None = 4096
    processes: int | None = 4096


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


def scrubbed_environment(source: Mapping[str, str] | None = None, *, allow_list: bool = True) -> dict[str, str]:
    """`source` (default os.environ) minus anything that looks like a secret, and - with `allow_list`, as for
    model children - minus everything not allow-listed. The worker's stage runner passes `allow_list=False`:
    it is trusted code that needs the worker's own settings (e.g. the isolation kind), never its token."""
    env = {}
    for name, value in (os.environ if source is None else source).items():
        upper = name.upper()
        if any(marker in upper for marker in _SECRET_MARKERS):
            continue
        if not allow_list or name in _KEEP_NAMES or upper.startswith(_KEEP_PREFIXES):
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
    zygote: Zygote | None = None,
    readable: Sequence[str] = (),
    writable: Sequence[str] = (),
    isolation: Isolation | None = None,
    limits: ChildLimits | None = None,
) -> SandboxResult:
    """Run `target(**kwargs)` in a fresh child process; see the module docstring.

    `cache_dir` becomes the child's TORCHINDUCTOR_CACHE_DIR (and ADVISOR_COMPILE_CACHE_DIR for other
    compilers); None gives it a fresh empty one. `cancel` (an Event or a callable returning True)
    kills the child and yields status "cancelled". `on_progress` receives the child's
    `report_progress` events, in the parent's thread. `zygote`: fork the child from it when it can.

    Isolation (see advisor.harness.isolation; default `resolve_isolation()`): the child sees `readable` (the model and
    inputs files) read-only and only its own work directory, `cache_dir` and `writable` writable. A zygote
    child sees what its zygote was started with; one that needs more is spawned instead. `limits` default to
    `ChildLimits(memory_mb=memory_limit_mb)`.
    """
    if zygote is not None and not zygote.covers(readable, [cache_dir or "", *writable]):
        zygote = None  # the zygote's sandbox cannot see what this child needs
    isolation = zygote.isolation if zygote is not None else (isolation or resolve_isolation())
    scratch_root = zygote.scratch if zygote is not None else None
    workdir = Path(owned_temp_dir("advisor-sandbox-", dir=scratch_root))
    label = f"stage {stage!r}" if stage else f"{target}"
    limits = limits or ChildLimits(memory_mb=memory_limit_mb)
    try:
        spec = {
            "target": target,
            "kwargs": kwargs,
            "limits": _limits_for(limits, timeout_s),
            "result_path": str(workdir / "result.json"),
            "import_paths": _parent_import_paths(),
        }
        spec_path = workdir / "spec.json"
        spec_path.write_text(json.dumps(spec))
        env = _child_environment(cache_dir or str(workdir / "cache"), workdir / "progress.jsonl", extra_env)
        output_path = workdir / "output.log"
        started = time.perf_counter()
        with open(output_path, "wb") as output:
            proc: subprocess.Popen | _ForkedChild | None = None
            if zygote is not None:
                proc = zygote.fork(str(spec_path), env, str(output_path))
            if proc is None:
                writable_paths = [str(workdir), *(p for p in [cache_dir, *writable] if p)]
                command = isolation.command(
                    [sys.executable, "-m", "advisor.harness.sandbox", str(spec_path)],
                    writable=writable_paths,
                    readable=readable,
                )
                proc = subprocess.Popen(
                    command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            ended_by = _wait(proc, timeout_s, cancel, workdir / "progress.jsonl", on_progress)
        wall_s = time.perf_counter() - started
        tail = _tail(output_path)
        returncode = proc.returncode if isinstance(proc, _ForkedChild) else isolation.returncode(proc.returncode)
        return _classify(returncode, ended_by, workdir / "result.json", tail, wall_s, timeout_s, label)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _limits_for(limits: ChildLimits, timeout_s: float) -> dict[str, Any]:
    cpu_s = limits.cpu_s if limits.cpu_s is not None else math.ceil(timeout_s * (os.cpu_count() or 1)) + 5
    return {"memory_mb": limits.memory_mb, "cpu_s": cpu_s, "file_mb": limits.file_mb, "processes": limits.processes}


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
    proc: subprocess.Popen | _ForkedChild,
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
    if ended_by != "exit" and isinstance(proc, _ForkedChild):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)  # not reaped yet, so the pid is still this child's
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
        return SandboxResult(
            "timeout", None, f"{label} did not finish within {timeout_s:g} s and was killed", tail, wall_s
        )
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
        if sig == signal.SIGXCPU:
            return SandboxResult("timeout", None, f"{label} used up its CPU-time limit and was killed", tail, wall_s)
        if sig == signal.SIGKILL:
            return SandboxResult(
                "oom", None, f"{label} was killed by SIGKILL, most likely by the out-of-memory killer", tail, wall_s
            )
        return SandboxResult("crashed", None, f"{label} crashed: the process was killed by {name}", tail, wall_s)
    if looks_oom:
        return SandboxResult("oom", None, f"{label} ran out of memory (exit code {returncode})", tail, wall_s)
    return SandboxResult("crashed", None, f"{label} exited with code {returncode} without a result", tail, wall_s)


# ------------------------------------------------------------------ zygote (parent side)
# Keys a forked child's environment may differ in from the zygote's: nothing reads them at `import torch`.
_PER_CHILD_KEYS = {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "ADVISOR_COMPILE_CACHE_DIR", _PROGRESS_ENV}
# What a zygote keeps in its own work directory across resets (the host wrote them; nothing reads them back).
_ZYGOTE_OWN_FILES = {"zygote.json", "zygote.log"}


class Zygote:
    """A pre-started interpreter that ran `preload` ("module:function", called with `preload_kwargs`) once
    and forks sandbox children from then on; see the module docstring. Started on first use (or `start()`); one
    child at a time; `close()` (or leaving the `with` block) stops it. If it cannot start or dies, `fork` returns
    None and the caller spawns instead - a broken zygote costs time, never a result.

    A worker keeps one zygote between jobs (workers.warm_sandbox): `readable` may then name directories (the
    worker's inbox, which holds only the current job's files), `reset()` makes it clean for the next job, and
    `handle()` / `Zygote.attach()` let the job's runner process fork from it without owning it."""

    def __init__(
        self,
        preload: str,
        preload_kwargs: dict | None = None,
        *,
        start_timeout_s: float = 120.0,
        isolation: Isolation | None = None,
        readable: Sequence[str] = (),
        refresh: str | None = None,
    ) -> None:
        """`refresh` ("module:function", called with `preload_kwargs` inside the zygote after each `reset()`):
        puts back what the preload placed in the sandbox's private /tmp, which the reset empties."""
        self.preload = preload
        self.preload_kwargs = preload_kwargs or {}
        self.refresh = refresh
        self.start_timeout_s = start_timeout_s
        self.isolation = isolation or resolve_isolation()
        self.readable = [os.path.abspath(p) for p in readable]
        # the one writable directory of its sandbox: every child's work directory and caches live under it
        self.scratch = owned_temp_dir("advisor-job-")  # a killed owner's is removed by the next worker
        self._attached: dict | None = None  # the handle of a zygote another process owns (Zygote.attach)
        self._env: dict[str, str] = {}
        self.pid: int | None = None  # on the host: the zygote interpreter itself (not bubblewrap around it)
        self._init_state()

    def _init_state(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._workdir: Path | None = None
        self._buffer = b""
        self._broken = False
        self._lock = threading.Lock()
        self.reset_problem: str | None = None  # why the last `reset()` failed

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @classmethod
    def attach(cls, handle: Mapping[str, Any]) -> Zygote:
        """A client of a running zygote owned by another process, from that owner's `handle()` (its pipes are
        inherited file descriptors). `close()` then only lets go of it; a failure kills it, and the owner
        starts a new one."""
        zygote = cls.__new__(cls)  # not __init__: nothing to start, no scratch directory of its own
        zygote.preload = str(handle["preload"])
        zygote.preload_kwargs = {}
        zygote.refresh = None
        zygote.start_timeout_s = 0.0
        zygote.isolation = Isolation(**handle["isolation"])
        zygote.readable = list(handle["readable"])
        zygote.scratch = str(handle["scratch"])
        zygote._attached = dict(handle)
        zygote._env = dict(handle["env"])
        zygote.pid = int(handle["pid"])
        zygote._init_state()
        return zygote

    def handle(self) -> dict[str, Any] | None:
        """What `Zygote.attach` needs, for a child process that inherits its `request_fd` and `reply_fd` (`pass_fds`);
        None when the zygote is not running."""
        if not self.start() or self._proc is None or self._proc.stdin is None or self._proc.stdout is None:
            return None
        return {
            "preload": self.preload,
            "isolation": dataclasses.asdict(self.isolation),
            "readable": self.readable,
            "scratch": self.scratch,
            "env": self._env,
            "pid": self.pid,
            "root_pid": self._proc.pid,
            "request_fd": self._proc.stdin.fileno(),
            "reply_fd": self._proc.stdout.fileno(),
        }

    def covers(self, readable: Sequence[str], writable: Sequence[str]) -> bool:
        """Whether a child forked from this zygote can see these paths (always, without isolation)."""
        if not self.isolation.isolated:
            return True
        inside = [os.path.abspath(p) for p in writable if p]
        return all(_under(p, self.scratch) for p in inside) and all(
            any(_under(os.path.abspath(p), shown) for shown in self.readable) for p in readable
        )

    def start(self) -> bool:
        """Start it now (a worker does so before its first job); False when it cannot run."""
        return self._start()

    def fork(self, spec_path: str, env: Mapping[str, str], output_path: str) -> _ForkedChild | None:
        """Fork a child running `_child_main(spec_path)` with exactly `env`; None when that is not possible."""
        if not self._lock.acquire(blocking=False):
            return None  # another child of this zygote is running: spawn this one
        try:
            if not self._start() or not self._compatible(env):
                self._lock.release()
                return None
            self._send({"spec_path": spec_path, "env": dict(env), "output_path": output_path})
            reply = self._receive(timeout_s=30.0)
            if reply is None or "pid" not in reply:
                self._fail()
                self._lock.release()
                return None
            ns_pid = int(reply["pid"])
            host_pid = ns_pid
            if self.isolation.isolated:
                host_pid = _host_pid(self._root_pid(), ns_pid) or -1
            if host_pid <= 0:  # cannot be found from here, so could not be killed: do not use it
                self._fail()
                self._lock.release()
                return None
            return _ForkedChild(self, host_pid, ns_pid)
        except BaseException:
            self._fail()
            self._lock.release()
            raise

    def reset(self, timeout_s: float = 30.0) -> bool:
        """Make the running zygote clean for another job; False (and stopped) when it cannot be made so.

        Every process it forked, and every process those started (the zygote is their subreaper, so none escapes
        by re-parenting), is killed; inside the sandbox its private /tmp and /dev/shm are emptied and System V
        IPC objects removed; here, everything children wrote to the scratch directory is removed. Any reply a
        stopped job's runner left unread in the pipe is skipped."""
        if self._broken or self._proc is None or self._proc.poll() is not None:
            return False
        nonce = os.urandom(8).hex()
        self._buffer = b""
        try:
            self._send({"reset": nonce}, new_line=True)  # ends whatever a killed runner left half-written
        except OSError:
            self._fail()
            return False
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._receive(max(0.0, deadline - time.monotonic()))
            if reply is None:
                self.reset_problem = "the zygote did not answer the reset"
                self._fail()
                return False
            if reply.get("reset") == nonce:
                break
        if not reply.get("clean"):
            self.reset_problem = str(reply.get("reason") or "not clean")
            self._fail()
            return False
        self._wipe_scratch()
        return True

    def close(self) -> None:
        """Stop the zygote (and so every child of it) and remove its scratch directory; an attached client only
        lets go of it."""
        if self._attached is not None:
            return
        self._stop()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _stop(self) -> None:
        if self._attached is not None:  # the owner notices it is gone and starts another
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(self._attached["root_pid"]), signal.SIGKILL)
            return
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    stream and stream.close()  # type: ignore[func-returns-value]
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def _wipe_scratch(self) -> None:
        for entry in Path(self.scratch).iterdir():
            if self._workdir is not None and entry == self._workdir:
                for own in entry.iterdir():
                    if own.name not in _ZYGOTE_OWN_FILES:
                        _remove(own)
            else:
                _remove(entry)

    # -------------------------------------------------- internals
    def _root_pid(self) -> int:
        """The host pid of what was started: bubblewrap around the zygote, or the zygote itself."""
        if self._attached is not None:
            return int(self._attached["root_pid"])
        return self._proc.pid if self._proc is not None else -1

    def _alive(self) -> bool:
        if self._attached is not None:
            return running(int(self._attached["root_pid"]))
        return self._proc is not None and self._proc.poll() is None

    def _start(self) -> bool:
        if self._broken:
            return False
        if self._attached is not None:
            return self._alive()
        if self._proc is not None:
            if self._proc.poll() is None:
                return True
            self._fail()
            return False
        self._workdir = Path(tempfile.mkdtemp(prefix="advisor-zygote-", dir=self.scratch))
        self._env = _child_environment(str(self._workdir / "cache"), self._workdir / "progress.jsonl", None)
        spec = {
            "preload": self.preload,
            "preload_kwargs": self.preload_kwargs,
            "refresh": self.refresh,
            "import_paths": _parent_import_paths(),
            "sandboxed": self.isolation.isolated,
        }
        spec_path = self._workdir / "zygote.json"
        spec_path.write_text(json.dumps(spec))
        with open(self._workdir / "zygote.log", "wb") as log:
            command = self.isolation.command(
                [sys.executable, "-m", "advisor.harness.sandbox", "--zygote", str(spec_path)],
                writable=[self.scratch],
                readable=self.readable,
            )
            self._proc = subprocess.Popen(
                command,
                env=self._env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        reply = self._receive(timeout_s=self.start_timeout_s)
        if reply is None or not reply.get("ready"):
            self._fail()
            return False
        self.pid = self._proc.pid
        if self.isolation.isolated:
            self.pid = _host_pid(self._proc.pid, int(reply.get("pid", -1)))
            if self.pid is None:
                self._fail()
                return False
        return True

    def _compatible(self, env: Mapping[str, str]) -> bool:
        names = (set(env) | set(self._env)) - _PER_CHILD_KEYS
        return all(env.get(name) == self._env.get(name) for name in names)

    def _fail(self) -> None:
        """Stop it for good; later children are spawned (into the same scratch directory)."""
        self._broken = True
        self._stop()

    def _request_fd(self) -> int | None:
        if self._attached is not None:
            return int(self._attached["request_fd"])
        return self._proc.stdin.fileno() if self._proc is not None and self._proc.stdin is not None else None

    def _reply_fd(self) -> int | None:
        if self._attached is not None:
            return int(self._attached["reply_fd"])
        return self._proc.stdout.fileno() if self._proc is not None and self._proc.stdout is not None else None

    def _send(self, message: dict, *, new_line: bool = False) -> None:
        fd = self._request_fd()
        assert fd is not None
        data = ("\n" if new_line else "").encode() + (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(fd, data) :]

    def _receive(self, timeout_s: float) -> dict | None:
        """The next JSON line from the zygote; None on timeout or when it is gone."""
        fd = self._reply_fd()
        if fd is None:
            return None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, min(remaining, _POLL_S)))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self._buffer += chunk
            elif remaining <= 0:
                return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            return json.loads(line)
        except ValueError:
            return None


class _ForkedChild:
    """The parent's handle on a zygote's child, with the part of Popen's interface `_wait` uses."""

    def __init__(self, zygote: Zygote, pid: int, ns_pid: int | None = None) -> None:
        self.zygote = zygote
        self.pid = pid  # on the host: what the parent signals
        self.ns_pid = pid if ns_pid is None else ns_pid  # inside the zygote's PID namespace: what it reports
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._collect(timeout_s=0.0)
        return self.returncode

    def wait(self) -> int:
        deadline = time.monotonic() + 60.0  # the child was SIGKILLed or has exited: the zygote reaps it at once
        while self.returncode is None:
            self._collect(timeout_s=_POLL_S, give_up=time.monotonic() > deadline)
        return self.returncode

    def _collect(self, timeout_s: float, give_up: bool = False) -> None:
        zygote = self.zygote
        reply = None if give_up else zygote._receive(timeout_s)
        if reply is not None and reply.get("pid") == self.ns_pid and "returncode" in reply:
            self.returncode = int(reply["returncode"])
        elif give_up or not zygote._alive():
            # the zygote is gone, so is its child (parent-death signal): report it killed
            self.returncode = -signal.SIGKILL
            zygote._fail()
        else:
            return
        zygote._lock.release()


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _host_pid(root: int, ns_pid: int) -> int | None:
    """The host pid of the descendant of `root` whose pid in its own (innermost) PID namespace is `ns_pid`."""
    for _ in range(100):  # the fork has happened (the zygote replied), but /proc may lag a moment
        for status in Path("/proc").glob("[0-9]*/status"):
            with contextlib.suppress(OSError, ValueError):
                fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
                ns_pids = fields.get("NSpid", "").split()
                if len(ns_pids) > 1 and int(ns_pids[-1]) == ns_pid and _descends_from(int(ns_pids[0]), root):
                    return int(ns_pids[0])
        time.sleep(0.01)
    return None


def _descends_from(pid: int, root: int) -> bool:
    for _ in range(64):
        if pid == root:
            return True
        if pid <= 1:
            return False
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


# ------------------------------------------------------------------ child side
def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0)


_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _set_parent_death_signal() -> None:
    """Die with the parent (Linux): a killed worker must not leave orphaned measurements running."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _apply_limits(limits: Mapping[str, Any]) -> None:
    """rlimits of this child (see ChildLimits): address space, CPU time, file size, processes, no core dumps."""
    import resource

    mib = 1024 * 1024
    wanted = {
        resource.RLIMIT_AS: (limits.get("memory_mb"), mib),
        resource.RLIMIT_CPU: (limits.get("cpu_s"), 1),
        resource.RLIMIT_FSIZE: (limits.get("file_mb"), mib),
        resource.RLIMIT_NPROC: (limits.get("processes"), 1),
        resource.RLIMIT_CORE: (0, 1),
    }
    for which, (value, unit) in wanted.items():
        if value is None:
            continue
        limit = math.ceil(float(value)) * unit
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (limit, hard))


def _failure(exc: BaseException) -> dict:
    if isinstance(exc, StageError):
        return {"status": exc.status, "reason": exc.reason}
    status = getattr(exc, "sandbox_status", None)  # e.g. advisor.harness.safe_unpickle's refusal: "rejected"
    if isinstance(status, str):
        return {"status": status, "reason": str(exc)[:2000]}
    message = f"{type(exc).__name__}: {exc}".strip()
    if isinstance(exc, MemoryError) or _OOM_PATTERNS.search(message):
        return {"status": "oom", "reason": f"out of memory: {message}"[:2000]}
    return {"status": "runtime_error", "reason": message[:2000]}


def _child_main(spec_path: str) -> None:
    _set_parent_death_signal()
    safe_unpickle.install()  # before the target imports torch: no module can hold the stock unpickler
    spec = json.loads(Path(spec_path).read_text())
    _apply_limits(spec.get("limits") or {})
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


def _zygote_main(spec_path: str) -> None:
    """Zygote side: preload, then serve requests on stdin, replying on the original stdout: a fork request starts
    one child (replies its pid, later its return code); a reset request kills every descendant and cleans up."""
    _set_parent_death_signal()
    # orphans of its children are re-parented to it, so none escapes a reset; and other processes of the sandbox's
    # uid (a child of an earlier job, say) cannot ptrace it or read its memory (each child is dumpable again)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_DUMPABLE, 0)
    safe_unpickle.install()
    spec = json.loads(Path(spec_path).read_text())
    sys.path.extend(p for p in spec.get("import_paths", []) if p not in sys.path)
    replies = os.dup(1)
    os.dup2(2, 1)  # stray prints of the preload must not corrupt the replies

    def reply(message: dict) -> None:
        os.write(replies, (json.dumps(message) + "\n").encode())

    before = dict(os.environ)
    try:
        module_name, _, func_name = spec["preload"].partition(":")
        getattr(importlib.import_module(module_name), func_name)(**spec.get("preload_kwargs", {}))
    except BaseException as exc:  # noqa: BLE001 - reported, then the parent spawns instead
        traceback.print_exc()
        reply({"ready": False, "reason": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    # what the preload set (e.g. TORCH_DEVICE_BACKEND_AUTOLOAD=0) stays set in every child and its subprocesses
    added = {k: v for k, v in os.environ.items() if before.get(k) != v}
    reply({"ready": True, "pid": os.getpid()})
    current: int | None = None  # the child being waited for
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], _POLL_S if current is not None else 1.0)
        current = _reap(current, reply)
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            os._exit(0)  # the parent closed the pipe
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                request = json.loads(line)
            except ValueError:
                continue  # e.g. the rest of a request whose sender was killed while writing it
            if "reset" in request:
                current = None
                reply({"reset": request["reset"], **_reset_zygote(spec)})
            elif current is not None:
                reply({"busy": True})
            else:
                current = _fork_child(request, added, replies)
                reply({"pid": current})


def _reset_zygote(spec: dict) -> dict:
    """A reset request: clean up after the last job, then the zygote's refresh (see `Zygote`)."""
    outcome = _clean_zygote_sandbox(bool(spec.get("sandboxed")))
    if outcome["clean"] and spec.get("refresh"):
        try:
            module_name, _, func_name = spec["refresh"].partition(":")
            getattr(importlib.import_module(module_name), func_name)(**spec.get("preload_kwargs", {}))
        except Exception as exc:  # noqa: BLE001 - reported: the owner replaces this zygote
            traceback.print_exc()
            return {"clean": False, "reason": f"refresh failed: {type(exc).__name__}: {exc}"}
    return outcome


def _reap(current: int | None, reply: Callable[[dict], None]) -> int | None:
    """Reap every exited child (orphans included: the zygote is their subreaper); report `current`'s exit."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return current
        if pid == 0:
            return current
        if pid == current:
            reply({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})
            current = None


def _fork_child(request: dict, added: Mapping[str, str], replies: int) -> int:
    ready_r, ready_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(ready_r)
            os.close(replies)
            os.setsid()
            _prctl(_PR_SET_DUMPABLE, 1)
            os.write(ready_w, b"1")  # in its own session now: the parent may kill its group
            os.close(ready_w)
            out = os.open(request["output_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.environ.clear()
            os.environ.update(request["env"])
            os.environ.update(added)
            _child_main(request["spec_path"])
        finally:
            os._exit(1)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    return pid


# emptied between the jobs of a warm zygote; /dev/mqueue lists the IPC namespace's POSIX message queues (unlinking
# one there removes the queue), as bubblewrap mounts it (advisor.harness.isolation)
_SANDBOX_TEMP_DIRS = ("/tmp", "/dev/shm", "/dev/mqueue")


def _clean_zygote_sandbox(sandboxed: bool) -> dict:
    """Inside the zygote: kill and reap every descendant, then (in a sandbox: its own /tmp, /dev/shm and IPC
    namespace) empty the temporary directories, remove POSIX message queues and System V IPC objects.
    {"clean": bool, "reason": ...}."""
    left = kill_descendants(os.getpid())
    _reap(None, lambda message: None)  # no child is being waited for: nothing to report
    if left:
        return {"clean": False, "reason": f"{len(left)} process(es) of the last job survived SIGKILL"}
    if not sandboxed:
        return {"clean": True}  # not isolated: /tmp is the host's, not the zygote's to empty
    mounts = _mount_points()  # the binds of the scratch directory and the inbox (the host empties those)
    for directory in _SANDBOX_TEMP_DIRS:
        for entry in _entries_around_mounts(Path(directory), mounts):
            _remove(entry)
    leftovers = [str(e) for d in _SANDBOX_TEMP_DIRS for e in _entries_around_mounts(Path(d), mounts)]
    if leftovers:
        return {"clean": False, "reason": f"could not remove {', '.join(leftovers[:3])}"}
    if not _remove_sysv_ipc():
        return {"clean": False, "reason": "System V IPC objects of the last job could not be removed"}
    return {"clean": True}


def _mount_points() -> set[str]:
    try:
        return {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    except (OSError, IndexError):
        return set()


def _entries_around_mounts(directory: Path, mounts: set[str]) -> list[Path]:
    """What is in `directory` except mount points and the directories leading to them (recursively)."""
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for entry in directory.iterdir():
            path = str(entry)
            if path in mounts:
                continue
            if any(m.startswith(path + "/") for m in mounts) and entry.is_dir() and not entry.is_symlink():
                found += _entries_around_mounts(entry, mounts)
            else:
                found.append(entry)
    return found


def _remove_sysv_ipc() -> bool:
    """Remove every System V shared memory segment, semaphore set and message queue this IPC namespace shows."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    ipc_rmid = 0
    removers = {
        "shm": lambda ident: libc.shmctl(ident, ipc_rmid, None),
        "sem": lambda ident: libc.semctl(ident, 0, ipc_rmid),
        "msg": lambda ident: libc.msgctl(ident, ipc_rmid, None),
    }
    for kind, remove in removers.items():
        for ident in _sysv_ids(kind):
            remove(ident)
    return not any(_sysv_ids(kind) for kind in removers)


def _sysv_ids(kind: str) -> list[int]:
    try:
        rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    except OSError:
        return []
    return [int(row.split()[1]) for row in rows if row.split()]


if __name__ == "__main__":
    # Run from the imported module, not __main__, so targets' `StageError` is the same class.
    from advisor.harness.sandbox import _child_main as child_main
    from advisor.harness.sandbox import _zygote_main as zygote_main

    if sys.argv[1] == "--zygote":
        zygote_main(sys.argv[2])
    else:
        child_main(sys.argv[1])
