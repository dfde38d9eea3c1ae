"""Processes by ancestry, from /proc (Linux): finding and killing what a process started, even in other sessions.

Used by the worker to stop a job's runner and everything below it, and by an unisolated zygote's owner to kill what
its children started. Torch-free.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def parent_links() -> dict[int, int]:
    """pid -> parent pid of every process this /proc shows (in a PID namespace: only that namespace's)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    return parents


def descendant_pids(root: int) -> set[int]:
    """Every live descendant of `root`; empty where /proc is unavailable."""
    parents = parent_links()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found |= frontier
    return found


def running(pid: int) -> bool:
    """Exists and is not a zombie (a killed orphan stays a zombie until its new parent reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_groups(pids: set[int], wait_s: float = 3.0) -> None:
    """SIGKILL each process and its group (never the caller's own), then wait briefly until they are gone."""
    own_group = os.getpgrp()
    for pid in pids:
        try:
            group = os.getpgid(pid)
            if group != own_group:
                os.killpg(group, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + wait_s
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
