"""Temporary directories that say which process made them, so the next worker can remove a killed one's.

A worker, its stage runners and their sandboxes keep a job's files (the uploaded model among them: hundreds of MB)
in directories under the system's temp dir, and remove them when they end. A process killed with SIGKILL, or by
the kernel's OOM killer, cannot; without this its directories stay until the machine reboots. Each directory made
here names its process in its own name (`PREFIX<pid>.<start time>-XXXXXXXX`: the start time, so that a reused pid is
not mistaken for it; in the name, because a sandboxed job can write inside its scratch directory but cannot rename
it), and `sweep_stale_temp_dirs` - run when a worker starts - removes those whose process is gone. A directory it
did not make (another name, another user's, a symlink) is never touched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

# the prefixes of the directories a worker's processes make directly under the temp dir
WORKER_PREFIXES = ("npu-advisor-worker-", "advisor-job-", "advisor-sandbox-")


def owned_temp_dir(prefix: str, dir: str | None = None) -> str:  # noqa: A002 - tempfile's own name
    """`tempfile.mkdtemp(prefix=..., dir=...)`, its name naming this process."""
    return tempfile.mkdtemp(prefix=f"{prefix}{_identity(os.getpid())}-", dir=dir)


def sweep_stale_temp_dirs(root: str | None = None, prefixes: tuple[str, ...] = WORKER_PREFIXES) -> list[str]:
    """Remove the directories under `root` (the temp dir) with one of `prefixes` whose owner process is gone.
    Returns the removed paths."""
    root = root or tempfile.gettempdir()
    removed = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefixes) or not entry.is_dir(follow_symlinks=False):
            continue
        prefix = next(prefix for prefix in prefixes if entry.name.startswith(prefix))
        if _owner_is_gone(entry, entry.name[len(prefix) :].partition("-")[0]):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def _owner_is_gone(entry: os.DirEntry, owner: str) -> bool:
    """Whether `owner` ("pid.start", from the directory's name) names a process that no longer runs; False for a
    name that is not one of ours or a directory of another user."""
    pid, _, start = owner.partition(".")
    if not (pid.isdigit() and start.isdigit()):
        return False
    try:
        if entry.stat(follow_symlinks=False).st_uid != os.getuid():
            return False
    except OSError:
        return False
    return _identity(int(pid)) != owner


def _identity(pid: int) -> str | None:
    """'pid.start' of a running process (its start time in clock ticks since boot, /proc/PID/stat field 22), or None
    when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    return f"{pid}.{fields[19]}"
