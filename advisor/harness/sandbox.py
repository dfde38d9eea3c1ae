"""Run one stage in a fresh, limited child process and always get a status back.

Parent side: `run_in_sandbox` starts `python -m advisor.harness.sandbox ...` in its own session (so the whole
process group - Inductor's compile workers, g++ - can be killed at once), with a scrubbed environment, its own
compile-cache directory, an address-space limit and a wall-clock timeout. A signal, a hang, an out-of-memory or an
exception in the child become a `SandboxResult` status with the output tail; the parent never hangs and never
loses the run.

What comes back comes through pipes the parent made (advisor.harness.child_streams): the child's output, its
progress events and its result. The parent never opens a path inside a directory a child may write, so a child
cannot make it read a host file by leaving a symlink there.

Child side (`_child_main`): applies the limits before anything heavy is imported, calls the target
("package.module:function") with the JSON kwargs and writes its JSON return value to the result pipe. Targets
choose their failure status by raising `StageError`; `report_progress` streams progress events back. This module
never imports torch.

`Zygote` saves each child the seconds of `import torch`: one pre-started interpreter runs a preload (e.g. `import
torch`, nothing that holds compile state) and then forks each child. A zygote belongs to one job: under
bubblewrap it is the pid 1 of a sandbox of its own, whose only writable places are that sandbox's size-capped /tmp
and /dev/shm, and it is stopped with the job - everything in the sandbox dies with it and its memory is freed. No
sandbox that ran one job's code ever runs another's (workers.job_sandbox prepares the next job's zygote ahead of
time instead). A forked child gets the same treatment as a spawned one: its own session, its own scrubbed
environment and cache directory, the limits, the parent-death signal, the same status classification. A child whose
environment differs from the zygote's in more than the per-child keys is started afresh (exec) inside the same
sandbox; without isolation it is spawned as usual.
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
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from advisor.core import bounded_json
from advisor.harness import safe_unpickle, seccomp
from advisor.harness.child_streams import ChildStreams, memfd_with
from advisor.harness.isolation import Isolation, resolve_isolation
from advisor.harness.owned_temp import owned_temp_dir
from advisor.harness.process_tree import descendant_pids, running

SandboxStatus = Literal[
    "ok", "timeout", "crashed", "oom", "runtime_error", "compile_error", "cancelled", "rejected", "load_error"
]
Cancel = threading.Event | Callable[[], bool] | None
EndedBy = Literal["exit", "timeout", "cancelled", "violation"]  # why the parent stopped waiting for a child

# Environment variables a child may see. Anything else (and anything secret-looking) is dropped.
_KEEP_NAMES = {"PATH", "HOME", "LANG", "TMPDIR", "PYTHONPATH", "LD_LIBRARY_PATH", "CXX", "CC", "USER"}
_KEEP_PREFIXES = ("ASCEND_", "TORCH", "OMP_", "MKL_", "LC_", "CUDA_", "TRITON_", "KMP_", "OPENBLAS_")
_SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL")
_PROGRESS_FD_ENV = "ADVISOR_SANDBOX_PROGRESS_FD"
_TAIL_CHARS = 4000
_POLL_S = 0.05
_OOM_PATTERNS = re.compile(
    r"MemoryError|std::bad_alloc|Cannot allocate memory|can't allocate memory|out of memory|OutOfMemoryError",
    re.IGNORECASE,
)
_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
# where a sandboxed zygote keeps its job's files: inside its own /tmp tmpfs, invisible to the host and to other jobs
SANDBOX_SCRATCH = "/tmp/advisor-job"


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
    inputs files) read-only and only its own work directory, `cache_dir` and `writable` writable. A zygote child
    sees what its zygote was started with and writes only inside it (`zygote.scratch`); one that needs more is
    spawned instead. `limits` default to `ChildLimits(memory_mb=memory_limit_mb)`.
    """
    if zygote is not None and not zygote.covers(readable, [cache_dir or "", *writable]):
        zygote = None  # the zygote's sandbox cannot see what this child needs
    label = f"stage {stage!r}" if stage else f"{target}"
    limits = limits or ChildLimits(memory_mb=memory_limit_mb)
    spec = {
        "target": target,
        "kwargs": kwargs,
        "limits": _limits_for(limits, timeout_s),
        "import_paths": _parent_import_paths(),
    }
    if zygote is not None:
        forked = _run_forked(zygote, spec, cache_dir, extra_env, timeout_s, cancel, on_progress, label)
        if forked is not None:
            return forked
        isolation = zygote.isolation  # spawned instead, confined as its zygote's children are
    isolation = isolation or resolve_isolation()
    workdir = Path(owned_temp_dir("advisor-sandbox-"))
    try:
        env = _child_environment(cache_dir or str(workdir / "cache"), extra_env)
        writable_paths = [str(workdir), *(p for p in [cache_dir, *writable] if p)]
        for path in writable_paths:
            Path(path).mkdir(parents=True, exist_ok=True)  # bubblewrap binds only what exists
        return _run_spawned(isolation, spec, env, writable_paths, readable, timeout_s, cancel, on_progress, label)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # never follows a link the child left in it


