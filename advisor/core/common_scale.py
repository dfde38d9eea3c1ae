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
from dataclasses import dataclass
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
        factor = row_factor(row, reference)
        if factor is not None:
            factors.setdefault(option_label(row.get("backend"), row.get("mode")), factor)
    return reference, factors


def row_factor(row: Mapping[str, Any], reference: float | None) -> float | None:
    """The factor that puts one row's own times on the scale of `reference` (the run's reference eager median): the
    reference over the eager median timed in that row's process; None without one. The engine's summary quotes the
    chosen row's median through it, as every table does."""
    if not isinstance(row, Mapping) or not isinstance(reference, int | float) or not reference > 0:
        return None
    is_eager = row.get("backend") == "eager" or row.get("family") == "baseline"
    eager = row.get("eager_latency") or (row.get("latency") if is_eager else None)
    median = (eager or {}).get("median_ms") if isinstance(eager, Mapping) else None
    if isinstance(median, int | float) and not isinstance(median, bool) and median > 0:
        return float(reference) / float(median)
    return None


# every view's header for the scaled time column, and its footnote's opening (tests read both back)
SCALED_HEADER = "ms (on eager's scale)"


@dataclass(frozen=True)
class ComparableTime:
    """One option's times as every view quotes them: on the reference eager's scale where its process timed eager
    (`scaled`), else its own (said so). `own_median_ms` is what its own process measured - for the JSON and the
    details, never a second latency beside the scaled one in a table."""

    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    p99_ms: float
    own_median_ms: float
    scaled: bool


def comparable_times(run: Mapping[str, Any] | None) -> tuple[float | None, dict[str, ComparableTime]]:
    """(the reference eager median in ms, option label -> its ComparableTime) for every row with a timed median; the
    one function the CLI table, report.md, the text report and the dashboard's table and chart all read."""
    reference, factors = eager_scale(run)
    times: dict[str, ComparableTime] = {}
    rows = (run or {}).get("measurements") if isinstance(run, Mapping) else None
    for row in rows or []:
        latency = row.get("latency") if isinstance(row, Mapping) else None
        median = _positive((latency or {}).get("median_ms")) if isinstance(latency, Mapping) else None
        if median is None:
            continue
        label = option_label(row.get("backend"), row.get("mode"))
        factor = factors.get(label)
        own = [_positive(latency.get(key)) or median for key in ("ci_low_ms", "ci_high_ms", "p99_ms")]
        scale = factor if factor is not None else 1.0
        times.setdefault(
            label, ComparableTime(*(value * scale for value in (median, *own)), median, factor is not None)
        )
    return reference, times


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        return None
    return float(value)


def scale_footnote(reference: float | None, times: Mapping[str, ComparableTime]) -> str | None:
    """The one line under a table whose time columns are on eager's scale: what the scale is and the reference eager
    median it is anchored on; rows kept on their own process's times are named. None without a reference."""
    if reference is None or not times:
        return None
    own = [label for label, time in times.items() if not time.scaled]
    text = (
        f"{SCALED_HEADER}: each option's times on one eager's scale - x (the reference eager {reference:.3g} ms, the "
        "median of the eagers timed in each process / the eager timed beside it in its own process), so rows compare "
        "on a loaded node; each row's own median is in the JSON"
    )
    if own:
        text += f"; no eager was timed beside {', '.join(own)}: their own times (not scaled)"
    return text + "."
