"""The analysis page's status strip: status, stage and queue position that agree, and a mark on an answer that
outlived its analysis unmeasured.

A queued job reads "waiting for a worker" whatever stage an earlier attempt left on it, and only a queued one has a
position; a running one reads its stage. The live-progress poller (app.web.queries.analysis_states) sends the same
words, so the page stays consistent after it loads. An analysis cancelled (or failed) after an inspection gave it an
unmeasured recommendation says that its answer is unmeasured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

WAITING = "waiting for a worker"
STARTING = "starting"
# why an analysis that ended without measurements still shows an answer: its inspection's (app.job_queue)
UNMEASURED_AFTER = {
    "cancelled": "cancelled before it was measured: this answer is unmeasured",
    "failed": "the measurement failed: this answer is unmeasured",
}


@dataclass(frozen=True)
class StatusStrip:
    status: str
    stage: str  # what the analysis is doing now, in the status' terms ("" once it ended)
    position: int | None  # its place in its device kind's queue; None unless queued
    note: str | None  # an unmeasured answer left by a cancelled or failed analysis, said so


def shown_stage(status: str | None, stage: str | None) -> str:
    """The stage as the strip shows it: a running job's own ("starting" before it reports one), "waiting for a
    worker" for a queued one (never a stale stage of an earlier attempt), nothing once the analysis ended."""
    if status == "running":
        return stage or STARTING
    return WAITING if status == "queued" else ""


def shown_position(status: str | None, position: Any) -> int | None:
    """The queue position, only for a queued analysis (a running or finished one is in no queue)."""
    counted = isinstance(position, int) and not isinstance(position, bool) and position > 0
    return position if status == "queued" and counted else None


def status_strip(analysis: Mapping[str, Any]) -> StatusStrip:
    """The strip of `analysis` (the API's AnalysisDetail as a dict)."""
    status = str(analysis.get("status") or "")
    recommendation = analysis.get("recommendation")
    unmeasured = isinstance(recommendation, Mapping) and recommendation.get("measured") is False
    return StatusStrip(
        status=status,
        stage=shown_stage(status, analysis.get("stage")),
        position=shown_position(status, analysis.get("queue_position")),
        note=UNMEASURED_AFTER.get(status) if unmeasured else None,
    )
