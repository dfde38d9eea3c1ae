"""Kernel keyrings are not a namespace: a job must neither reach the host's keys nor leave keys behind.

The worker's uid is the sandbox's uid on the host, and a child inherits its parent's session keyring, so both walls
are checked: the seccomp filter refuses add_key, keyctl and request_key (with it, every route below), and each sandbox
has a session keyring of its own, freed with it (without the filter, the last tests). The host's secret sits either
in the uid's own keyring (`_uid.N`, what a root worker's jobs found) or in a session keyring the worker joined first
(what systemd services, SSH logins and container runtimes give a worker)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from advisor.harness import seccomp
from advisor.harness.isolation import Isolation, keyring_launcher
from advisor.harness.sandbox import Zygote, run_in_sandbox
from advisor.harness.session_keyring import KEYCTL_NUMBERS
from tests.support import keyrings as k
from tests.support.bubblewrap import require_bubblewrap

PROBE = "tests.support.sandbox_probes:probe_keyrings"
SECRET = k.SECRET
PROJECT = str(Path(__file__).resolve().parents[2])

if k.session_keyring() == -errno.ENOSYS or k.session_keyring() == -errno.EPERM:
    pytest.skip("needs kernel keyrings this process may use (keyctl)", allow_module_level=True)


@pytest.fixture(scope="module")
def bubblewrap() -> Isolation:
    return require_bubblewrap()


@pytest.fixture(params=["uid keyring", "worker session keyring"])
def host_key(request: pytest.FixtureRequest):
    with k.planted_host_key(in_worker_session=request.param == "worker session keyring") as key:
        yield key


def test_a_spawned_child_cannot_reach_or_leave_kernel_keys(bubblewrap: Isolation, host_key: dict) -> None:
    for _job in ("a", "b"):
        result = run_in_sandbox(
            PROBE, k.probe_kwargs(host_key), timeout_s=60, memory_limit_mb=None, isolation=bubblewrap
        )
        assert result.status == "ok", result
        k.check_refused(result.value)
        assert SECRET.decode() not in (result.stderr_tail or "")


def test_a_child_forked_from_a_zygote_cannot_reach_or_leave_kernel_keys(bubblewrap: Isolation, host_key: dict) -> None:
    for _job in ("a", "b"):  # each job its own zygote, as workers.job_sandbox gives it
        with Zygote("tests.support.backends_for_tests:echo", {"value": None}, isolation=bubblewrap) as zygote:
            result = run_in_sandbox(PROBE, k.probe_kwargs(host_key), timeout_s=60, memory_limit_mb=None, zygote=zygote)
        assert result.status == "ok", result
        assert zygote.isolation.isolated
        k.check_refused(result.value)


def test_every_sandbox_command_joins_a_fresh_session_keyring_and_masks_proc_keys() -> None:
    """Spawned children, zygotes and the capability probe all start through `Isolation.command`."""
    command = Isolation("bubblewrap", "/usr/bin/bwrap", "0.8.0").command(["true"], writable=[], seccomp_fd=7)
    launcher = keyring_launcher()
    assert command[: len(launcher) + 1] == [*launcher, "/usr/bin/bwrap"]
    for masked in ("/proc/keys", "/proc/key-users"):
        at = command.index(masked)
        assert command[at - 2 : at] == ["--ro-bind", os.devnull] and command.index("--proc") < at
    assert "--seccomp" in command


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_refuses_the_keyring_syscalls_on_each_architecture(machine: str) -> None:
    numbers = seccomp._ARCHES[machine][1]
    assert numbers["keyctl"] == KEYCTL_NUMBERS[machine], "the launcher and the filter agree on keyctl's number"
    code = seccomp.program(machine)
    assert code is not None
    compared = {int.from_bytes(code[i + 4 : i + 8], "little") for i in range(0, len(code), 8)}
    assert {numbers[name] for name in seccomp.KEYRING_SYSCALLS} <= compared


# ------------------------------------------------------------------ the second wall alone
def _unfiltered_view(bubblewrap: Isolation, description: str) -> dict:
    """A sandbox like every other, minus the seccomp filter: what its own session keyring holds."""
    code = (
        "import json; from tests.support.sandbox_probes import keyring_view; "
        f"print(json.dumps(keyring_view({description!r})))"
    )
    command = bubblewrap.command([sys.executable, "-c", code], writable=[])
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "PYTHONPATH": PROJECT}
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_without_the_filter_each_sandbox_still_has_a_session_keyring_of_its_own(bubblewrap: Isolation) -> None:
    tag = uuid.uuid4().hex[:12]
    assert k.join_session_keyring(f"advisor-test-worker-{tag}") > 0
    worker_ring = k.session_keyring()
    host_description = f"advisor-test-host:{tag}"
    assert k.add_user_key(host_description, SECRET, k.KEY_SPEC_SESSION_KEYRING) > 0
    left = f"advisor-test-left-by-job:{tag}"
    try:
        first = _unfiltered_view(bubblewrap, left)
        second = _unfiltered_view(bubblewrap, left)
        assert first["session"] > 0 and first["added"] > 0, first  # the probe works: keys can be made there
        assert len({worker_ring, first["session"], second["session"]}) == 3, "a session keyring per sandbox"
        assert second["found"] == -errno.ENOKEY, "nothing of job A's keys in job B"
        assert k.search(k.KEY_SPEC_SESSION_KEYRING, left) == -errno.ENOKEY, "nor in the worker's keyring"
        assert not k.eventually_listed(left), "a job's keys die with its sandbox"
    finally:
        k.invalidate(k.search(k.KEY_SPEC_SESSION_KEYRING, host_description))


def test_the_session_keyring_is_the_second_wall_the_control() -> None:
    """The control: a plain child of the worker shares its session keyring, so the checks above mean something."""
    tag = uuid.uuid4().hex[:12]
    assert k.join_session_keyring(f"advisor-test-worker-{tag}") > 0
    code = "from tests.support import keyrings as k; print(k.session_keyring())"
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT, check=True)
    launched = subprocess.run(
        [*keyring_launcher(), sys.executable, "-c", code], capture_output=True, text=True, cwd=PROJECT, check=True
    )
    assert int(plain.stdout) == k.session_keyring()
    assert int(launched.stdout) not in (k.session_keyring(), -errno.ENOKEY)


@pytest.mark.parametrize(
    ("failure", "code"), [(errno.EDQUOT, 125), (errno.ENOMEM, 125), (errno.EPERM, 0), (errno.ENOSYS, 0)]
)
def test_the_launcher_never_starts_a_sandbox_holding_the_workers_keyring(failure: int, code: int) -> None:
    """No fresh keyring (the uid's key quota used up): no launch. Keyrings unreachable to the worker itself (no
    kernel support, or its own seccomp profile refuses keyctl): nothing to hide, bubblewrap starts."""
    script = (
        "import sys; from advisor.harness import session_keyring as s\n"
        f"s.join_fresh_session_keyring = lambda: -{failure}\n"
        "s.main(['/bin/true'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=PROJECT, capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert ("no fresh session keyring for the sandbox" in done.stderr) == bool(code)
