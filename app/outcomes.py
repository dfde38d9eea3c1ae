"""What a finished job leaves on its analysis: the results and the engine's recommendation.

Torch-free: the server decides with `advisor.core.decision` only (it never imports the harness). Used by the
queue's completion (`app.job_queue.JobQueue.complete_with_results`, inside the completing transaction) and by
re-deciding a stored analysis (`POST /analyses/{id}/redecide`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlmodel import Session

from app.models import Analysis
from app.results import finite_json
from app.service_errors import ErrorCode, ServiceError


class DecisionFailed(ServiceError):
    """The decision engine could not produce a recommendation; the message says why."""

    code = ErrorCode.CONFLICT


def decide_recommendation(
    context: dict, inspection: dict | None, measurements: dict | None, *, source_report: dict | None = None
) -> dict:
    """Run the decision engine on stored data; the result carries `engine_version`. `source_report`: the analysis'
    source-side report (uploaded with its program), read by the engine from the inspection it decides with
    (advisor.core.decision.source_rules: graph breaks, recompiles, export failures); the stored inspection is not
    changed."""
    try:
        from advisor.core.context import parse_context
        from advisor.core.decision.engine import ENGINE_VERSION, decide
        from advisor.core.source_report import with_source_report

        inspection = with_source_report(inspection, source_report)
        recommendation = dict(decide(parse_context(context), inspection, measurements))
    except Exception as exc:  # noqa: BLE001 - surfaced to the user as the analysis' error
        raise DecisionFailed(f"the decision engine failed: {type(exc).__name__}: {exc}") from exc
    recommendation.setdefault("engine_version", ENGINE_VERSION)
    return finite_json(recommendation)  # e.g. a CI ratio over a zero lower bound is inf: stored as null


def store_outcome(
    session: Session,
    analysis_id: int,
    inspection: dict | None,
    measurements: dict | None,
    recommendation: dict,
    now: datetime,
) -> None:
    """Store a completed job's results on its analysis, with the recommendation. The results stay one JSON document
    (the MeasurementRun): every page and report reads it there (the flattened copy, table `measurement`, that nothing
    read went with migration 0007)."""
    analysis = session.get(Analysis, analysis_id)
    analysis.inspection = inspection
    analysis.measurements = measurements
    store_recommendation(analysis, recommendation, now)


def store_recommendation(analysis: Analysis, recommendation: dict, now: datetime) -> None:
    """Store the recommendation and its denormalised, indexed columns (the dashboard sorts on them)."""
    analysis.recommendation = recommendation
    columns = recommendation_columns(recommendation, analysis.measurements)
    analysis.recommended_backend = columns["recommended_backend"]
    analysis.recommended_mode = columns["recommended_mode"]
    analysis.speedup_vs_eager = columns["speedup_vs_eager"]
    analysis.engine_version = recommendation.get("engine_version")
    analysis.updated_at = now


def clear_recommendation(analysis: Analysis, now: datetime) -> None:
    """No recommendation (and none of its denormalised columns): what `store_recommendation` stored is withdrawn."""
    analysis.recommendation = None
    analysis.recommended_backend = analysis.recommended_mode = analysis.speedup_vs_eager = None
    analysis.engine_version = None
    analysis.updated_at = now


def recommendation_columns(recommendation: dict | None, measurements: dict | None) -> dict[str, Any]:
    """recommended_backend / recommended_mode ("default" when the engine names none) / speedup_vs_eager: the
    side-by-side speedup of the recommended backend+mode's measurement row, None when it was not measured."""
    backend = (recommendation or {}).get("backend")
    if not backend:
        return {"recommended_backend": None, "recommended_mode": None, "speedup_vs_eager": None}
    mode = (recommendation or {}).get("mode") or "default"
    speedup = None
    for row in (measurements or {}).get("measurements", []):
        if row.get("backend") == backend and (row.get("mode") or "default") == mode:
            value = row.get("speedup_vs_eager")
            speedup = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
            break
    return {"recommended_backend": backend, "recommended_mode": mode, "speedup_vs_eager": speedup}
