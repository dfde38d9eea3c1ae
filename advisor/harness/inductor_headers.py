"""Inductor's precompiled C++ header, built once by trusted code and handed to every sandboxed job.

Inductor precompiles the header its CPU kernels include (~155 MB, ~8-11 s of g++) into
`<tempfile.gettempdir()>/torchinductor_<user>/precompiled_headers` and reuses it across processes. That
directory ignores TORCHINDUCTOR_CACHE_DIR. An unconfined job finds it in the host's /tmp, warm from earlier
jobs; a sandboxed job has a private /tmp and used to rebuild it for every analysis (the isolation cost in
benchmarks/RESULTS.md). Sharing the host's copy with sandboxes would be a channel between jobs: one upload
could replace the header every later job compiles against.

So the header is built here by a sandboxed child that compiles only a fixed function of ours (no upload is
involved), kept in a per-user cache keyed by torch and compiler version, bound read-only into each job's
sandbox, and copied by the job's zygote into its private /tmp before any model is loaded. A job that needs
another header (other flags) still builds it, in its own copy. Nothing a job writes reaches the cache.

The same build keeps the test programs of Inductor's once-per-process CPU-feature probe (`pick_vec_isa`: one
g++ build per vector ISA the CPU advertises, ~14 s on a 2-core node) and each check's answer. A CPU job's zygote
runs the probe (`probe_vec_isa`) replaying those answers on a CPU with the same flags (advisor.harness.vec_isa_checks:
loading each test program in a fresh interpreter cost ~1 s of CPU per job) and loading copies of the programs for
any other check, and every variant forked from the zygote inherits the answer. Without this each variant paid the
probe inside its "cold compile", a cost of the machine that a long-running process pays once, not of the model.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from advisor.harness import vec_isa_checks
from advisor.harness.isolation import Isolation

CACHE_ENV = "ADVISOR_INDUCTOR_HEADER_CACHE"  # where the trusted headers are kept (default ~/.cache/npu-advisor/…)
BUILD_TIMEOUT_S = 600.0
BUILD_MEMORY_MB = 16384
BUILD_RECIPE = 5  # bump when build_into compiles or records something else: caches built before are not reused
_COMPLETE = ".complete"
VEC_ISA_FILE = ".vec-isa"  # the vector ISA Inductor picked for the build: a job that picks another needs another header
VEC_ISA_PROBE = ".vec-isa-probe"  # the probe's test programs, an Inductor cache directory of their own
_HEADERS = "precompiled_headers"
# kept with the trusted build for the zygote's CPU probe, never copied into a job's cache
NOT_INSTALLED = ("locks", VEC_ISA_FILE, VEC_ISA_PROBE, vec_isa_checks.CHECKS_FILE)
log = logging.getLogger("npu_advisor.inductor_headers")


def trusted_headers(isolation: Isolation) -> str | None:
    """The directory of trusted precompiled headers for sandboxed jobs, built on first use; None when there is
    no sandbox (unconfined children share the host's own cache) or the build failed (each job builds its own)."""
    if not isolation.isolated:
        return None
    target = _cache_root() / _version_key()
    if (target / _COMPLETE).exists():
        return str(target / _HEADERS)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{target.name}.lock", "a") as lock:
            # one build per node: workers starting jobs together on a fresh node wait for it and use its copy
            fcntl.flock(lock, fcntl.LOCK_EX)
            if (target / _COMPLETE).exists():
                return str(target / _HEADERS)
            return _build(isolation, target)
    except OSError as exc:
        log.warning("could not build Inductor's precompiled header once for all jobs (%s); each job builds it", exc)
        return None


def install(source: str | None) -> None:
    """In a sandboxed zygote, before any model: copy the trusted headers into this sandbox's private /tmp,
    where Inductor looks for them. Copies, not links, so nothing done here reaches the trusted files."""
    if not source or not os.path.isdir(source):
        return
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    destination = os.path.join(default_cache_dir(), _HEADERS)
    shutil.copytree(source, destination, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*NOT_INSTALLED))


