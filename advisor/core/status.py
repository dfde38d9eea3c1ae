"""The status an analysis shows (API, dashboard, CLI): one vocabulary for the server and its clients.

A StrEnum, so the strings the API sends and the clients compare stay what they were. Torch-free. The queue's own
job statuses, which these are derived from, are `app.models.JobStatus`.
"""

from __future__ import annotations

from enum import StrEnum


class AnalysisStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Nothing will change it any more (a client stops following it)."""
        return self in TERMINAL_ANALYSIS_STATUSES


TERMINAL_ANALYSIS_STATUSES = frozenset({AnalysisStatus.DONE, AnalysisStatus.FAILED, AnalysisStatus.CANCELLED})