def _run_spawned(
    isolation: Isolation,
    spec: dict,
    env: dict[str, str],
    writable: list[str],
    readable: Sequence[str],
    timeout_s: float,
    cancel: Cancel,
    on_progress: Callable[[dict], None] | None,
    label: str,
) -> SandboxResult:
    streams = ChildStreams()
    spec_fd = memfd_with(json.dumps(spec).encode(), "advisor-spec")
    filter_fd = seccomp.program_fd() if isolation.isolated else None
    try:
        _, progress_w, result_w = streams.write_ends
        argv = [sys.executable, "-m", "advisor.harness.sandbox", str(spec_fd), str(result_w), str(progress_w)]
        command = isolation.command(argv, writable=writable, readable=readable, seccomp_fd=filter_fd)
        started = time.perf_counter()
        proc = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=streams.output_w,
            stderr=streams.output_w,
            start_new_session=True,
            pass_fds=[fd for fd in (spec_fd, result_w, progress_w, filter_fd) if fd is not None],
        )
        streams.close_write_ends()
        ended_by = _wait(proc, timeout_s, cancel, streams, on_progress)
        wall_s = time.perf_counter() - started
        return _classify(isolation.returncode(proc.returncode), ended_by, streams, wall_s, timeout_s, label)
    finally:
        streams.close()
        for fd in (spec_fd, filter_fd):
            if fd is not None:
                os.close(fd)


def _run_forked(
    zygote: Zygote,
    spec: dict,
    cache_dir: str | None,
    extra_env: Mapping[str, str] | None,
    timeout_s: float,
    cancel: Cancel,
    on_progress: Callable[[dict], None] | None,
    label: str,
) -> SandboxResult | None:
    """A child forked from `zygote`; None when it must be spawned instead (an unisolated zygote that cannot)."""
    workdir = zygote.new_path("child")  # created and, once the child ended, removed by the zygote
    env = _child_environment(cache_dir or f"{workdir}/cache", extra_env)
    streams = ChildStreams()
    spec_fd = memfd_with(json.dumps(spec).encode(), "advisor-spec")
    try:
        started = time.perf_counter()
        proc = zygote.fork(spec_fd, streams, env, workdir)
        streams.close_write_ends()
        if proc is None and not zygote.isolation.isolated:
            return None  # spawned on the host instead
        if proc is None:  # its paths live inside the zygote's sandbox: no spawned child could see them
            reason = zygote.problem or "the job's sandbox is not running"
            return SandboxResult("crashed", None, f"{label} could not start: {reason}", None, 0.0)
        ended_by = _wait(proc, timeout_s, cancel, streams, on_progress)
        wall_s = time.perf_counter() - started
        return _classify(proc.returncode or 0, ended_by, streams, wall_s, timeout_s, label)
    finally:
        streams.close()
        os.close(spec_fd)


