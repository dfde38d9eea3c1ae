"""The worker's warm sandbox (workers.warm_sandbox): one zygote kept between jobs, and nothing of one job reaching
the next - an attacker's job leaves processes, files and IPC objects behind and tries to read the zygote; the next
job must see none of it, and the zygote must still be the same one (else the test would only show a restart)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from advisor.harness.isolation import IsolationUnavailable, probe_bubblewrap
from advisor.harness.process_tree import descendant_pids
from advisor.harness.sandbox import Zygote, run_in_sandbox
from workers.warm_sandbox import WarmSandbox

HERE = "tests.test_warm_sandbox"


# ------------------------------------------------------------------ targets (run inside the sandbox)
def leave_traces(marker: str) -> dict:
    """What a hostile job leaves behind: a daemon in a session of its own, files in every writable place, a System V
    shared memory segment, a POSIX message queue holding a message."""
    scratch = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parents[1]
    written = []
    for directory in ("/tmp", "/dev/shm", str(scratch)):
        with contextlib.suppress(OSError):
            Path(directory, marker).write_text("left by the last job")
            written.append(str(Path(directory, marker)))
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    segment = libc.shmget(0, 4096, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
    queue = _librt().mq_open(f"/{marker}".encode(), os.O_CREAT | os.O_WRONLY, 0o600, None)
    sent = queue >= 0 and _librt().mq_send(queue, b"left by the last job", 20, 0) == 0
    read_end, write_end = os.pipe()
    if os.fork() == 0:  # the daemon: a session of its own, a grandchild re-parented away from the child
        os.setsid()
        if os.fork() == 0:
            os.write(write_end, str(os.getpid()).encode())
            time.sleep(300)
        os._exit(0)
    daemon = int(os.read(read_end, 32))
    return {"written": written, "segment": segment, "daemon": daemon, "queue_sent": sent}


def _librt() -> ctypes.CDLL:
    return ctypes.CDLL("librt.so.1", use_errno=True)


def look_for_traces(marker: str, daemon: int, model: str) -> dict:
    scratch = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parents[1]
    found = [str(p) for d in ("/tmp", "/dev/shm", str(scratch)) for p in Path(d).rglob(marker)]
    try:
        os.kill(daemon, 0)
        daemon_alive = True
    except ProcessLookupError:
        daemon_alive = False
    segments = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    queue = _librt().mq_open(f"/{marker}".encode(), os.O_RDONLY, 0, None)
    return {
        "found": found,
        "daemon_alive": daemon_alive,
        "segments": len(segments),
        "queue_open": queue >= 0,
        "model_visible": Path(model).exists(),
    }


def read_the_zygote() -> dict:
    """Try to read the zygote's memory and environment, and to ptrace it (all as the same uid)."""
    zygote = os.getppid()
    tried = {}
    for name in ("mem", "environ"):
        try:
            with open(f"/proc/{zygote}/{name}", "rb") as fh:
                fh.read(16)
            tried[name] = "read"
        except OSError as exc:
            tried[name] = type(exc).__name__
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    tried["ptrace"] = "attached" if libc.ptrace(16, zygote, None, None) == 0 else "refused"  # PTRACE_ATTACH
    return tried


def kill_the_zygote() -> None:
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(5)


def sleep_long() -> None:
    time.sleep(120)


def read_file(path: str) -> str:
    return Path(path).read_text()


def _installed_headers() -> Path:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return Path(default_cache_dir(), "precompiled_headers")


def tamper_with_headers() -> int:
    """Overwrite the sandbox's copy of the trusted precompiled header: the next job would compile against it."""
    files = [p for p in _installed_headers().rglob("*") if p.is_file()]
    for path in files:
        path.write_bytes(b"poisoned by the last job")
    return len(files)


def header_digest(directory: str | None = None) -> dict[str, str]:
    import hashlib

    root = Path(directory) if directory else _installed_headers()
    skip = {"locks", ".vec-isa", ".vec-isa-probe"}
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file() and not skip & set(p.relative_to(root).parts)
    }


# ------------------------------------------------------------------ fixtures and helpers
@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory):
    try:
        probe_bubblewrap()
    except IsolationUnavailable as exc:
        pytest.skip(f"needs a working bubblewrap sandbox: {exc}")
    sandbox = WarmSandbox("cpu", tmp_path_factory.mktemp("worker"), inductor=False)
    assert sandbox.start()
    yield sandbox
    sandbox.close()


def job(warm: WarmSandbox, name: str, target: str, kwargs: dict, **options) -> object:
    """One job's child, forked the way a job's runner does it: through an attached client of the warm zygote."""
    handle, _fds = warm.handle()
    assert handle is not None
    zygote = Zygote.attach(handle)
    inbox = warm.job_inbox(name)
    model = inbox / "model"
    model.write_text(f"{name}'s model")
    result = run_in_sandbox(
        f"{HERE}:{target}", kwargs, zygote=zygote, timeout_s=60, memory_limit_mb=None, readable=[str(model)], **options
    )
    assert zygote.covers([str(model)], []), "the child must have been forked from the warm zygote"
    return result