def probe_vec_isa(source: str | None) -> str:
    """In a CPU job's zygote, before any model: run Inductor's CPU-feature probe, so forked children inherit the
    answer. With a trusted build, its recorded answers are replayed on a CPU with the same flags (no test program
    built or loaded: advisor.harness.vec_isa_checks) and any other check loads a throwaway copy of its test programs
    instead of compiling them; without one (an unconfined job, or a trusted build that failed) it builds them here,
    once per job instead of once per variant (~4.7 s each on a 2-core node). Returns the ISA picked."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    if not source or not os.path.isdir(os.path.join(source, VEC_ISA_PROBE)):
        return str(pick_vec_isa())
    scratch = tempfile.mkdtemp(prefix="advisor-vec-isa-")
    try:
        probe_cache = os.path.join(scratch, "cache")
        shutil.copytree(os.path.join(source, VEC_ISA_PROBE), probe_cache)
        with _inductor_cache_dir(probe_cache), vec_isa_checks.replaying(vec_isa_checks.load(source)):
            return str(pick_vec_isa())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def build_into(out_dir: str) -> int:
    """Sandbox target: compile a fixed function with Inductor on CPU, then copy the headers it precompiled
    into `out_dir`. Returns how many files were copied."""
    import torch
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    def kernels(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # pointwise, reductions over either dim and a matmul: Inductor builds one header per kernel build command,
        # and every CPU kernel of one graph shares that command, so one compile builds it (a second compile of
        # other shapes only added a g++ run against the same header)
        return torch.relu(x @ x.T).sin().sum(dim=1), (x * 3).cos().sum(dim=0)

    from torch._inductor.cpu_vec_isa import pick_vec_isa

    probe_cache = os.path.join(out_dir, _HEADERS, VEC_ISA_PROBE)
    answers: dict[str, bool] = {}
    # the probe's test programs alone, for probe_vec_isa, and its answers for zygotes to replay
    with _inductor_cache_dir(probe_cache), vec_isa_checks.recording(answers):
        vec_isa = str(pick_vec_isa())
    shutil.rmtree(os.path.join(probe_cache, "locks"), ignore_errors=True)
    torch.compile(kernels)(torch.randn(8, 16))

    source = os.path.join(default_cache_dir(), _HEADERS)
    shutil.copytree(source, os.path.join(out_dir, _HEADERS), ignore=shutil.ignore_patterns("locks"), dirs_exist_ok=True)
    Path(out_dir, _HEADERS, VEC_ISA_FILE).write_text(vec_isa)
    vec_isa_checks.save(os.path.join(out_dir, _HEADERS), answers)
    return sum(len(files) for _, _, files in os.walk(out_dir))


@contextlib.contextmanager
def _inductor_cache_dir(directory: str) -> Iterator[None]:
    """Point Inductor's code cache at `directory` for a while. Inductor reads TORCHINDUCTOR_CACHE_DIR on each use (and
    writes its default back into the environment when unset), so restoring the variable restores the cache dir."""
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = before


def _build(isolation: Isolation, target: Path) -> str | None:
    from advisor.harness.sandbox import run_in_sandbox

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        result = run_in_sandbox(
            "advisor.harness.inductor_headers:build_into",
            {"out_dir": str(staging)},
            timeout_s=BUILD_TIMEOUT_S,
            memory_limit_mb=BUILD_MEMORY_MB,
            writable=[str(staging)],
            isolation=isolation,
        )
        if result.status != "ok" or not (staging / _HEADERS).is_dir():
            log.warning(
                "building Inductor's precompiled header failed (%s: %s); each job builds its own",
                result.status,
                result.reason,
            )
            return None
        (staging / _COMPLETE).touch()
        try:
            staging.rename(target)
        except OSError:  # another process finished first: use its copy
            if not (target / _COMPLETE).exists():
                raise
        return str(target / _HEADERS)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "npu-advisor" / "inductor-headers"


def _version_key() -> str:
    """Build recipe, torch (version and where it is installed: Inductor's header hash covers the include paths, so a
    header built from another venv never matches), Python and C++ compiler versions."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    compiler = os.environ.get("CXX") or "c++"
    try:
        compiler_version = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        compiler_version = "unknown"
    spec = importlib.util.find_spec("torch")
    torch_path = os.path.dirname(spec.origin) if spec and spec.origin else "none"
    versions = f"{BUILD_RECIPE}|{torch_version}|{torch_path}|{sys.version}|{compiler_version}"
    digest = hashlib.sha256(versions.encode()).hexdigest()[:16]
    return f"torch-{torch_version}-{digest}"


if __name__ == "__main__":  # `python -m advisor.harness.inductor_headers`: build it now (a node's setup, a test run)
    from advisor.harness.isolation import resolve_isolation

    built = trusted_headers(resolve_isolation())
    print(built or "no trusted header: jobs run unconfined here, or the build failed (each job then builds its own)")