def _limits_for(limits: ChildLimits, timeout_s: float) -> dict[str, Any]:
    cpu_s = limits.cpu_s if limits.cpu_s is not None else math.ceil(timeout_s * (os.cpu_count() or 1)) + 5
    return {"memory_mb": limits.memory_mb, "cpu_s": cpu_s, "file_mb": limits.file_mb, "processes": limits.processes}


_progress_fd: int | None = None  # child side: the pipe `report_progress` writes to (set by `_child_main`)


def report_progress(event: dict) -> None:
    """Child side: send one progress event to the parent (a no-op outside the sandbox)."""
    if _progress_fd is None:
        return
    data = (json.dumps(event) + "\n").encode()
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(_progress_fd, data) :]


# ------------------------------------------------------------------ parent internals
def _child_environment(cache_dir: str, extra_env: Mapping[str, str] | None) -> dict[str, str]:
    env = scrubbed_environment()
    env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    env["TRITON_CACHE_DIR"] = os.path.join(cache_dir, "triton")
    env["ADVISOR_COMPILE_CACHE_DIR"] = cache_dir
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
    streams: ChildStreams,
    on_progress: Callable[[dict], None] | None,
) -> EndedBy:
    deadline = time.monotonic() + timeout_s
    ended_by: EndedBy = "exit"
    while proc.poll() is None:
        if time.monotonic() > deadline:
            ended_by = "timeout"
            break
        if _cancelled(cancel):
            ended_by = "cancelled"
            break
        streams.pump(on_progress, _POLL_S)
        if streams.violation is not None:
            ended_by = "violation"  # killed at once, below: nothing more of it is read
            break
    # Kill the whole group either way: leftover compile workers or g++ must not outlive the stage.
    if proc.pid > 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if ended_by != "exit" and isinstance(proc, _ForkedChild):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(proc.pid, signal.SIGKILL)  # not reaped yet, so the pid is still this child's
    elif ended_by != "exit" and isinstance(proc, _ForkedChild):
        proc.zygote._fail()  # a child the host could not find cannot be killed alone: its sandbox goes
    proc.wait()
    # what the child wrote before it ended (a grandchild killed above may still hold a write end: no end of file)
    drained_by = time.monotonic() + 2.0
    while ended_by != "violation" and streams.pump(on_progress, 0.0) and time.monotonic() < drained_by:
        pass
    return ended_by


def _classify(
    returncode: int, ended_by: str, streams: ChildStreams, wall_s: float, timeout_s: float, label: str
) -> SandboxResult:
    tail = streams.output_tail(_TAIL_CHARS)
    if ended_by == "timeout":
        return SandboxResult(
            "timeout", None, f"{label} did not finish within {timeout_s:g} s and was killed", tail, wall_s
        )
    if ended_by == "cancelled":
        return SandboxResult("cancelled", None, f"{label} was cancelled", tail, wall_s)
    if streams.result_too_large:
        return SandboxResult("crashed", None, f"{label} returned a result larger than the parent accepts", tail, wall_s)
    result = streams.result()
    if streams.violation is not None:  # a progress line (it was killed at once) or its result (never parsed)
        outcome = "it was stopped at once" if ended_by == "violation" else "it was not parsed"
        return SandboxResult(
            "crashed", None, f"{label} {streams.violation}, which the parent refuses: {outcome}", tail, wall_s
        )
    if result is not None and isinstance(result.get("status"), str):
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
_PER_CHILD_KEYS = {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "ADVISOR_COMPILE_CACHE_DIR"}
_MESSAGE_BYTES = 65536  # a request or reply on the zygote's socket (specs travel in memfds, not here)


