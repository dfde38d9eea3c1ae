"""One job can never reach another (workers.job_sandbox, advisor.harness.sandbox/isolation/seccomp).

Each test runs what a hostile job would run - Python code inside the sandbox, stronger than any TorchScript op - and
then looks from the next job, or from the host, for anything it could have left or reached: files in every place it
could try to write (the root, /etc, /dev, /root, /tmp, /dev/shm, the scratch area), a daemon, IPC objects, the
sandbox's pid 1 and its channel to the worker, the host files behind symlinks, the memory of files it left."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import time
from pathlib import Path

import pytest

from advisor.harness.isolation import resolve_isolation
from advisor.harness.process_tree import running
from advisor.harness.sandbox import SandboxResult, Zygote, run_in_sandbox
from tests.support import keyrings
from tests.support.bubblewrap import require_bubblewrap
from workers import job_sandbox
from workers.job_sandbox import JobSandbox, JobSandboxes

HERE = "tests.workers.test_job_sandbox"
# every place a job could try to leave something for a later job (the attack wrote /etc/ld.so.preload and a
# library under /dev; the scratch area is the job's own work directory inside its sandbox)
PLACES = ("/", "/etc", "/root", "/dev", "/usr", "/tmp", "/dev/shm", "/tmp/advisor-job")
_PTRACE_ATTACH = 16


# ------------------------------------------------------------------ targets (run inside the sandbox)
def _attempt(action) -> str:  # noqa: ANN001 - a zero-argument callable
    try:
        action()
    except OSError as exc:
        return type(exc).__name__ if exc.errno is None else os.strerror(exc.errno)
    return "allowed"


def leave_traces(marker: str) -> dict:
    """Write the marker everywhere, start a daemon in a session of its own, leave IPC objects behind."""
    import sys

    import advisor

    written = {}
    # what every job sees and so could carry something from one job to the next: the project's code, the venv
    for name, place in (("project", os.path.dirname(advisor.__file__)), ("venv", sys.prefix)):
        written[name] = _attempt(lambda place=place: Path(place, marker).write_text("left by the last job"))
    for place in PLACES:
        target = Path(place, "ld.so.preload" if place == "/etc" else marker)
        written[place] = _attempt(lambda target=target: target.write_text("left by the last job"))
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    segment = libc.shmget(0, 4096, 0o1000 | 0o600)  # IPC_PRIVATE | IPC_CREAT
    read_end, write_end = os.pipe()
    if os.fork() == 0:  # the daemon: a session of its own, a grandchild re-parented away from the child
        os.setsid()
        if os.fork() == 0:
            os.write(write_end, str(os.getpid()).encode())
            time.sleep(300)
        os._exit(0)
    daemon = int(os.read(read_end, 32))
    return {"written": written, "segment": segment, "daemon": daemon}


def look_for_traces(marker: str, daemon: int, model: str) -> dict:
    found = [str(Path(place, marker)) for place in PLACES if Path(place, marker).exists()]
    if Path("/etc/ld.so.preload").exists():
        found.append("/etc/ld.so.preload")
    try:
        os.kill(daemon, 0)
        daemon_alive = True
    except ProcessLookupError:
        daemon_alive = False
    segments = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {
        "found": found,
        "daemon_alive": daemon_alive,
        "segments": len(segments),
        "earlier_model_visible": Path(model).exists(),
        "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    }


def fill(directory: str, chunk_mb: int, chunks: int) -> dict:
    """Write many files below the one-file limit until the place is full; how much went in."""
    written = 0
    block = b"\0" * (chunk_mb << 20)
    for index in range(chunks):
        try:
            with open(Path(directory, f"fill-{index}"), "wb") as fh:
                fh.write(block)
            written += chunk_mb
        except OSError as exc:
            return {"written_mb": written, "stopped_by": os.strerror(exc.errno or 0)}
    return {"written_mb": written, "stopped_by": None}


def touch_pid_1() -> dict:
    """Everything a job's process might try against its sandbox's pid 1 (the zygote) and its channel."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    tried = {}
    tried["ptrace_attach"] = "attached" if libc.ptrace(_PTRACE_ATTACH, 1, None, None) == 0 else "refused"
    local = (ctypes.c_char * 16)()
    iov_local = (ctypes.c_void_p * 2)(ctypes.addressof(local), 16)
    iov_remote = (ctypes.c_void_p * 2)(0x400000, 16)
    read = libc.process_vm_readv(1, iov_local, 1, iov_remote, 1, 0)
    tried["process_vm_readv"] = "read" if read >= 0 else os.strerror(ctypes.get_errno())
    for name in ("fd/0", "mem", "environ"):
        tried[f"open /proc/1/{name}"] = _attempt(lambda name=name: open(f"/proc/1/{name}", "rb").close())
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGSTOP):
        with contextlib.suppress(OSError):
            os.kill(1, sig)
    time.sleep(0.3)
    state = Path("/proc/1/stat").read_text().rsplit(")", 1)[1].split()[0]
    tried["pid_1_state_after_signals"] = state  # S (sleeping) or R: neither killed nor stopped
    tried["own_sockets"] = sorted(
        os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if _is_socket(fd)
    )
    return tried


