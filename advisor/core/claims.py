"""One rule for "faster": an option is called faster (or slower) than another only when the 95% interval of their
ratio excludes 1; otherwise the two are within noise. The engine, the reports, the CLI and the dashboard all read
an order through `order` (or `speedup_verdict` for a speedup against eager), and every sentence that quotes a ratio
quotes its verdict with it (`ratio_phrase`), so no text can claim an order its interval does not support.

A ratio here is "how many times as fast" (the slower one's time over the faster one's): a speedup vs eager, or the
paired ratio of two options' speedups (advisor.core.decision.candidates.compare). Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

Order = Literal["faster", "slower", "within noise"]
FASTER: Order = "faster"
SLOWER: Order = "slower"
WITHIN_NOISE: Order = "within noise"
# the words a ratio's verdict is written with, right after its interval (tests/core/test_claims.py reads them back)
VERDICT_WORDS: dict[Order, str] = {
    FASTER: "faster beyond the noise",
    SLOWER: "slower beyond the noise",
    WITHIN_NOISE: "within noise",
}


def order(interval: Sequence[float | None] | None) -> Order:
    """The order a ratio's 95% interval supports: FASTER when it lies entirely above 1, SLOWER when entirely below 1,
    WITHIN_NOISE otherwise (an interval that touches or straddles 1, or none at all)."""
    if not isinstance(interval, Sequence) or isinstance(interval, str) or len(interval) != 2:
        return WITHIN_NOISE
    low, high = (_number(end) for end in interval)
    if low is not None and math.isfinite(low) and low > 1.0:
        return FASTER
    if high is not None and high < 1.0:
        return SLOWER
    return WITHIN_NOISE


def _number(value: object) -> float | None:
    """An interval end as a float; None for anything else (a stored row's junk claims no order)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return None
    return float(value)


def speedup_verdict(interval: Sequence[float | None] | None) -> str:
    """A speedup against eager in words, by `order`: "faster than eager", "slower than eager" or "within noise of
    eager" (what the dashboard's badges and the CLI tables show next to a speedup)."""
    return {FASTER: "faster than eager", SLOWER: "slower than eager", WITHIN_NOISE: "within noise of eager"}[
        order(interval)
    ]


def verdict_class(interval: Sequence[float | None] | None) -> str:
    """The badge class of a speedup's verdict: "ok" faster, "bad" slower, "medium" within noise."""
    return {FASTER: "ok", SLOWER: "bad", WITHIN_NOISE: "medium"}[order(interval)]


def fmt_bound(value: float) -> str:
    """An interval's end with two decimals, or more where two would round it onto 1 (1.003 reads "1.003", not
    "1.00"): the printed interval supports the same order as the measured one."""
    number = _number(value)
    if number is None:
        return "?"
    if not math.isfinite(number):
        return "inf"
    value = number
    for digits in range(2, 7):
        text = f"{value:.{digits}f}"
        if value == 1.0 or float(text) != 1.0:
            return text
    return text


def fmt_sig(value: float) -> str:
    """Three significant digits ("40.6", "179"), or `fmt_bound`'s where that would round the value onto 1."""
    text = f"{value:.3g}"
    return fmt_bound(value) if float(text) == 1.0 and value != 1.0 else text


def interval_text(interval: Sequence[float]) -> str:
    """ "[95% CI 1.02-1.17x]"."""
    return f"[95% CI {fmt_bound(interval[0])}-{fmt_bound(interval[1])}x]"


def ratio_phrase(fast: str, slow: str, ratio: float, interval: Sequence[float], basis: str = "") -> str:
    """ "a ran 1.09x as fast as b [95% CI 1.02-1.17x]: faster beyond the noise" - the ratio, its interval and the
    order the interval supports, always together. `basis` (e.g. "paired: ...") goes in brackets after the verdict."""
    verdict = VERDICT_WORDS[order(interval)]
    tail = f" ({basis})" if basis else ""
    return f"{fast} ran {ratio:.2f}x as fast as {slow} {interval_text(interval)}: {verdict}{tail}"


# a point estimate alone (a swept shape's speedup has no interval) supports no order: what the text says instead
NO_INTERVAL = "single estimates without an interval, so no order beyond the noise"


def lead_words(interval: Sequence[float | None] | None) -> str:
    """How a sentence says which option came out on top, by `order` of the interval of its lead over the runner-up:
    "is the fastest" only when that interval lies above 1, "has the highest estimate" otherwise (none included)."""
    return "is the fastest" if order(interval) == FASTER else "has the highest estimate"


def ratio_range_words(low: float, high: float, interval: Sequence[float | None] | None, than: str) -> str:
    """ "ran 1.20x to 1.40x as fast as `than`", followed by its verdict by `order` (NO_INTERVAL without one): a range
    of point estimates is never written "faster" unless an interval backs it."""
    verdict = VERDICT_WORDS[order(interval)] if interval else NO_INTERVAL
    return f"ran {low:.2f}x to {high:.2f}x as fast as {than} ({verdict})"
