"""The relay of a job's ranking: the stage runner's results once its options are ranked, before the recommended
option's details (workers.stages writes them, then says so with a `ranked` progress line), posted to the server once
so that the analysis shows its answer while the details are measured (`POST /api/v1/jobs/{id}/ranked`). Best effort:
a refused or failed post is logged, and the completion carries the whole results anyway."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from advisor.core.bounded_json import loads
from workers.api import LeasedJob, WorkerApi
from workers.retry import ApiError

log = logging.getLogger("npu_advisor.worker")
FINISH_WAIT_S = 10.0  # the completion waits this long for a ranking still being posted, so it never lands after it


class RankingRelay:
    """Posts one job's ranking (the file at `path`) when the runner says it is written (`ranked`, called from the
    runner's progress reader), from a thread of its own, so that a slow server never delays the progress lines, a
    cancel or a lost lease. Because the progress reader is joined before the agent uploads (StageProcess.result),
    the post always starts before the completion, which `finish` then waits for."""

    def __init__(
        self, api: WorkerApi, claim: LeasedJob, path: Path, with_artifact: Callable[[dict | None], dict | None]
    ) -> None:
        """`with_artifact`: the inspection as the server checks it (with the job's verified artifact_sha256)."""
        self.api = api
        self.claim = claim
        self.path = path
        self.with_artifact = with_artifact
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ranked(self) -> None:
        with self._lock:
            if self._thread is not None:
                return  # one ranking per attempt
            try:
                ranked = loads(self.path.read_bytes(), "the ranking")
            except (OSError, ValueError) as exc:
                log.warning("job %s: the runner's ranking could not be read (%s)", self.claim.job_id, exc)
                return
            self._thread = threading.Thread(target=self._post, args=(ranked,), name="ranking", daemon=True)
            self._thread.start()

    def finish(self, timeout_s: float = FINISH_WAIT_S) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _post(self, ranked: dict) -> None:
        try:
            self.api.ranked(self.claim, self.with_artifact(ranked.get("inspection")), ranked.get("measurements"))
        except (ApiError, ValueError) as exc:  # LeaseLost included (the heartbeat sees that too); ValueError: not JSON
            log.info("job %s: the ranking was not taken (%s); the completion will carry it", self.claim.job_id, exc)
        else:
            log.info(
                "job %s: ranked; the analysis shows its recommendation while the details are measured",
                self.claim.job_id,
            )