class Zygote:
    """A pre-started interpreter that ran `preload` ("module:function", called with `preload_kwargs`) once
    and forks sandbox children from then on; see the module docstring. Started on first use (or `start()`); one
    child at a time; `close()` (or leaving the `with` block) stops it and everything it started. If it cannot start
    or dies, a child of an unisolated zygote is spawned instead; a child of an isolated one fails with the reason
    (its files live inside the zygote's sandbox, which no spawned child can see).

    The worker talks to it over a socket pair (requests carry the child's pipes and spec as descriptors). A job's
    runner process forks from a zygote the worker prepared through `handle()` / `Zygote.attach()`, inheriting the
    socket."""

    def __init__(
        self,
        preload: str,
        preload_kwargs: dict | None = None,
        *,
        start_timeout_s: float = 120.0,
        isolation: Isolation | None = None,
        readable: Sequence[str] = (),
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.preload = preload
        self.preload_kwargs = preload_kwargs or {}
        self.start_timeout_s = start_timeout_s
        self.isolation = isolation or resolve_isolation()
        self.readable = [os.path.abspath(p) for p in readable]
        # `run_in_sandbox`'s `extra_env` of the children it serves: an unisolated zygote forks only children whose
        # environment is its own (apart from their caches) and leaves the others to be spawned
        self.extra_env = dict(extra_env or {})
        # where its children write: inside its own sandbox's /tmp when isolated, else a host directory of its own
        self.scratch = SANDBOX_SCRATCH if self.isolation.isolated else owned_temp_dir("advisor-job-")
        self._attached: dict | None = None  # the handle of a zygote another process owns (Zygote.attach)
        self._env: dict[str, str] = {}
        self.pid: int | None = None  # on the host: the zygote interpreter itself (not bubblewrap around it)
        self._init_state()

    def _init_state(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._channel: socket.socket | None = None
        self._log: Any = None  # the zygote's own stderr: an unnamed host file no sandbox can open
        self._broken = False
        self._lock = threading.Lock()
        self.problem: str | None = None  # why it could not start or fork

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @classmethod
    def attach(cls, handle: Mapping[str, Any]) -> Zygote:
        """A client of a running zygote owned by another process, from that owner's `handle()` (its socket is an
        inherited file descriptor). `close()` then only lets go of it; a failure kills it."""
        zygote = cls.__new__(cls)  # not __init__: nothing to start, no scratch directory of its own
        zygote.preload = str(handle["preload"])
        zygote.preload_kwargs = {}
        zygote.start_timeout_s = 0.0
        zygote.isolation = Isolation(**handle["isolation"])
        zygote.readable = list(handle["readable"])
        zygote.extra_env = {}  # its environment is the owner's (`handle["env"]`)
        zygote.scratch = str(handle["scratch"])
        zygote._attached = dict(handle)
        zygote._env = dict(handle["env"])
        zygote.pid = int(handle["pid"])
        zygote._init_state()
        zygote._channel = socket.socket(fileno=os.dup(int(handle["channel_fd"])))  # its own, closed by close()
        return zygote

    def handle(self) -> dict[str, Any] | None:
        """What `Zygote.attach` needs, for a child process that inherits its `channel_fd` (`pass_fds`); None when
        the zygote is not running."""
        if not self.start() or self._channel is None or self._proc is None:
            return None
        return {
            "preload": self.preload,
            "isolation": dataclasses.asdict(self.isolation),
            "readable": self.readable,
            "scratch": self.scratch,
            "env": self._env,
            "pid": self.pid,
            "root_pid": self._proc.pid,
            "channel_fd": self._channel.fileno(),
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
        """Start it now (a worker prepares the next job's this way); False when it cannot run."""
        return self._start()

    def new_path(self, kind: str) -> str:
        """A fresh path in its scratch area for one child or one measurement (created by whoever writes there)."""
        return f"{self.scratch}/{kind}-{uuid.uuid4().hex[:16]}"

    def discard(self, path: str) -> None:
        """Remove `path` (under its scratch area) now instead of with the zygote: a long-lived zygote's /tmp is
        size-capped, so a measurement's compile caches go when it ends."""
        if not _under(path, self.scratch) or path == self.scratch:
            return
        if not self.isolation.isolated:
            shutil.rmtree(path, ignore_errors=True)
            return
        if self._alive() and self._lock.acquire(blocking=False):
            try:
                self._send({"discard": path})
                deadline = time.monotonic() + 30.0
                while time.monotonic() < deadline:
                    reply = self._receive(deadline - time.monotonic())
                    if reply is None or reply.get("discarded") == path:
                        break
            finally:
                self._lock.release()

    def fork(self, spec_fd: int, streams: ChildStreams, env: Mapping[str, str], workdir: str) -> _ForkedChild | None:
        """Start a child running the spec in `spec_fd` with exactly `env`, writing to `streams`; None when this zygote
        cannot (`problem` says why)."""
        if not self._lock.acquire(blocking=False):
            self.problem = "another child of this job's sandbox is running"
            return None  # another child of this zygote is running
        try:
            if not self._start():
                self._lock.release()
                return None
            fresh = not self._compatible(env)
            if fresh and not self.isolation.isolated:
                self._lock.release()
                return None  # spawned on the host instead, with its own environment
            request = {"fork": {"env": dict(env), "workdir": workdir, "exec": fresh}}
            self._send(request, [spec_fd, *streams.write_ends])
            reply = self._receive(timeout_s=30.0)
            if reply is None or not isinstance(reply.get("pid"), int):
                self.problem = "the zygote did not start the child"
                self._fail()
                self._lock.release()
                return None
            ns_pid = int(reply["pid"])
            # not found: a quick child may have ended and been reaped already; its exit is still reported, and
            # should it need killing, the whole sandbox is stopped instead (`_wait`)
            host_pid = _host_pid(self._root_pid(), ns_pid) if self.isolation.isolated else ns_pid
            return _ForkedChild(self, host_pid if host_pid and host_pid > 0 else -1, ns_pid)
        except BaseException:
            self._fail()
            self._lock.release()
            raise

    def close(self) -> None:
        """Stop the zygote and so everything in its sandbox (an isolated one's /tmp and /dev/shm go with it) and
        remove an unisolated one's scratch directory; an attached client only lets go of it."""
        if self._attached is not None:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
            return
        self._stop()
        if not self.isolation.isolated:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _stop(self) -> None:
        if self._attached is not None:  # the owner notices it is gone
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(self._attached["root_pid"]), signal.SIGKILL)
            return
        proc, self._proc = self._proc, None
        if proc is not None:
            doomed = descendant_pids(proc.pid)
            # an isolated zygote is its sandbox's pid 1: when it dies the kernel kills everything inside
            for pid in (self.pid, proc.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
                    os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            for pid in doomed:  # an unisolated zygote's children are in sessions of their own
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
            deadline = time.monotonic() + 10.0
            while any(running(pid) for pid in doomed) and time.monotonic() < deadline:
                time.sleep(0.01)
        for handle in (self._channel, self._log):
            with contextlib.suppress(OSError):
                handle and handle.close()  # type: ignore[func-returns-value]
        self._channel = self._log = None

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
            self.problem = "the zygote died"
            self._fail()
            return False
        self._env = _child_environment(f"{self.scratch}/zygote-cache", self.extra_env)
        spec = {
            "preload": self.preload,
            "preload_kwargs": self.preload_kwargs,
            "import_paths": _parent_import_paths(),
            "sandboxed": self.isolation.isolated,
            "scratch": self.scratch,
        }
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        spec_fd = memfd_with(json.dumps(spec).encode(), "advisor-zygote")
        filter_fd = seccomp.program_fd() if self.isolation.isolated else None
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the zygote's life
        try:
            command = self.isolation.command(
                [sys.executable, "-m", "advisor.harness.sandbox", "--zygote", str(spec_fd)],
                writable=[],
                readable=self.readable,
                seccomp_fd=filter_fd,
                as_pid_1=True,
            )
            self._proc = subprocess.Popen(
                command,
                env=self._env,
                stdin=theirs.fileno(),
                stdout=self._log,
                stderr=self._log,
                start_new_session=True,
                pass_fds=[fd for fd in (spec_fd, filter_fd) if fd is not None],
            )
        finally:
            theirs.close()
            for fd in (spec_fd, filter_fd):
                if fd is not None:
                    os.close(fd)
        self._channel = ours
        reply = self._receive(timeout_s=self.start_timeout_s)
        if reply is None or not reply.get("ready"):
            self.problem = str((reply or {}).get("reason") or "the zygote did not start")
            self._fail()
            return False
        self.pid = self._proc.pid
        if self.isolation.isolated:
            self.pid = _host_pid(self._proc.pid, int(reply.get("pid", -1)))
            if self.pid is None:
                self.problem = "the zygote could not be found from the host"
                self._fail()
                return False
        return True

    def _compatible(self, env: Mapping[str, str]) -> bool:
        names = (set(env) | set(self._env)) - _PER_CHILD_KEYS
        return all(env.get(name) == self._env.get(name) for name in names)

    def _fail(self) -> None:
        """Stop it for good."""
        self._broken = True
        self._stop()

    def _send(self, message: dict, fds: Sequence[int] = ()) -> None:
        assert self._channel is not None
        data = json.dumps(message).encode()
        if fds:
            socket.send_fds(self._channel, [data], list(fds))
        else:
            self._channel.sendall(data)

    def _receive(self, timeout_s: float) -> dict | None:
        """The zygote's next message; None on timeout or when it is gone."""
        channel = self._channel
        if channel is None:
            return None
        channel.settimeout(max(0.0, timeout_s))
        try:
            data = channel.recv(_MESSAGE_BYTES)
        except (TimeoutError, BlockingIOError, OSError):
            return None
        if not data:
            return None
        try:
            message = bounded_json.loads(data, "a message of the zygote")
        except ValueError:  # not JSON, or nested too deep (TooDeep): treated as no reply
            return None
        return message if isinstance(message, dict) else None


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
        if reply is not None and reply.get("pid") == self.ns_pid and isinstance(reply.get("returncode"), int):
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


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    with contextlib.suppress(OSError):
        while view:
            view = view[os.write(fd, view) :]
    with contextlib.suppress(OSError):
        os.close(fd)


def _child_main(spec_fd: int, result_fd: int, progress_fd: int) -> None:
    global _progress_fd
    _set_parent_death_signal()
    safe_unpickle.install()  # before the target imports torch: no module can hold the stock unpickler
    spec = json.loads(_read_all(spec_fd))
    for fd in (result_fd, progress_fd):
        os.set_inheritable(fd, False)  # the child's own subprocesses (compile workers, g++) get neither
    _progress_fd = progress_fd
    _apply_limits(spec.get("limits") or {})
    for name in ("TORCHINDUCTOR_CACHE_DIR", "ADVISOR_COMPILE_CACHE_DIR"):
        with contextlib.suppress(OSError, KeyError):
            os.makedirs(os.environ[name], exist_ok=True)
    sys.path.extend(p for p in spec.get("import_paths", []) if p not in sys.path)
    try:
        module_name, _, func_name = spec["target"].partition(":")
        func = getattr(importlib.import_module(module_name), func_name)
        result = {"status": "ok", "value": func(**spec["kwargs"])}
        payload = json.dumps(result)
    except BaseException as exc:  # noqa: BLE001 - every failure must become a status
        traceback.print_exc()
        payload = json.dumps(_failure(exc))
    sys.stdout.flush()
    sys.stderr.flush()
    _write_all(result_fd, payload.encode())
    # Skip interpreter teardown: lingering compile-worker pools or non-daemon threads must not hang the exit.
    os._exit(0)


def _zygote_main(spec_fd: int) -> None:
    """Zygote side: preload, then serve requests on the socket at fd 0: a fork request starts one child (replies its
    pid, later its return code); a discard request removes a directory of its scratch area."""
    _set_parent_death_signal()
    # As its sandbox's pid 1 the kernel delivers it no signal from inside the sandbox that it has no handler for:
    # with default dispositions (Python's SIGINT handler removed) no process of the job can kill or stop it. Not
    # dumpable: the job's processes (same uid) cannot ptrace it or open its descriptors through /proc.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)  # unisolated: orphans of its children are re-parented to it
    _prctl(_PR_SET_DUMPABLE, 0)
    safe_unpickle.install()
    spec = json.loads(_read_all(spec_fd))
    sys.path.extend(p for p in spec.get("import_paths", []) if p not in sys.path)
    channel = socket.socket(fileno=0)
    scratch = str(spec["scratch"])

    def reply(message: dict) -> None:
        with contextlib.suppress(OSError):
            channel.sendall(json.dumps(message).encode())

    try:
        os.makedirs(scratch, exist_ok=True)
        module_name, _, func_name = spec["preload"].partition(":")
        before = dict(os.environ)
        getattr(importlib.import_module(module_name), func_name)(**spec.get("preload_kwargs", {}))
    except BaseException as exc:  # noqa: BLE001 - reported, then the parent spawns instead
        traceback.print_exc()
        reply({"ready": False, "reason": f"{type(exc).__name__}: {exc}"})
        os._exit(1)
    # what the preload set (e.g. TORCH_DEVICE_BACKEND_AUTOLOAD=0) stays set in every child and its subprocesses
    added = {k: v for k, v in os.environ.items() if before.get(k) != v}
    reply({"ready": True, "pid": os.getpid()})
    current: tuple[int, str] | None = None  # the child being waited for, and its work directory
    while True:
        ready, _, _ = select.select([channel], [], [], _POLL_S if current is not None else 1.0)
        current = _reap(current, reply)
        if not ready:
            continue
        try:
            data, fds, _flags, _address = socket.recv_fds(channel, _MESSAGE_BYTES, 8)
        except OSError:
            os._exit(0)
        if not data:
            os._exit(0)  # the parent closed its end
        try:
            request = json.loads(data)
        except ValueError:
            request = {}
        if isinstance(request.get("discard"), str) and _under(request["discard"], scratch):
            shutil.rmtree(request["discard"], ignore_errors=True)
            reply({"discarded": request["discard"]})
        elif isinstance(request.get("fork"), dict) and len(fds) == 4 and current is None:
            current = _fork_child(request["fork"], fds, added, channel.fileno())
            reply({"pid": current[0]})
        else:
            reply({"busy": current is not None})
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _reap(current: tuple[int, str] | None, reply: Callable[[dict], None]) -> tuple[int, str] | None:
    """Reap every exited child (orphans included: the zygote is their subreaper or pid 1); report `current`'s exit
    and remove its work directory."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return current
        if pid == 0:
            return current
        if current is not None and pid == current[0]:
            shutil.rmtree(current[1], ignore_errors=True)
            reply({"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})
            current = None


def _fork_child(request: dict, fds: list[int], added: Mapping[str, str], channel: int) -> tuple[int, str]:
    spec_fd, output_fd, progress_fd, result_fd = fds
    workdir = str(request["workdir"])
    ready_r, ready_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(ready_r)
            os.close(channel)
            os.setsid()
            _prctl(_PR_SET_DUMPABLE, 1)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.write(ready_w, b"1")  # in its own session now: the parent may kill its group
            os.close(ready_w)
            os.dup2(output_fd, 1)
            os.dup2(output_fd, 2)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.close(output_fd)
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in dict(request["env"]).items()})
            os.environ.update(added)
            os.makedirs(workdir, exist_ok=True)
            if request.get("exec"):  # another environment: a fresh interpreter, in this same sandbox
                for fd in (spec_fd, result_fd, progress_fd):
                    os.set_inheritable(fd, True)
                argv = [sys.executable, "-m", "advisor.harness.sandbox", str(spec_fd), str(result_fd), str(progress_fd)]
                os.execve(sys.executable, argv, dict(os.environ))
            _child_main(spec_fd, result_fd, progress_fd)
        finally:
            os._exit(1)
    os.close(ready_w)
    os.read(ready_r, 1)
    os.close(ready_r)
    return pid, workdir


if __name__ == "__main__":
    # Run from the imported module, not __main__, so targets' `StageError` is the same class.
    from advisor.harness.sandbox import _child_main as child_main
    from advisor.harness.sandbox import _zygote_main as zygote_main

    if sys.argv[1] == "--zygote":
        zygote_main(int(sys.argv[2]))
    else:
        child_main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
