"""The worker's warm sandbox: one zygote kept between jobs, so a job does not pay `import torch`, Dynamo, Inductor
and Inductor's CPU probe again (4-8 s on 2 cores) before its first child.

Between jobs nothing of the last one survives: `after_job` kills every process the job's children started (the
zygote is their subreaper, so none escapes by re-parenting), empties the sandbox's private /tmp and /dev/shm,
removes its System V IPC objects and everything written to its scratch directory, and empties the inbox. A zygote
that cannot be made clean is stopped and a fresh one started; one that died is replaced before the next job.

The zygote's sandbox sees the job's files through the inbox, a directory bound read-only that holds only the
current job's model and inputs. The job's runner (workers.stages, a process of its own) forks its children from
the zygote through the zygote's pipes, which it inherits (`Zygote.attach`); the agent never forks while a runner
holds them.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from advisor.harness.measurement import measurement_zygote
from advisor.harness.sandbox import Zygote

log = logging.getLogger("npu_advisor.worker")


class KeptZygote:
    """One measurement zygote kept across analyses: started on first use (again after it died), made clean between
    analyses (`clean`), replaced when it cannot be. Its sandbox reads the `readable` directory."""

    def __init__(self, device: str, readable: Path, *, inductor: bool) -> None:
        self.device = device
        self.readable = readable
        self.inductor = inductor  # whether jobs may compile C++ with Inductor: the zygote then prepares for it
        self.starts = 0  # zygotes started so far (one, unless one died or could not be made clean)
        self._zygote: Zygote | None = None
        self._unavailable = False  # a zygote could not start here: each analysis starts its own

    def running(self) -> Zygote | None:
        """The zygote, started (again) when there is none or it died; None when one cannot start."""
        if self._zygote is not None and not self._zygote.start():
            log.warning("the warm sandbox's zygote died; starting a fresh one")
            self._stop()
        if self._zygote is None and not self._unavailable:
            self._zygote = measurement_zygote(self.device, [str(self.readable)], inductor=self.inductor)
            self.starts += 1
            if not self._zygote.start():
                log.warning("the warm sandbox could not start; each job starts its own zygote")
                self._unavailable = True
                self._stop()
        return self._zygote

    def handle(self) -> tuple[dict[str, Any] | None, tuple[int, ...]]:
        """The running zygote's handle for a process that forks from it and the pipe descriptors that process must
        inherit; (None, ()) when no zygote runs (an analysis then starts one of its own)."""
        zygote = self.running()
        handle = zygote.handle() if zygote is not None else None
        return (handle, (handle["request_fd"], handle["reply_fd"])) if handle else (None, ())

    def clean(self) -> None:
        """Leave nothing of the last analysis in the zygote's sandbox; a zygote that cannot be made clean is stopped
        (the next `running()` starts a fresh one)."""
        if self._zygote is not None and not self._zygote.reset():
            problem = self._zygote.reset_problem
            log.warning("the warm sandbox could not be made clean after the job (%s); starting a fresh one", problem)
            self._stop()

    def close(self) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None


class WarmSandbox(KeptZygote):
    """A worker's kept zygote, whose sandbox reads the worker's inbox: only the current job's downloads."""

    def __init__(self, device: str, work_dir: Path, *, inductor: bool) -> None:
        self.inbox = work_dir / "inbox"
        super().__init__(device, self.inbox, inductor=inductor)

    def start(self) -> bool:
        """Start the zygote now (before the first claim, so that the first job is warm too)."""
        self.inbox.mkdir(parents=True, exist_ok=True)
        return self.running() is not None

    def job_inbox(self, name: str) -> Path:
        """An empty directory for one job's downloads, visible read-only in the sandbox."""
        path = self.inbox / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def after_job(self) -> None:
        """Leave nothing of the last job: its processes, temporary files and downloads."""
        self.clean()
        # emptied, not replaced: the sandbox binds this very directory
        for entry in self.inbox.iterdir() if self.inbox.is_dir() else ():
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.inbox, ignore_errors=True)
