"""The answer published once the measured options are ranked, before the recommended option's details.

The details - other input sizes of the dynamic dims, the profiled "where the time goes" (eager's too), the
warm-cache compile - are measured for the recommendation and the leading options only after the ranking, and none of
them changes which option is recommended (advisor.core.decision.plan_pruning.detailed_options). On a slow model they
take a while (DistilBERT on a busy 2-core node: ~11 s of an ~80 s analysis), so the ranked results are published
first: the local CLI prints the answer, the worker posts them (`POST /api/v1/jobs/{id}/ranked`) and the analysis
shows them while its job runs on; the completion replaces them. Such a run's stored quality names the options whose
details are still to come (`quality.details.pending`). Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# starts the local CLI's stderr line with the early answer (benchmarks/zoo.py times the analysis to it)
RANKED_PREFIX = "ranked:"
PENDING_KEY = "pending"  # quality.details' list of the options whose details are still to come


def pending_value(run: Mapping[str, Any] | None) -> Any:
    """`quality.details.pending` of a run's dict as it is, whatever its type; None where the path is absent."""
    quality = (run or {}).get("quality")
    details = quality.get("details") if isinstance(quality, Mapping) else None
    return details.get(PENDING_KEY) if isinstance(details, Mapping) else None


def pending_details(run: Mapping[str, Any] | Any | None) -> list[str]:
    """The options whose details were still being measured when `run` (a MeasurementRun or its dict) was published;
    [] for a complete run, or one measured before runs said so."""
    if run is not None and not isinstance(run, Mapping):
        run = run.model_dump(exclude_unset=True)
    pending = pending_value(run)
    return [str(label) for label in pending] if isinstance(pending, list) else []


def pending_note(run: Mapping[str, Any] | Any | None) -> str | None:
    """What a ranked run's report says about it; None for a complete run."""
    pending = pending_details(run)
    if not pending:
        return None
    return (
        f"Ranked; the details of {', '.join(pending)} (other input sizes, profile, warm-cache compile) and eager's "
        "profile are still being measured - they do not change the recommendation"
    )


def ranked_line(recommendation: Mapping[str, Any], context: Mapping[str, Any], run: Mapping[str, Any] | None) -> str:
    """The one line the CLIs print when the answer is known: the headline, its confidence and what still follows."""
    from advisor.core.report import headline

    confidence = recommendation.get("confidence") or "?"
    pending = pending_details(run)
    follows = f"; the details of {', '.join(pending)} follow" if pending else ""
    return f"{RANKED_PREFIX} {headline(dict(recommendation), dict(context))} (confidence {confidence}){follows}"
