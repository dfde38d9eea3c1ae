"""A sandbox of its own for every job, prepared before the job arrives.

A job's children fork from a zygote (advisor.harness.sandbox.Zygote) that is the pid 1 of a bubblewrap sandbox no
other job's code ever ran in: its own user, PID, IPC, network and mount namespaces, its own size-capped /tmp and
/dev/shm, and an inbox - a host directory bound read-only - that only ever holds this job's downloads. When the job
ends its zygote is stopped: the kernel kills every process in the sandbox and frees its tmpfs memory. Nothing is made
clean for reuse, so there is no list of things to clean that could miss one.

Starting a zygote (`import torch`, Dynamo and, for a worker that measures Inductor, Inductor and its CPU probe:
~5 s on 2 cores) stays off the job's critical path: `prepare()` starts the next job's zygote (a spare) in a thread
when the worker starts, while it waits for work,
and as each job starts, so that it comes up during that job's download and inspection; the job's first timed window
waits until it is up (`readiness_fd`), so starting it never disturbs a measurement. `take()` hands the spare to the
job that was just claimed (waiting for it if it is still starting). What outlives a job is only what the sandbox sees
read-only: the interpreter, the project's code and Inductor's trusted precompiled headers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.harness.measurement import measurement_zygote
from advisor.harness.sandbox import Zygote

log = logging.getLogger("npu_advisor.worker")


@dataclass
class JobSandbox:
    """One job's: a zygote in a fresh sandbox, and the inbox only that sandbox reads (the job's downloads)."""

    zygote: Zygote
    inbox: Path

    def handle(self) -> tuple[dict[str, Any] | None, tuple[int, ...]]:
        """The zygote's handle for the job's runner process and the descriptor it must inherit; (None, ()) when the
        zygote is not running (the analysis then starts one of its own)."""
        handle = self.zygote.handle()
        return (handle, (handle["channel_fd"],)) if handle else (None, ())

    def close(self) -> None:
        """Stop everything of the job: its processes, its /tmp and /dev/shm, its downloads."""
        self.zygote.close()
        shutil.rmtree(self.inbox, ignore_errors=True)


class JobSandboxes:
    """The sandboxes of one worker's jobs: up to `spares` ready for the next jobs, at most one starting, at most one
    in use. Two spares (the default) let two short jobs arrive back to back without waiting; each idle spare holds
    an interpreter with torch imported (a few hundred MB). With none, nothing starts ahead: each job's sandbox
    starts when the job is claimed (its `import torch` then lies on the job's path, before its downloads).

    Spares are started one at a time by one long-lived thread of this object: bubblewrap's parent-death signal follows
    the thread that started it, so a sandbox started from a short-lived thread (a job's progress reader) would die
    with it."""

    def __init__(self, device: str, work_dir: Path, *, inductor: bool, onnx: bool = False, spares: int = 2) -> None:
        self.device = device
        self.work_dir = work_dir
        self.inductor = inductor  # whether jobs may compile C++ with Inductor: the zygote then prepares for it
        self.onnx = onnx  # whether jobs may export with torch.onnx (ONNX Runtime): likewise
        self.spares = max(0, spares)
        self.starts = 0  # sandboxes started so far
        self.current: JobSandbox | None = None
        self._ready: list[JobSandbox] = []
        self._starting = False
        self._closing = False
        self._unavailable = False  # a zygote could not start here: each analysis starts its own
        self._changed = threading.Condition()
        self._wanted = threading.Event()
        self._starter: threading.Thread | None = None

    def prepare(self, *, claimed: bool = False) -> None:
        """Start one more spare in the background, unless one is starting, enough are ready (or none can start).
        The worker calls it when it starts, each time it finds no work, and as each job starts; `take` calls it with
        `claimed` for the job just claimed when none is ready, whatever the number of spares."""
        with self._changed:
            wanted = 1 if claimed else self.spares
            if self._closing or self._unavailable or self._starting or len(self._ready) >= wanted:
                return
            self._starting = True
            if self._starter is None:
                self._starter = threading.Thread(target=self._serve, name="job-sandbox-starter", daemon=True)
                self._starter.start()
        self._wanted.set()

    def take(self) -> JobSandbox | None:
        """The sandbox for the job just claimed: a ready spare, else the one starting (waited for), else a new one;
        None when none can start here."""
        self.end_job()
        with self._changed:
            ready = bool(self._ready)
        if not ready:
            self.prepare(claimed=True)
        with self._changed:
            self._changed.wait_for(lambda: bool(self._ready) or not self._starting)
            self.current = self._ready.pop(0) if self._ready else None
        return self.current

    def readiness_fd(self) -> int:
        """A pipe's read end that becomes readable once no spare is starting any more (it is up, or could not
        start): the job's runner waits on it before its first timed window. The caller closes it."""
        read_fd, write_fd = os.pipe()

        def say_when_ready() -> None:
            with self._changed:
                self._changed.wait_for(lambda: not self._starting)
            with contextlib.suppress(OSError):  # the runner may be gone already (a job that measured nothing)
                os.write(write_fd, b"1")
            os.close(write_fd)

        threading.Thread(target=say_when_ready, name="spare-readiness", daemon=True).start()
        return read_fd

    def end_job(self) -> None:
        """Stop the current job's sandbox (everything the job started and wrote goes with it)."""
        current, self.current = self.current, None
        if current is not None:
            current.close()

    def close(self) -> None:
        self.end_job()
        with self._changed:
            self._closing = True
            self._changed.wait_for(lambda: not self._starting)
            spares, self._ready = self._ready, []
        self._wanted.set()
        if self._starter is not None:
            self._starter.join()
        for spare in spares:
            spare.close()

    def _serve(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._closing:
                return
            sandbox = self._start_one()
            with self._changed:
                if sandbox is not None:
                    self._ready.append(sandbox)
                self._unavailable = sandbox is None
                self._starting = False
                self._changed.notify_all()

    def _start_one(self) -> JobSandbox | None:
        try:
            self.starts += 1
            inbox = self.work_dir / f"inbox-{self.starts}"
            inbox.mkdir(parents=True, exist_ok=True)  # bound read-only into the sandbox: it must exist first
            sandbox = JobSandbox(
                measurement_zygote(self.device, [str(inbox)], inductor=self.inductor, onnx=self.onnx), inbox
            )
            if sandbox.zygote.start():
                return sandbox
            log.warning("a job sandbox could not start (%s); each job starts its own", sandbox.zygote.problem)
            sandbox.close()
        except Exception:  # noqa: BLE001 - a worker without spares still works, one zygote per job
            log.exception("preparing the next job's sandbox failed; each job starts its own")
        return None
