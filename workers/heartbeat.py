"""The heartbeat thread: renews the lease of the running job and reports its latest progress event.

It lives in the agent process, not in the busy child, because a starved renewer loses the lease
(actions/runner #3539). It sends at once when the stage changes, otherwise every interval. It
ends in one of three ways the agent acts on: `cancel_requested`, `lease_lost`, or `stop()`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from advisor.core.progress import ProgressEvent
from workers.api import LeasedJob, LeaseLost, WorkerApi
from workers.retry import ApiError

log = logging.getLogger("npu_advisor.worker")


class Heartbeat:
    def __init__(
        self,
        api: WorkerApi,
        claim: LeasedJob,
        *,
        interval_s: float,
        lease_ttl_s: float,
        on_event: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.claim = claim
        self.interval_s = interval_s
        self.lease_ttl_s = lease_ttl_s
        self.cancel_requested = threading.Event()
        self.lease_lost = threading.Event()
        self.lost_reason = ""
        self._on_event = on_event
        self._clock = clock
        self._event = ProgressEvent("claimed")
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{claim.job_id}", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def update(self, event: ProgressEvent) -> None:
        """Called from the progress reader: remember the event and send it now if its stage changed."""
        with self._lock:
            changed = event.label != self._event.label
            self._event = event
        if changed:
            self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)

    @property
    def stage(self) -> str:
        with self._lock:
            return self._event.label

    def _run(self) -> None:
        last_renewed = self._clock()
        while not self._stopped.is_set():
            with self._lock:
                event = self._event
            try:
                reply = self.api.heartbeat(self.claim, event)
            except LeaseLost:
                self._end(self.lease_lost, "the server says this worker no longer holds the job (409)")
                return
            except ApiError as exc:
                if exc.status in (401, 403, 404):
                    self._end(self.lease_lost, f"heartbeat refused: {exc}")
                    return
                if self._clock() - last_renewed > self.lease_ttl_s:
                    self._end(self.lease_lost, f"no heartbeat got through for {self.lease_ttl_s:.0f} s: {exc}")
                    return
                log.warning("heartbeat for job %s failed, will retry: %s", self.claim.job_id, exc)
            else:
                last_renewed = self._clock()
                if reply.cancel_requested:
                    self._end(self.cancel_requested, "cancel requested")
                    return
            self._wake.wait(self.interval_s)
            self._wake.clear()

    def _end(self, event: threading.Event, reason: str) -> None:
        self.lost_reason = reason
        event.set()
        self._on_event()
