"""A killed worker's temporary directories (its job's files, the uploaded model among them) are removed by the next
worker; nothing that is not provably a dead process's own directory is touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from advisor.harness.owned_temp import owned_temp_dir, sweep_stale_temp_dirs

_MAKE_AND_WAIT = (
    "import sys, time; from advisor.harness.owned_temp import owned_temp_dir; "
    "path = owned_temp_dir('npu-advisor-worker-', dir=sys.argv[1]); open(path + '/model.pt2', 'wb').write(b'x'); "
    "print(path, flush=True); time.sleep(600)"
)


def _process_with_a_dir(root: Path) -> tuple[subprocess.Popen, Path]:
    process = subprocess.Popen([sys.executable, "-c", _MAKE_AND_WAIT, str(root)], stdout=subprocess.PIPE, text=True)
    return process, Path(process.stdout.readline().strip())  # type: ignore[union-attr]


def test_the_directories_of_a_killed_process_are_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    killed, killed_dir = _process_with_a_dir(tmp_path)
    alive, alive_dir = _process_with_a_dir(tmp_path)
    try:
        killed.send_signal(signal.SIGKILL)  # as the OOM killer would: no chance to clean up
        killed.wait()
        assert killed_dir.is_dir()
        assert sweep_stale_temp_dirs(str(tmp_path)) == [str(killed_dir)]
        assert not killed_dir.exists() and (alive_dir / "model.pt2").is_file()
    finally:
        alive.kill()
        alive.wait()


def test_a_reused_pid_does_not_keep_a_dead_owners_directory(tmp_path: Path) -> None:
    """The name holds the owner's start time too: a new process with the same pid is not its owner."""
    mine = Path(owned_temp_dir("advisor-job-", dir=str(tmp_path)))
    pid, start = mine.name.removeprefix("advisor-job-").split("-")[0].split(".")
    assert pid == str(os.getpid())
    reused = tmp_path / f"advisor-job-{pid}.{int(start) - 1}-abcd1234"  # this pid, an earlier process's start time
    reused.mkdir()
    assert sweep_stale_temp_dirs(str(tmp_path)) == [str(reused)]
    assert mine.is_dir()


def test_what_it_did_not_make_is_left_alone(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("data")
    dead = "999999999.1"  # no such pid
    foreign = [
        tmp_path / "npu-advisor-worker-plain",  # tempfile.mkdtemp's own name: no owner in it
        tmp_path / "advisor-job-abc.def-x",  # not a pid and a start time
        tmp_path / "unrelated-999999999.1-x",  # another prefix
    ]
    for path in foreign:
        path.mkdir()
    link = tmp_path / f"advisor-sandbox-{dead}-link"
    link.symlink_to(victim)  # a dead owner's name on a symlink: the link is not a directory of ours
    assert sweep_stale_temp_dirs(str(tmp_path)) == []
    assert all(path.is_dir() for path in foreign) and (victim / "keep").read_text() == "data" and link.is_symlink()


def test_another_users_directory_is_left_alone(tmp_path: Path) -> None:
    if os.getuid() != 0:
        import pytest

        pytest.skip("giving a directory to another user needs root (chown)")
    theirs = tmp_path / "npu-advisor-worker-999999999.1-x"  # a dead owner's name, but another user's directory
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    assert sweep_stale_temp_dirs(str(tmp_path)) == []
    assert theirs.is_dir()
