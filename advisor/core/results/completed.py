"""The body of a worker's `POST /api/v1/jobs/{id}/complete`, validated by app.results before it is stored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from advisor.core.results.inspection import Inspection
from advisor.core.results.measurement import MeasurementRun


class CompletedResults(BaseModel):
    """The worker's Inspection and MeasurementRun; anything else in the body is ignored."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    inspection: Inspection | None = None
    measurements: MeasurementRun | None = None
