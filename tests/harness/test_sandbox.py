"""The sandbox turns every way a child can fail into a status, and never hangs the parent."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from advisor.harness.isolation import NO_ISOLATION
from advisor.harness.sandbox import Zygote, run_in_sandbox, scrubbed_environment
from tests.support.bubblewrap import require_bubblewrap

T = "tests.support.backends_for_tests"
HERE = "tests.harness.test_sandbox"
_counter = 0


def run(func: str, kwargs: dict | None = None, **options):
    if "zygote" not in options:
        options.setdefault("isolation", NO_ISOLATION)
    options.setdefault("timeout_s", 30)
    options.setdefault("memory_limit_mb", 2048)
    target = func if ":" in func else f"{T}:{func}"
    return run_in_sandbox(target, kwargs or {}, **options)


# ------------------------------------------------------------------ targets defined here (zygote tests)
def parent_pid() -> int:
    return os.getppid()


def bump_counter() -> int:
    """Module state: a fresh child always starts from 0, even when forked from a zygote."""
    global _counter
    _counter += 1
    return _counter


def failing_preload() -> None:
    raise RuntimeError("preload broke")


def bubblewrap_or_skip():
    return require_bubblewrap()


@pytest.fixture(scope="module")
def zygote():
    with Zygote(f"{T}:echo", {"value": None}, isolation=NO_ISOLATION) as z:
        z.start()  # now, not at the first fork: a variable a test sets (monkeypatch) must not become its environment
        yield z


@pytest.fixture(scope="module")
def isolated_zygote():
    with Zygote(f"{T}:echo", {"value": None}, isolation=bubblewrap_or_skip()) as z:
        z.start()  # now, not at the first fork: a variable a test sets (monkeypatch) must not become its environment
        yield z


@pytest.fixture(params=["spawn", "zygote", "isolated-spawn", "isolated-zygote"])
def via(request) -> dict:
    """Run the status tests every way: spawned children and children forked from a zygote, each plain and
    inside the bubblewrap sandbox (statuses must not depend on isolation)."""
    if request.param == "spawn":
        return {}
    if request.param == "isolated-spawn":
        return {"isolation": bubblewrap_or_skip()}
    return {"zygote": request.getfixturevalue("isolated_zygote" if "isolated" in request.param else "zygote")}


def test_ok_returns_the_json_value_from_a_different_process():
    result = run("echo", {"value": {"a": [1, 2.5, "x"]}})
    assert result.status == "ok", result
    assert result.value["echo"] == {"a": [1, 2.5, "x"]}
    assert result.value["pid"] != os.getpid()
    assert result.reason is None and result.wall_s > 0


def test_abort_becomes_crashed_with_the_signal_name(via):
    result = run("abort_now", **via)
    assert result.status == "crashed"
    assert "SIGABRT" in result.reason


def test_exit_without_result_is_crashed_with_the_code(via):
    result = run("exit_with", {"code": 3}, **via)
    assert result.status == "crashed"
    assert "code 3" in result.reason


def test_hang_becomes_timeout_and_the_parent_returns_promptly(via):
    started = time.monotonic()
    result = run("sleep_for", {"seconds": 60}, timeout_s=1.5, **via)
    assert result.status == "timeout"
    assert "1.5 s" in result.reason
    assert time.monotonic() - started < 10


def test_timeout_kills_the_whole_process_group(tmp_path, via):
    pid_file = tmp_path / "grandchild.pid"
    tag = f"grandchild-of-{tmp_path.name}"
    result = run(
        "spawn_grandchild_and_hang",
        {"pid_file": str(pid_file), "tag": tag},
        timeout_s=3,
        writable=[str(tmp_path)],
        **via,
    )
    assert result.status == "timeout"
    assert pid_file.exists(), "the grandchild was never started"
    for _ in range(50):  # the kernel may need a moment to reap it
        if not _tagged_processes(tag):
            break
        time.sleep(0.1)
    assert not _tagged_processes(tag), "a grandchild (like an Inductor compile worker) outlived the timeout"


def test_allocating_past_the_address_space_limit_is_oom(via):
    result = run("allocate_until_limit", {"block_mb": 64}, memory_limit_mb=512, **via)
    assert result.status == "oom"
    assert "memory" in result.reason.lower()


def test_an_exception_is_runtime_error_with_message_and_traceback(via):
    result = run("raise_value_error", {"message": "bad input shape"}, **via)
    assert result.status == "runtime_error"
    assert result.reason == "ValueError: bad input shape"
    assert "Traceback" in result.stderr_tail


def test_a_target_can_choose_its_failure_status():
    result = run("raise_stage_error", {"status": "compile_error", "reason": "no lowering for npu.foo"})
    assert (result.status, result.reason) == ("compile_error", "no lowering for npu.foo")


def test_secrets_are_not_visible_in_the_child(monkeypatch, via):
    monkeypatch.setenv("ADVISOR_TOKEN", "tok-123")
    monkeypatch.setenv("MY_API_KEY", "key-456")
    monkeypatch.setenv("DB_PASSWORD", "pw")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("RANDOM_UNLISTED_VAR", "x")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    names = [
        "ADVISOR_TOKEN",
        "MY_API_KEY",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "RANDOM_UNLISTED_VAR",
        "OMP_NUM_THREADS",
        "PATH",
        "TORCHINDUCTOR_CACHE_DIR",
    ]
    seen = run("read_environment", {"names": names}, **via).value
    assert seen["ADVISOR_TOKEN"] is None and seen["MY_API_KEY"] is None
    assert seen["DB_PASSWORD"] is None and seen["AWS_SECRET_ACCESS_KEY"] is None
    assert seen["RANDOM_UNLISTED_VAR"] is None
    assert seen["OMP_NUM_THREADS"] == "2" and seen["PATH"]


def test_scrubbed_environment_drops_secret_names_even_with_an_allowed_prefix():
    source = {"TORCH_HUB_TOKEN": "x", "TORCH_LOGS": "graph_breaks", "HOME": "/h", "SSH_AUTH_SOCK": "s"}
    env = scrubbed_environment(source)
    assert env == {"TORCH_LOGS": "graph_breaks", "HOME": "/h"}


def test_each_call_gets_its_own_compile_cache_unless_one_is_given(tmp_path, via):
    first = run("read_environment", {"names": ["TORCHINDUCTOR_CACHE_DIR"]}, **via).value["TORCHINDUCTOR_CACHE_DIR"]
    second = run("read_environment", {"names": ["TORCHINDUCTOR_CACHE_DIR"]}, **via).value["TORCHINDUCTOR_CACHE_DIR"]
    assert first != second
    shared = run(
        "read_environment",
        {"names": ["TORCHINDUCTOR_CACHE_DIR"]},
        cache_dir=str(tmp_path),
        writable=[str(tmp_path)],
        **via,
    )
    assert shared.value["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path)


def test_cancel_event_kills_the_child(via):
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    result = run("sleep_for", {"seconds": 60}, cancel=cancel, **via)
    assert result.status == "cancelled"
    assert time.monotonic() - started < 10


def test_progress_events_reach_the_parent(via):
    events: list[dict] = []
    result = run("report_then_sleep", {"events": 3, "seconds": 0.3}, on_progress=events.append, **via)
    assert result.status == "ok"
    assert [e["iterations"] for e in events] == [1, 2, 3]


def test_zygote_children_are_forked_from_it_and_each_starts_fresh(zygote):
    forked = [run(f"{HERE}:parent_pid", zygote=zygote).value for _ in range(2)]
    assert forked[0] == forked[1] != os.getpid()  # both children of the zygote, not of this process
    assert run(f"{HERE}:parent_pid").value == os.getpid()  # without it: spawned by this process
    counts = [run(f"{HERE}:bump_counter", zygote=zygote).value for _ in range(2)]
    assert counts == [1, 1]  # module state of one child never leaks into the next


def test_a_child_needing_a_different_environment_is_spawned_not_forked(zygote):
    result = run(f"{HERE}:parent_pid", zygote=zygote, extra_env={"OMP_NUM_THREADS": "1"})
    assert result.value == os.getpid()  # torch would have read OMP_NUM_THREADS at import: fork is not equivalent
    seen = run("read_environment", {"names": ["OMP_NUM_THREADS"]}, zygote=zygote, extra_env={"OMP_NUM_THREADS": "1"})
    assert seen.value["OMP_NUM_THREADS"] == "1"


def test_a_zygote_started_with_its_childrens_environment_forks_them_and_spawns_any_other():
    """`Zygote(extra_env=...)`: the environment `run_in_sandbox(extra_env=...)` gives the children it serves (the
    tests' source front, tests/support/source_zygote.py); a child asking for another one is spawned."""
    wanted = {"OMP_NUM_THREADS": "1", "ADVISOR_TEST_MARK": "zygote"}
    with Zygote(f"{T}:echo", {"value": None}, isolation=NO_ISOLATION, extra_env=wanted) as z:
        z.start()
        forked = run(f"{HERE}:parent_pid", zygote=z, extra_env=wanted)
        seen = run("read_environment", {"names": sorted(wanted)}, zygote=z, extra_env=wanted)
        other = run(f"{HERE}:parent_pid", zygote=z, extra_env={**wanted, "ADVISOR_TEST_MARK": "other"})
        plain = run(f"{HERE}:parent_pid", zygote=z)
    assert forked.value == z.pid != os.getpid() and seen.value == wanted
    assert other.value == plain.value == os.getpid()


def test_a_zygote_that_cannot_start_falls_back_to_spawning():
    with Zygote(f"{HERE}:failing_preload", isolation=NO_ISOLATION) as broken:
        result = run("echo", {"value": 7}, zygote=broken)
        assert result.status == "ok" and result.value["echo"] == 7
        assert run(f"{HERE}:parent_pid", zygote=broken).value == os.getpid()


def _tagged_processes(tag: str) -> list[int]:
    """Host pids of live processes whose command line contains `tag`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if tag.encode() in cmdline.read_bytes() and _alive(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); treat it as dead
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_the_host_cannot_find_still_reports_and_a_hung_one_stops_its_sandbox(monkeypatch):
    """A quick child may end (and be reaped inside the sandbox) before the host looks it up in /proc: its result still
    counts. One that must be killed but cannot be found alone takes its sandbox with it, never lingers."""
    import advisor.harness.sandbox as sandbox_module

    find = sandbox_module._host_pid
    monkeypatch.setattr(sandbox_module, "_host_pid", lambda root, ns_pid: find(root, ns_pid) if ns_pid == 1 else None)
    with Zygote(f"{T}:echo", {"value": None}, isolation=bubblewrap_or_skip()) as z:
        assert z.start()
        quick = run("echo", {"value": 5}, zygote=z)
        assert quick.status == "ok" and quick.value["echo"] == 5
        hung = run("sleep_for", {"seconds": 60}, zygote=z, timeout_s=1)
        assert hung.status == "timeout"
        assert not z._alive()  # stopped with everything in it


# ------------------------------------------------------------------ what a child sends is bounded in depth
DEEP = 60_000  # far past advisor.core.bounded_json.MAX_DEPTH, and past what json.loads survives
DEEP_LINE = 30_000  # as deep as a progress line under its 64 KiB cap can be


def test_a_progress_line_too_deep_stops_the_child_at_once_with_a_clear_status(via):
    events: list[dict] = []
    started = time.monotonic()
    result = run(
        "tests.support.sandbox_probes:send_deep_progress",
        {"levels": DEEP_LINE, "then_sleep_s": 60},
        timeout_s=45,
        on_progress=events.append,
        **via,
    )
    assert result.status == "crashed", result
    assert "progress line nested deeper than 64 levels" in (result.reason or "")
    assert time.monotonic() - started < 20, "stopped when the line came, not at its timeout"
    assert [event["stage"] for event in events] == ["before"], "the deep line never reaches the caller"


def test_a_result_too_deep_is_refused_unparsed_with_a_clear_status(via):
    result = run("tests.support.sandbox_probes:send_deep_result", {"levels": DEEP}, **via)
    assert result.status == "crashed", result
    assert "result nested deeper than 64 levels" in (result.reason or "")
