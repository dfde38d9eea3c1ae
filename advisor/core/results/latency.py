"""Latency statistics of one timed window (advisor.core.stats.summarize), as stored."""

from __future__ import annotations

from advisor.core.results._base import Count, Label, Open


class LatencyStats(Open):
    # The statistics may be absent but never null: a latency whose numbers are not known is no latency (a
    # non-finite one makes app.results store the whole latency as null, which every view handles).
    n: Count = None  # type: ignore[assignment]
    median_ms: float = None  # type: ignore[assignment]
    p90_ms: float = None  # type: ignore[assignment]
    p99_ms: float = None  # type: ignore[assignment]
    mean_ms: float = None  # type: ignore[assignment]
    stdev_ms: float = None  # type: ignore[assignment]
    iqr_ms: float = None  # type: ignore[assignment]
    ci_low_ms: float = None  # type: ignore[assignment]  # 95% CI of the median
    ci_high_ms: float = None  # type: ignore[assignment]
    verdict: Label = None  # type: ignore[assignment]  # valid | noisy
    calls_per_sample: Count | None = None  # >1: each sample is the mean of this many back-to-back calls
    drift: float | None = None  # p10-p90 range of the per-block medians over the median
