"""Latency statistics: percentiles, a distribution-free CI of the median and a valid/noisy verdict.

Pure Python (no numpy, no torch) so it is cheap to import and easy to test with known samples.
The median's confidence interval uses order statistics (the sign-test interval): with n samples,
the number of samples below the true median is Binomial(n, 1/2), so the pair of order statistics
(x_(j), x_(k)) covers the median with probability P(j <= B < k). No normality assumption, which
matters for latencies (right-skewed, with outliers from a noisy neighbour).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

# IQR / median above this is "noisy" (torch.utils.benchmark's adaptive_autorange uses the same 0.1).
NOISY_IQR_RATIO = 0.1
# drift needs this many interleaved blocks of at least this many samples each
DRIFT_MIN_BLOCKS = 5
DRIFT_MIN_BLOCK_SAMPLES = 5
_EXACT_BINOMIAL_MAX_N = 1000


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already sorted values; q in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample")
    if len(sorted_values) == 1:
        return float(sorted_values[0])
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


def _binomial_half_cdf(n: int) -> list[float]:
    """cdf[i] = P(Binomial(n, 1/2) <= i), exact (n small enough that 0.5**n does not underflow)."""
    cdf, total, pmf = [], 0.0, 0.5**n
    for i in range(n + 1):
        total += pmf
        cdf.append(total)
        pmf = pmf * (n - i) / (i + 1)
    return cdf


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the order statistics bounding the median with >= `confidence`.

    For samples too small to reach the confidence, returns the full range (0, n - 1).
    """
    if n <= 0:
        raise ValueError("CI of an empty sample")
    alpha = 1.0 - confidence
    if n <= _EXACT_BINOMIAL_MAX_N:
        cdf = _binomial_half_cdf(n)
        # largest j (1-based) with P(B <= j - 1) <= alpha / 2; the interval is [x_(j), x_(n + 1 - j)]
        j = 0
        while j + 1 <= n and cdf[j] <= alpha / 2:
            j += 1
        if j == 0:
            return 0, n - 1
        return j - 1, n - j
    z = _normal_quantile(1 - alpha / 2)
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half) - 1)
    hi = min(n - 1, math.ceil(n / 2 + half))
    return lo, hi


def median_ci(sorted_values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    lo, hi = median_ci_ranks(len(sorted_values), confidence)
    return float(sorted_values[lo]), float(sorted_values[hi])


def ci_relative_half_width(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half the CI width of the median divided by the median (0.02 = "median known to +-2 %")."""
    ordered = sorted(samples)
    med = percentile(ordered, 50)
    lo, hi = median_ci(ordered, confidence)
    if med <= 0:
        return math.inf
    return (hi - lo) / 2 / med


def summarize(
    samples_s: Sequence[float],
    *,
    noisy_iqr_ratio: float = NOISY_IQR_RATIO,
    calls_per_sample: int = 1,
    block_sizes: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Summarise per-call times in **seconds** as a LatencyStats in **milliseconds**.

    With `calls_per_sample` k > 1 each sample is the mean per-call time of a block of k back-to-back
    calls (how fast models are timed, like torch.utils.benchmark's blocks): n counts blocks, and the
    percentiles, IQR and CI are those of block means - a p99 says how slow a bad block was on average,
    not how slow the single slowest call was. k is recorded as `calls_per_sample`.

    `block_sizes`: how many consecutive samples each interleaved block holds (in order); gives `drift`.
    """
    if not samples_s:
        raise ValueError("no samples to summarise")
    ordered = sorted(float(s) * 1e3 for s in samples_s)
    n = len(ordered)
    med = percentile(ordered, 50)
    mean = sum(ordered) / n
    stdev = math.sqrt(sum((x - mean) ** 2 for x in ordered) / (n - 1)) if n > 1 else 0.0
    iqr = percentile(ordered, 75) - percentile(ordered, 25)
    ci_low, ci_high = median_ci(ordered)
    noisy = med <= 0 or iqr / med > noisy_iqr_ratio
    return {
        "n": n,
        "median_ms": med,
        "p90_ms": percentile(ordered, 90),
        "p99_ms": percentile(ordered, 99),
        "mean_ms": mean,
        "stdev_ms": stdev,
        "iqr_ms": iqr,
        "ci_low_ms": ci_low,
        "ci_high_ms": ci_high,
        "verdict": "noisy" if noisy else "valid",
        "calls_per_sample": calls_per_sample,
        "drift": drift(samples_s, block_sizes) if block_sizes else None,
    }


def drift(samples: Sequence[float], block_sizes: Sequence[int]) -> float | None:
    """(p90 - p10) / median of the per-block medians: how much the speed moved between the interleaved blocks
    of one window (~50 ms each). The median's CI is computed from the samples as if they were independent;
    a machine whose speed wanders (a shared VM) moves whole blocks, and this says by how much. None with
    fewer than DRIFT_MIN_BLOCKS blocks of DRIFT_MIN_BLOCK_SAMPLES samples (slow models: one call per block)."""
    medians, start = [], 0
    for size in block_sizes:
        block = sorted(samples[start : start + size])
        start += size
        if len(block) >= DRIFT_MIN_BLOCK_SAMPLES:
            medians.append(percentile(block, 50))
    if len(medians) < DRIFT_MIN_BLOCKS:
        return None
    medians.sort()
    middle = percentile(medians, 50)
    return (percentile(medians, 90) - percentile(medians, 10)) / middle if middle > 0 else None


def speedup(baseline: dict[str, Any], candidate: dict[str, Any]) -> tuple[float, list[float]]:
    """baseline median / candidate median, with a conservative interval from the two medians' CIs."""
    ratio = baseline["median_ms"] / candidate["median_ms"]
    low = baseline["ci_low_ms"] / candidate["ci_high_ms"]
    high = baseline["ci_high_ms"] / candidate["ci_low_ms"] if candidate["ci_low_ms"] > 0 else math.inf
    return ratio, [low, high]


def _normal_quantile(p: float) -> float:
    """Inverse standard normal CDF (Acklam's rational approximation, |error| < 1.2e-9)."""
    a = (
        -3.969683028665376e01,
        2.209460984245205e02,
        -2.759285104469687e02,
        1.383577518672690e02,
        -3.066479806614716e01,
        2.506628277459239e00,
    )
    b = (
        -5.447609879822406e01,
        1.615858368580409e02,
        -1.556989798598866e02,
        6.680131188771972e01,
        -1.328068155288572e01,
    )
    c = (
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e00,
        -2.549732539343734e00,
        4.374664141464968e00,
        2.938163982698783e00,
    )
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    if p < 0.02425:
        q = math.sqrt(-2 * math.log(p))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
        )
    if p > 1 - 0.02425:
        return -_normal_quantile(1 - p)
    q = p - 0.5
    r = q * q
    return (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * q
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    )