# ------------------------------------------------------------------ tests
def test_nothing_a_job_leaves_behind_reaches_the_next_job(warm: WarmSandbox) -> None:
    starts = warm.starts
    left = job(warm, "job-a", "leave_traces", {"marker": "planted-by-a"})
    assert left.status == "ok", left
    assert len(left.value["written"]) >= 2 and left.value["segment"] >= 0  # /tmp and scratch at least
    assert left.value["queue_sent"]
    model_a = str(warm.inbox / "job-a" / "model")
    warm.after_job()
    seen = job(
        warm, "job-b", "look_for_traces", {"marker": "planted-by-a", "daemon": left.value["daemon"], "model": model_a}
    )
    assert seen.status == "ok", seen
    assert seen.value == {
        "found": [],
        "daemon_alive": False,
        "segments": 0,
        "queue_open": False,
        "model_visible": False,
    }
    assert warm.starts == starts  # the same zygote, made clean - not a new one
    warm.after_job()


def test_a_job_cannot_read_or_trace_the_zygote_it_was_forked_from(warm: WarmSandbox) -> None:
    tried = job(warm, "job-c", "read_the_zygote", {})
    assert tried.status == "ok", tried
    assert tried.value == {"mem": "PermissionError", "environ": "PermissionError", "ptrace": "refused"}
    warm.after_job()


def test_the_inbox_is_read_only_and_holds_only_the_current_job(warm: WarmSandbox) -> None:
    first = job(warm, "job-d", "read_file", {"path": str(warm.inbox / "job-d" / "model")})
    assert first.status == "ok" and first.value == "job-d's model"
    written = job(warm, "job-d", "leave_traces", {"marker": "x"})
    assert not any(path.startswith(str(warm.inbox)) for path in written.value["written"])
    warm.after_job()
    assert list(warm.inbox.iterdir()) == []


def test_a_job_that_kills_the_zygote_costs_the_next_job_only_a_restart(warm: WarmSandbox) -> None:
    starts = warm.starts
    killed = job(warm, "job-e", "kill_the_zygote", {})
    assert killed.status in ("crashed", "oom"), killed  # killed with its zygote
    warm.after_job()
    after = job(warm, "job-f", "read_file", {"path": str(warm.inbox / "job-f" / "model")})
    assert after.status == "ok", after
    assert warm.starts == starts + 1
    warm.after_job()


def test_a_stopped_runners_child_is_killed_and_the_zygote_serves_the_next_job(warm: WarmSandbox) -> None:
    """The agent stops a job's runner (cancel, lost lease) while a child of the zygote runs: the child must not
    outlive the job, and the reply the runner never read must not confuse the next one."""
    starts = warm.starts
    handle, fds = warm.handle()
    runner_code = (
        "import json, sys; from advisor.harness.sandbox import Zygote, run_in_sandbox; "
        "z = Zygote.attach(json.loads(sys.argv[1])); "
        f"run_in_sandbox('{HERE}:sleep_long', {{}}, zygote=z, timeout_s=120, memory_limit_mb=None)"
    )
    runner = subprocess.Popen([sys.executable, "-c", runner_code, json.dumps(handle)], pass_fds=fds)
    deadline = time.monotonic() + 30
    while not descendant_pids(handle["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    children = descendant_pids(handle["pid"])
    assert children, "the runner's child never started"
    runner.kill()
    runner.wait()
    warm.after_job()
    assert not descendant_pids(handle["pid"]), "the stopped job's child outlived it"
    after = job(warm, "job-g", "read_file", {"path": str(warm.inbox / "job-g" / "model")})
    assert after.status == "ok", after
    assert warm.starts == starts
    warm.after_job()


def test_the_next_job_compiles_against_a_fresh_copy_of_the_trusted_header(tmp_path: Path) -> None:
    """The reset empties the sandbox's /tmp, where the zygote put its copy of the trusted precompiled header; the
    refresh copies it again from the read-only trusted build - not a copy the last job could have poisoned, and
    not nothing (every compile would then rebuild it: ~5-15 s per variant)."""
    from advisor.harness.inductor_headers import trusted_headers
    from advisor.harness.isolation import resolve_isolation

    sandbox = WarmSandbox("cpu", tmp_path, inductor=True)
    try:
        if not sandbox.start():
            pytest.fail("the warm sandbox did not start")
        trusted = trusted_headers(resolve_isolation())
        assert trusted is not None
        expected = header_digest(trusted)
        first = job(sandbox, "job-h", "header_digest", {})
        assert first.status == "ok" and first.value == expected and expected
        poisoned = job(sandbox, "job-h", "tamper_with_headers", {})
        assert poisoned.status == "ok" and poisoned.value > 0
        sandbox.after_job()
        second = job(sandbox, "job-i", "header_digest", {})
        assert second.status == "ok" and second.value == expected
        assert sandbox.starts == 1
    finally:
        sandbox.close()
