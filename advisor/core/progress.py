"""The one progress event of an analysis, from the pipeline up to the API's `stage` and `progress` fields.

Why one type: progress crosses several hops (the pipeline in the worker's stage runner, the runner's stdout, the
agent's heartbeat thread, the heartbeat call, the job row, the analysis view, the CLI's stderr lines). Each hop
passes this event on (or its `to_json` form between processes) instead of re-encoding it in a format of its own.

`step` is the part of the job (download, inspect, measure, decide, upload; `ranked` is only the stage runner's
signal to its agent that the ranking was written, workers.ranking, never a heartbeat); `phase` is where one
measured variant is (the measuring child's own word: starting, compiling, timing, done, ...). The API shows `stage`
(`label`): the step, plus backend and mode while measuring, e.g. "measure:inductor:default". `fraction` is of the
whole job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ProgressEvent:
    step: str
    fraction: float = 0.0
    backend: str | None = None
    mode: str | None = None
    phase: str | None = None
    status: str | None = None  # a finished variant's row status (ok, fail_accuracy, timeout, ...)
    iterations: int | None = None
    timed_s: float | None = None

    @property
    def label(self) -> str:
        """The API's `stage`: "inspect", or "measure:BACKEND:MODE" while a variant is measured."""
        if self.backend is None:
            return self.step
        return f"{self.step}:{self.backend}:{self.mode or 'default'}"

    def wire(self) -> dict[str, Any]:
        """The heartbeat body (the worker protocol's `stage` and `progress`, the latter within [0, 1])."""
        return {"stage": self.label, "progress": max(0.0, min(1.0, self.fraction))}

    def to_json(self) -> dict[str, Any]:
        """A JSON object of the fields that are set (one line of the stage runner's stdout)."""
        data = {name: value for name, value in asdict(self).items() if value is not None}
        data["fraction"] = round(self.fraction, 4)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProgressEvent:
        """The inverse of `to_json`; ValueError, TypeError or KeyError for anything that is not such an event."""
        if not isinstance(data, Mapping) or not isinstance(data["step"], str):
            raise TypeError("not a progress event")
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data and data[name] is not None}
        known["fraction"] = float(known.get("fraction", 0.0))
        return cls(**known)

    @classmethod
    def from_measurement(cls, event: Mapping[str, Any], fraction: float) -> ProgressEvent:
        """A measurement child's event (advisor.harness.measurement's `progress` dicts), as part of the job."""
        return cls(
            step="measure",
            fraction=fraction,
            backend=str(event.get("backend")),
            mode=str(event.get("mode") or "default"),
            phase=event.get("stage"),
            status=event.get("status"),
            iterations=event.get("iterations"),
            timed_s=event.get("timed_s"),
        )
