"""OS isolation of the children that touch an uploaded model: bubblewrap namespaces, or explicitly none.

A model file can act on the host without any pickle: TorchScript ops such as `torch.from_file(path, True, n)`
read and write files by path. Only the operating system can stop that, so every child that loads a model
(inspection, each measurement, the zygote they fork from, the capability probe) is started under
bubblewrap (`bwrap`) with:

- its own user namespace, uid/gid 65534 inside, every capability dropped;
- its own PID, IPC, UTS and network namespaces (no network, it cannot see the worker or its environment);
- a read-only view of only what it needs: the system directories, the interpreter, the venv, the project,
  the model file(s) of this job and, on NPU/CUDA nodes, the device nodes and driver directories;
- the root, `/etc`, `/dev` and every system path read-only; writable only: a private `/tmp` and `/dev/shm`, each
  a tmpfs with a size cap (`ADVISOR_SANDBOX_TMP_MB`, `ADVISOR_SANDBOX_SHM_MB`: every file together, not one file),
  and - for a spawned child only - the host directories its caller names (its own work directory);
- a seccomp filter (advisor.harness.seccomp): no ptrace, no process_vm_*, no pidfd_getfd, no kernel keyrings
  (add_key, keyctl, request_key); no nested user namespace;
- a session keyring of its own (advisor.harness.session_keyring launches bubblewrap after joining a fresh one), freed
  when the sandbox's last process ends, and `/proc/keys` and `/proc/key-users` masked (as container runtimes do);
- `--die-with-parent` and `--new-session`. A zygote runs as the sandbox's pid 1 (`as_pid_1`): no process inside
  can kill or stop it, and when it ends the kernel kills everything in the sandbox and its tmpfs memory is freed.

Torch-free: the API server imports nothing from here, workers and the CLI do.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

IsolationKind = Literal["bubblewrap", "none"]
ISOLATION_ENV = "ADVISOR_ISOLATION"  # bubblewrap | none | auto (default: bubblewrap where it works)
EXTRA_READ_ONLY_ENV = "ADVISOR_SANDBOX_READ_ONLY"  # os.pathsep-separated extra read-only paths
EXTRA_DEVICES_ENV = "ADVISOR_SANDBOX_DEVICES"  # os.pathsep-separated extra device nodes (globs allowed)
TMP_MB_ENV = "ADVISOR_SANDBOX_TMP_MB"  # the size cap of a sandbox's /tmp (a job's scratch and compile caches)
SHM_MB_ENV = "ADVISOR_SANDBOX_SHM_MB"  # the size cap of a sandbox's /dev/shm
DEFAULT_TMP_MB = 4096  # a BERT-base job: ~0.5 GB of ONNX file and a few hundred MB of compile caches
DEFAULT_SHM_MB = 1024
SANDBOX_UID = 65534

# System directories every child needs read-only (interpreter libraries, the C compiler Inductor runs).
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only these parts of /etc: the whole of it would include root-readable secrets such as /etc/shadow.
_ETC_ENTRIES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/ascend_install.info",
)
# Ascend NPU nodes: the device nodes and the driver/toolkit directories (read-only), when present.
_NPU_DEVICES = ("/dev/davinci*", "/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
_NPU_READ_ONLY = ("/usr/local/Ascend", "/usr/local/dcmi", "/usr/local/bin/npu-smi", "/etc/ascend_install.info")
_CUDA_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps")
# Of the project checkout only the code a child imports (tests/ for the test doubles and test targets).
_PROJECT_PACKAGES = ("advisor", "workers", "tests", "benchmarks")
# What /proc would tell a sandbox of the host's keys (descriptions of every key its uid may view, quotas): empty.
_MASKED_PROC = ("/proc/keys", "/proc/key-users")
_KEYRING_LAUNCHER = str(Path(__file__).with_name("session_keyring.py"))


class IsolationUnavailable(RuntimeError):
    """Isolation was required but cannot be set up here; `str()` says why and what to do."""


@dataclass(frozen=True)
class Isolation:
    """How children are confined. `kind="none"` runs them as plain processes (limits still apply)."""

    kind: IsolationKind
    bwrap: str | None = None
    version: str | None = None
    note: str | None = None  # why there is none, or what is not enforced

    @property
    def isolated(self) -> bool:
        return self.kind == "bubblewrap"

    @property
    def has_0_8(self) -> bool:
        """bubblewrap 0.8 or newer: size caps for its tmpfs (`--size`) and no nested user namespaces
        (`--disable-userns`). Older ones (Ubuntu 22.04's 0.6) still isolate, without those two; the note says so."""
        try:
            return tuple(int(part) for part in (self.version or "0").split(".")[:2]) >= (0, 8)
        except ValueError:
            return False

    def describe(self) -> dict[str, str | None]:
        """What a worker registers and the dashboard shows."""
        return {"kind": self.kind, "version": self.version, "note": self.note}

    def command(
        self,
        argv: Sequence[str],
        *,
        writable: Iterable[str],
        readable: Iterable[str] = (),
        seccomp_fd: int | None = None,
        as_pid_1: bool = False,
    ) -> list[str]:
        """`argv` wrapped so that it runs confined; unchanged when there is no isolation.

        `seccomp_fd`: advisor.harness.seccomp's program, which the caller passes to bubblewrap (`pass_fds`).
        `as_pid_1`: `argv` is the sandbox's pid 1 (a zygote) instead of bubblewrap's own reaper."""
        if not self.isolated:
            return list(argv)
        assert self.bwrap is not None
        args = [
            *keyring_launcher(),
            self.bwrap,
            "--unshare-user",
            "--uid",
            str(SANDBOX_UID),
            "--gid",
            str(SANDBOX_UID),
            *(["--disable-userns"] if self.has_0_8 else []),
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-net",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "npu-advisor-sandbox",
            "--proc",
            "/proc",
            *(arg for masked in _MASKED_PROC for arg in ("--ro-bind", os.devnull, masked)),
            "--dev",
            "/dev",
            *(["--size", str(_size_mb(SHM_MB_ENV, DEFAULT_SHM_MB) << 20)] if self.has_0_8 else []),
            "--tmpfs",
            "/dev/shm",
            *(["--size", str(_size_mb(TMP_MB_ENV, DEFAULT_TMP_MB) << 20)] if self.has_0_8 else []),
            "--tmpfs",
            "/tmp",
        ]
        for path in _existing(_SYSTEM_DIRS + _ETC_ENTRIES):
            args += ["--ro-bind", path, path]
        for path in _read_only_paths(readable):
            args += ["--ro-bind", path, path]
        for device in _device_nodes():
            args += ["--dev-bind", device, device]
        for path in dict.fromkeys(os.path.abspath(p) for p in writable):
            args += ["--bind", path, path]
        # everything bubblewrap created on its own root and /dev becomes read-only (binds keep their own flags)
        args += ["--remount-ro", "/dev", "--remount-ro", "/"]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        if as_pid_1:
            args.append("--as-pid-1")
        args += ["--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--"]
        return args + list(argv)

    def returncode(self, code: int) -> int:
        """bubblewrap reports a child killed by signal N as exit code 128+N; Popen's convention is -N."""
        if self.isolated and 128 < code < 128 + 65:
            return -(code - 128)
        return code


def keyring_launcher() -> list[str]:
    """What goes before bubblewrap: an interpreter joining a fresh session keyring, then exec'ing it."""
    return [sys.executable, "-I", "-S", _KEYRING_LAUNCHER]


def _size_mb(name: str, default: int) -> int:
    """A positive size in MiB from the environment variable `name`, else `default`."""
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


NO_ISOLATION = Isolation("none", note="isolation switched off (--no-isolation / ADVISOR_ISOLATION=none)")


def resolve_isolation(mode: str | None = None) -> Isolation:
    """`mode` (default $ADVISOR_ISOLATION, else "auto"): "bubblewrap" must work or raises
    `IsolationUnavailable`; "none" is no isolation; "auto" is bubblewrap where it works, else none with a note."""
    mode = (mode or os.environ.get(ISOLATION_ENV) or "auto").strip().lower()
    if mode == "none":
        return NO_ISOLATION
    if mode not in ("bubblewrap", "auto"):
        raise IsolationUnavailable(f"unknown isolation {mode!r}: use bubblewrap, none or auto")
    try:
        return probe_bubblewrap()
    except IsolationUnavailable as exc:
        if mode == "bubblewrap":
            raise
        return Isolation("none", note=f"not isolated: {exc}")


@functools.lru_cache(maxsize=1)
def _probe_cached(bwrap: str) -> Isolation:
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.split()
    candidate = Isolation("bubblewrap", bwrap, version[-1] if version else None)
    from advisor.harness import seccomp

    filter_fd = seccomp.program_fd()
    check = candidate.command(
        [sys.executable, "-c", "import os; print(os.getuid())"], writable=[], seccomp_fd=filter_fd, as_pid_1=True
    )
    try:
        done = subprocess.run(
            check,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            pass_fds=() if filter_fd is None else (filter_fd,),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IsolationUnavailable(f"bubblewrap could not start a sandbox ({exc})") from exc
    finally:
        if filter_fd is not None:
            os.close(filter_fd)
    if done.returncode != 0 or done.stdout.strip() != str(SANDBOX_UID):
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise IsolationUnavailable(
            f"bubblewrap could not start a sandbox ({detail}); in a container it needs user namespaces "
            "(e.g. docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined, or a seccomp "
            "profile that allows clone/unshare of user namespaces)"
        )
    notes = []
    if not candidate.has_0_8:
        notes.append(
            f"bubblewrap {candidate.version} is older than 0.8: /tmp and /dev/shm are not size-capped and nested user "
            "namespaces are not refused; install bubblewrap 0.8 or newer"
        )
    if os.geteuid() == 0:
        notes.append(
            "worker runs as root: the sandbox is uid 65534 without capabilities, but the kernel does not "
            "apply the process-count limit to it; run the worker as a dedicated user for that"
        )
    return Isolation("bubblewrap", bwrap, candidate.version, "; ".join(notes) or None)


def probe_bubblewrap() -> Isolation:
    """Bubblewrap, checked by starting the interpreter in a real sandbox; raises `IsolationUnavailable`."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise IsolationUnavailable("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    return _probe_cached(bwrap)


# ------------------------------------------------------------------ what a child may see
def _existing(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if os.path.lexists(p)]


def _interpreter_paths() -> list[str]:
    """The interpreter's prefixes (venv and base) and, of the project itself, only its code packages - never the
    whole checkout (it may hold the server's data directory), nor a script's folder such as /tmp or a home.
    Anything else a child must import goes in $ADVISOR_SANDBOX_READ_ONLY."""
    project_root = os.path.realpath(Path(__file__).resolve().parents[2])
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    resolved = {os.path.join(project_root, name) for name in _PROJECT_PACKAGES}
    for path in paths:
        resolved |= {os.path.realpath(path), os.path.abspath(path)}
    return sorted(resolved)


def _read_only_paths(readable: Iterable[str]) -> list[str]:
    extra = [p for p in os.environ.get(EXTRA_READ_ONLY_ENV, "").split(os.pathsep) if p]
    candidates = [*_interpreter_paths(), *_NPU_READ_ONLY, *extra, *(os.path.abspath(p) for p in readable)]
    kept = sorted(set(_existing(candidates)), key=len)
    # a path under another bound path is already visible; binding it again would only add mounts
    return [p for p in kept if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in kept)]


def _device_nodes() -> list[str]:
    extra = [p for p in os.environ.get(EXTRA_DEVICES_ENV, "").split(os.pathsep) if p]
    patterns = [*_NPU_DEVICES, *_CUDA_DEVICES, *extra]
    return sorted({match for pattern in patterns for match in glob.glob(pattern)})
