"""One comparable latency per option: each row's own times put on the scale of one reference eager.

Medians taken in different processes are not comparable on a loaded node (the same eager ran 307 ms in one process
and 6-20 ms beside each compiled option in others), while a side-by-side speedup is (its eager and its option were
timed interleaved in one process). So a chart or table that draws options beside each other scales each row's own
times by `reference eager median / the eager median timed in that row's process` - the option's median then reads
`reference / speedup`, the scale the decision ranks on (advisor.core.decision.candidates.reference_eager_ms). A row
with no side-by-side eager keeps its own times, said so. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.core.catalogue import option_label
from advisor.core.decision.candidates import reference_eager_ms


def eager_scale(run: Mapping[str, Any] | None) -> tuple[float | None, dict[str, float]]:
    """(the reference eager median in ms, option label -> the factor that puts that row's own times on its scale).
    A row absent from the map has no eager timed in its process (or the run has no reference)."""
    if not isinstance(run, Mapping):
        return None, {}
    rows = [row for row in run.get("measurements") or [] if isinstance(row, Mapping)]
    reference = reference_eager_ms({"measurements": rows})
    factors: dict[str, float] = {}
    if reference is None:
        return None, factors
    for row in rows:
        is_eager = row.get("backend") == "eager" or row.get("family") == "baseline"
        eager = row.get("eager_latency") or (row.get("latency") if is_eager else None)
        median = (eager or {}).get("median_ms") if isinstance(eager, Mapping) else None
        if isinstance(median, int | float) and not isinstance(median, bool) and median > 0:
            factors.setdefault(option_label(row.get("backend"), row.get("mode")), reference / float(median))
    return reference, factors
