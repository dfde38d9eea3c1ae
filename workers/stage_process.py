"""The agent's handle on one job's stage runner: start it, follow its progress, stop it.

The runner (``python -m workers.stages``) gets its own session, so it and every sandbox child it
spawns share one process group that `stop` signals as a whole: SIGTERM, a grace period, SIGKILL.
Its environment is scrubbed of secrets: the worker token never reaches model code.

What it sends back is parsed defensively (advisor.core.bounded_json): a progress line is read at most
`PROGRESS_LINE_CHARS` at a time, and a progress line or result nested deeper than `bounded_json.MAX_DEPTH` is a
`violation`: the runner and its children are killed at once and the job fails for good with that reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from advisor.core.bounded_json import TooDeep, loads
from advisor.core.job_wire import JobSpec
from advisor.core.progress import ProgressEvent
from advisor.harness.process_tree import descendant_pids, kill_groups
from advisor.harness.sandbox import scrubbed_environment

OnProgress = Callable[[ProgressEvent], None]
PROGRESS_LINE_CHARS = 64 * 1024  # a longer line is dropped unread (its rest skipped), never buffered


class StageProcess:
    """One running stage runner. `result()` is its RESULT.json once it exited cleanly, else None. Its ranking (the
    results once the options were ranked, before the recommended option's details) goes to `ranked_path(job_dir)`."""

    RANKED_FILE = "ranked.json"

    @classmethod
    def ranked_path(cls, job_dir: Path) -> Path:
        return job_dir / cls.RANKED_FILE

    def __init__(self, spec: JobSpec, job_dir: Path, on_progress: OnProgress, pass_fds: tuple[int, ...] = ()) -> None:
        """`pass_fds`: descriptors the runner inherits (the job sandbox's zygote socket, for `spec.zygote`)."""
        job_dir.mkdir(parents=True, exist_ok=True)
        self.spec_path = job_dir / "spec.json"
        self.result_path = job_dir / "result.json"
        ranked = self.ranked_path(job_dir)
        self.spec_path.write_text(spec.model_copy(update={"ranked_path": str(ranked)}).model_dump_json())
        self.result_path.unlink(missing_ok=True)
        ranked.unlink(missing_ok=True)
        self._on_progress = on_progress
        self._stderr_tail: deque[str] = deque(maxlen=40)
        self.violation: str | None = None  # what the runner sent that it may not send; it was killed for it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "workers.stages", str(self.spec_path), str(self.result_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=scrubbed_environment(allow_list=False),  # secrets out, settings in
            start_new_session=True,
            pass_fds=pass_fds,
        )
        self._readers = [
            threading.Thread(target=self._read_progress, name="stage-progress", daemon=True),
            threading.Thread(target=self._read_stderr, name="stage-stderr", daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout_s: float | None = None) -> int | None:
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 5.0) -> int:
        """SIGTERM the runner (it cancels its sandboxed stage), SIGKILL everything left after `grace_s`.

        Sandbox children run in sessions of their own, so the runner's process group does not reach
        them: their pids are collected from /proc before and during the stop and killed by group.
        """
        descendants = descendant_pids(self.process.pid)
        self._signal_group(signal.SIGTERM)
        if self.wait(grace_s) is None:
            descendants |= descendant_pids(self.process.pid)
            self._signal_group(signal.SIGKILL)
        code = self.process.wait()
        self._signal_group(signal.SIGKILL)
        kill_groups(descendants)
        return code

    def kill_now(self) -> None:
        """For the agent's second-signal exit: no grace for anyone."""
        descendants = descendant_pids(self.process.pid)
        self._signal_group(signal.SIGKILL)
        kill_groups(descendants)

    def result(self) -> dict[str, Any] | None:
        """Joins the output readers first: every progress line (a `ranked` one included) has been handled."""
        for reader in self._readers:
            reader.join(timeout=2.0)
        if self.violation is None and self.process.returncode == 0 and self.result_path.exists():
            try:
                return loads(self.result_path.read_bytes(), "its result")
            except TooDeep as exc:
                self.violation = f"the stage runner wrote a result nested deeper than {exc.limit} levels"
            except ValueError:
                self._stderr_tail.append("the stage runner's result is not JSON\n")
        return None

    def stderr_tail(self) -> str:
        return "".join(self._stderr_tail).strip()

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _read_progress(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while line := stream.readline(PROGRESS_LINE_CHARS + 1):
            if len(line) > PROGRESS_LINE_CHARS:
                while line and not line.endswith("\n"):  # the rest of an endless line, unkept
                    line = stream.readline(PROGRESS_LINE_CHARS + 1)
                self._stderr_tail.append(f"(a line over {PROGRESS_LINE_CHARS} characters on stdout, dropped)\n")
                continue
            try:
                event = ProgressEvent.from_json(loads(line, "a progress line"))
            except TooDeep as exc:
                self.violation = f"the stage runner sent a progress line nested deeper than {exc.limit} levels"
                self.kill_now()
                return
            except (ValueError, KeyError, TypeError):
                self._stderr_tail.append(line[:2000])  # a library printing to stdout: kept for the error report
            else:
                self._on_progress(event)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr_tail.append(line)