def _is_socket(fd: str) -> bool:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return False


def plant_symlinks_and_die(secret: str) -> None:
    """Leave links to a host file under every name the parent once read a child's output from, then die."""
    directories = [os.getcwd(), os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp"), "/tmp/advisor-job"]
    if os.environ.get("ADVISOR_SANDBOX_PROGRESS"):  # where versions before issue 26 kept the child's files
        directories.append(str(Path(os.environ["ADVISOR_SANDBOX_PROGRESS"]).parent))
    for directory in directories:
        for name in ("output.log", "result.json", "progress.jsonl"):
            with contextlib.suppress(OSError):
                Path(directory, name).unlink(missing_ok=True)
                os.symlink(secret, Path(directory, name))
    os.kill(os.getpid(), signal.SIGKILL)


def shout(megabytes: int) -> None:
    block = "x" * (1 << 20)
    for _ in range(megabytes):
        print(block, flush=True)
    print("the last line", flush=True)


def huge_result(megabytes: int) -> str:
    return "y" * (megabytes << 20)


# ------------------------------------------------------------------ fixtures and helpers
@pytest.fixture
def torch_free_zygotes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Job sandboxes whose zygote imports no torch (~0.3 s to start instead of ~3.5 s of CPU): everything else - the
    bubblewrap command line, the seccomp filter, the zygote that forks each child, the inbox - is the worker's own.
    What these tests attack is decided there, not by what the zygote imported; the first test below keeps the real
    preload, so one job's sandbox in this file is exactly a worker's."""

    def torch_free(
        device: str, readable: list[str | None] | tuple = (), *, inductor: bool = True, onnx: bool = False
    ) -> Zygote:
        return Zygote(
            "tests.support.sandbox_probes:torch_free_preload",
            {},
            isolation=resolve_isolation(),
            readable=[p for p in readable if p],
        )

    monkeypatch.setattr(job_sandbox, "measurement_zygote", torch_free)


@pytest.fixture
def product_sandboxes(tmp_path: Path):
    """Sandboxes exactly as a worker that does not measure Inductor prepares them (torch and Dynamo imported in
    each zygote)."""
    require_bubblewrap()
    pool = JobSandboxes("cpu", tmp_path / "work", inductor=False)
    yield pool
    pool.close()


@pytest.fixture
def sandboxes(product_sandboxes: JobSandboxes, torch_free_zygotes: None) -> JobSandboxes:
    """The same pool with torch-free zygotes (a pool starts its zygotes when asked, so after the patch)."""
    return product_sandboxes


def run_job(sandbox: JobSandbox, target: str, kwargs: dict, **options) -> SandboxResult:
    """One job's child, as a job's runner starts it: forked from the job's zygote, reading the job's inbox."""
    model = sandbox.inbox / "model"
    model.write_text("this job's model")
    return run_in_sandbox(
        f"{HERE}:{target}",
        kwargs,
        zygote=sandbox.zygote,
        timeout_s=60,
        memory_limit_mb=None,
        readable=[str(model)],
        **options,
    )


def shmem_mb() -> float:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return int(fields["Shmem"].split()[0]) / 1024


# ------------------------------------------------------------------ tests
def test_a_later_job_sees_nothing_an_earlier_job_left_and_system_paths_are_read_only(product_sandboxes: JobSandboxes):
    sandboxes = product_sandboxes
    first = sandboxes.take()
    assert first is not None
    left = run_job(first, "leave_traces", {"marker": "planted-by-x"})
    assert left.status == "ok", left
    written = left.value["written"]
    for place in ("/", "/etc", "/root", "/dev", "/usr", "project", "venv"):
        assert written[place] != "allowed", f"a job could write {place}"
    assert {written[p] for p in ("/tmp", "/dev/shm", "/tmp/advisor-job")} == {"allowed"}  # its own places
    assert left.value["segment"] >= 0
    earlier_model = str(first.inbox / "model")
    daemon_host_pids = first.zygote.pid
    second = sandboxes.take()  # ends the first job: its sandbox is stopped
    assert second is not None and second.zygote.pid != daemon_host_pids
    seen = run_job(
        second, "look_for_traces", {"marker": "planted-by-x", "daemon": left.value["daemon"], "model": earlier_model}
    )
    assert seen.status == "ok", seen
    assert seen.value["found"] == []
    assert seen.value["segments"] == 0
    assert seen.value["earlier_model_visible"] is False
    assert seen.value["daemon_alive"] is False or left.value["daemon"] not in seen.value["processes"]
    assert not running(daemon_host_pids), "the earlier job's sandbox outlived it"


def test_tmp_and_shm_are_capped_in_total_not_per_file(sandboxes: JobSandboxes, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ADVISOR_SANDBOX_TMP_MB", "48")
    monkeypatch.setenv("ADVISOR_SANDBOX_SHM_MB", "16")
    sandbox = sandboxes.take()
    assert sandbox is not None
    tmp = run_job(sandbox, "fill", {"directory": "/tmp", "chunk_mb": 4, "chunks": 40})  # 160 MB in 4 MB files
    shm = run_job(sandbox, "fill", {"directory": "/dev/shm", "chunk_mb": 4, "chunks": 40})
    assert tmp.status == "ok" and shm.status == "ok", (tmp, shm)
    assert tmp.value["stopped_by"] == "No space left on device" and tmp.value["written_mb"] <= 48
    assert shm.value["stopped_by"] == "No space left on device" and shm.value["written_mb"] <= 16


@pytest.mark.exclusive  # reads the machine's shared-memory total: no other test may write a tmpfs meanwhile
def test_files_a_job_leaves_free_their_memory_when_it_ends(sandboxes: JobSandboxes):
    sandbox = sandboxes.take()
    assert sandbox is not None
    before = shmem_mb()
    filled = [run_job(sandbox, "fill", {"directory": d, "chunk_mb": 64, "chunks": 4}) for d in ("/tmp", "/dev/shm")]
    assert all(r.status == "ok" and r.value["written_mb"] == 256 for r in filled), filled
    assert shmem_mb() - before > 400  # 512 MB of files held in memory by the job's tmpfs
    sandboxes.end_job()
    deadline = time.monotonic() + 10
    while shmem_mb() - before > 64 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert shmem_mb() - before < 64, "the job's files still hold host memory after it ended"


def test_pid_1_cannot_be_traced_read_signalled_or_reached_through_its_channel(sandboxes: JobSandboxes):
    sandbox = sandboxes.take()
    assert sandbox is not None
    tried = run_job(sandbox, "touch_pid_1", {})
    assert tried.status == "ok", tried
    value = tried.value
    assert value["ptrace_attach"] == "refused"
    assert value["process_vm_readv"] == "Operation not permitted"
    # (the numbers of its descriptors may be listed - as root on the host the sandbox's uid owns /proc/1 - but none
    # can be opened: that needs ptrace access, which a non-dumpable process and the seccomp filter refuse)
    for name in ("open /proc/1/fd/0", "open /proc/1/mem", "open /proc/1/environ"):
        assert value[name] != "allowed", name
    assert value["pid_1_state_after_signals"] in ("S", "R")
    assert value["own_sockets"] == []  # the worker's channel stays with the zygote
    again = run_job(sandbox, "look_for_traces", {"marker": "none", "daemon": 999999, "model": "/nonexistent"})
    assert again.status == "ok", "the zygote must still serve the job after its child attacked it"


def test_a_child_that_leaves_symlinks_to_host_files_gets_nothing_of_them_back(sandboxes: JobSandboxes, tmp_path: Path):
    secret = tmp_path / "worker.token"
    secret.write_text("SECRET-TOKEN-VALUE")
    sandbox = sandboxes.take()
    assert sandbox is not None
    result = run_job(sandbox, "plant_symlinks_and_die", {"secret": str(secret)})
    assert result.status != "ok"
    for text in (result.reason, result.stderr_tail, str(result.value)):
        assert "SECRET-TOKEN-VALUE" not in (text or "")
    spawned = run_in_sandbox(
        f"{HERE}:plant_symlinks_and_die", {"secret": str(secret)}, timeout_s=60, memory_limit_mb=None
    )
    for text in (spawned.reason, spawned.stderr_tail, str(spawned.value)):
        assert "SECRET-TOKEN-VALUE" not in (text or "")


def test_what_a_child_sends_back_is_capped(sandboxes: JobSandboxes):
    sandbox = sandboxes.take()
    assert sandbox is not None
    loud = run_job(sandbox, "shout", {"megabytes": 20})
    assert loud.status == "crashed" or loud.status == "ok"  # returns None: ok
    assert loud.stderr_tail is not None and len(loud.stderr_tail) <= 4000 and loud.stderr_tail.endswith("the last line")
    huge = run_job(sandbox, "huge_result", {"megabytes": 80})
    assert huge.status == "crashed" and "larger than the parent accepts" in (huge.reason or "")


@pytest.mark.parametrize("in_worker_session", [False, True], ids=["uid keyring", "worker session keyring"])
def test_jobs_neither_read_the_hosts_kernel_keys_nor_leave_keys_for_the_next(
    sandboxes: JobSandboxes, in_worker_session: bool
):
    """Keyrings are not a namespace and the sandbox's uid is the worker's: the filter refuses every keyring call and
    each job's sandbox holds a session keyring of its own (tests/harness/test_keyrings.py has both walls alone)."""
    with keyrings.planted_host_key(in_worker_session=in_worker_session) as key:
        for _job in ("a", "b"):
            sandbox = sandboxes.take()  # ends the previous job's sandbox
            assert sandbox is not None
            result = run_in_sandbox(
                "tests.support.sandbox_probes:probe_keyrings",
                keyrings.probe_kwargs(key),
                zygote=sandbox.zygote,
                timeout_s=60,
                memory_limit_mb=None,
            )
            assert result.status == "ok", result
            keyrings.check_refused(result.value)
        sandboxes.end_job()


def test_the_next_jobs_sandbox_is_up_before_the_current_jobs_first_timed_window(sandboxes: JobSandboxes):
    """The agent starts the next job's sandbox as a job starts and holds the job's first timed window until it is up
    (workers.agent, workers.stages.wait_for_gate): the next job then starts without waiting, and no sandbox starts
    while a measurement runs."""
    assert sandboxes.take() is not None
    sandboxes.prepare()
    gate = sandboxes.readiness_fd()
    try:
        assert select.select([gate], [], [], 0)[0] == []  # still starting: a job would wait here, before measuring
        assert select.select([gate], [], [], 120)[0] == [gate]
    finally:
        os.close(gate)
    started = time.monotonic()
    second = sandboxes.take()
    assert second is not None and second.zygote.start()
    assert time.monotonic() - started < 1.0  # the next job finds its sandbox ready


def test_spares_prepared_while_idle_serve_jobs_back_to_back_each_in_its_own_sandbox(
    tmp_path: Path, torch_free_zygotes: None
):
    require_bubblewrap()
    pool = JobSandboxes("cpu", tmp_path / "work", inductor=False, spares=2)
    try:
        for _ in range(3):  # the worker's idle polls: one spare started per call, up to two
            pool.prepare()
            gate = pool.readiness_fd()
            select.select([gate], [], [], 120)
            os.close(gate)
        assert pool.starts == 2
        started = time.monotonic()
        first = pool.take()
        assert first is not None
        first_pid = first.zygote.pid
        second = pool.take()  # ends the first job
        assert second is not None and time.monotonic() - started < 1.0
        assert second.zygote.pid != first_pid and not running(first_pid)
    finally:
        pool.close()


def test_with_no_spares_nothing_starts_while_idle_and_each_claimed_job_gets_its_own(
    tmp_path: Path, torch_free_zygotes: None
):
    """`worker --spare-sandboxes 0`: the idle polls start no interpreter; the claimed job's sandbox starts then."""
    require_bubblewrap()
    pool = JobSandboxes("cpu", tmp_path / "work", inductor=False, spares=0)
    try:
        for _ in range(3):  # the worker's idle polls and the start of each job
            pool.prepare()
        assert pool.starts == 0
        first = pool.take()
        assert first is not None and first.zygote.start() and pool.starts == 1
        first_pid = first.zygote.pid
        pool.prepare()  # as the job starts: still no spare for the next one
        assert pool.starts == 1
        second = pool.take()  # ends the first job
        assert second is not None and pool.starts == 2
        assert second.zygote.pid != first_pid and not running(first_pid)
    finally:
        pool.close()


def overwrite_trusted_headers(directory: str) -> dict:
    """Try to poison the trusted precompiled header every job's sandbox copies in (read-only to jobs), and the
    sandbox's own copy of it."""
    from tests.workers.test_job_sandbox_headers import installed_headers

    tried = {}
    for name, root in (("trusted", Path(directory)), ("own copy", installed_headers())):
        files = [p for p in root.rglob("*") if p.is_file()]
        tried[name] = [_attempt(lambda p=p: p.write_bytes(b"poisoned by the last job")) for p in files] or ["none"]
    return tried
