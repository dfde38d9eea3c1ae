"""Latency statistics on known samples."""

from __future__ import annotations

import math
import random

import pytest

from advisor.core.stats import ci_relative_half_width, median_ci, median_ci_ranks, percentile, speedup, summarize


def test_percentiles_match_numpy_linear_interpolation():
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert percentile(values, 50) == 5.5
    assert percentile(values, 90) == pytest.approx(9.1)
    assert percentile(values, 99) == pytest.approx(9.91)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 10.0
    assert percentile([3.0], 99) == 3.0


def test_median_ci_uses_the_textbook_order_statistics():
    # n = 10: [x(2), x(9)] has 97.9 % coverage, [x(3), x(8)] only 89 %.
    assert median_ci_ranks(10) == (1, 8)
    # n = 100: the classic 95 % interval is [x(40), x(61)].
    assert median_ci_ranks(100) == (39, 60)
    # Too few samples for 95 %: the whole range.
    assert median_ci_ranks(5) == (0, 4)


def test_large_sample_ci_is_close_to_the_exact_one_and_covers_the_median():
    exact_lo, exact_hi = median_ci_ranks(1000)
    approx_lo, approx_hi = median_ci_ranks(1001)
    assert abs(exact_lo - approx_lo) <= 2 and abs(exact_hi - approx_hi) <= 2
    lo, hi = median_ci_ranks(100_000)
    assert lo < 50_000 < hi and hi - lo < 800


def test_median_ci_covers_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(1)
    covered = 0
    trials = 400
    for _ in range(trials):
        sample = sorted(rng.expovariate(1.0) for _ in range(60))
        lo, hi = median_ci(sample)
        covered += lo <= math.log(2) <= hi  # the exponential's true median
    assert 0.92 <= covered / trials <= 0.99


def test_summarize_converts_seconds_to_milliseconds_and_reports_everything():
    samples_s = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    stats = summarize(samples_s, noisy_iqr_ratio=10.0)
    assert stats["n"] == 100
    assert stats["median_ms"] == pytest.approx(50.5)
    assert stats["mean_ms"] == pytest.approx(50.5)
    assert stats["p90_ms"] == pytest.approx(90.1)
    assert stats["p99_ms"] == pytest.approx(99.01)
    assert stats["iqr_ms"] == pytest.approx(49.5)
    assert stats["stdev_ms"] == pytest.approx(29.0115, rel=1e-4)
    assert (stats["ci_low_ms"], stats["ci_high_ms"]) == (pytest.approx(40.0), pytest.approx(61.0))
    assert stats["verdict"] == "valid"


def test_block_timed_samples_record_how_many_calls_each_sample_averages():
    per_call = summarize([0.001, 0.002, 0.003])
    blocks = summarize([0.001, 0.002, 0.003], calls_per_sample=25)
    assert per_call["calls_per_sample"] == 1 and blocks["calls_per_sample"] == 25
    assert blocks["n"] == 3 and blocks["median_ms"] == pytest.approx(2.0)  # n counts samples (block means)


def test_drift_is_how_far_the_block_medians_move_which_the_ci_does_not_see():
    rng = random.Random(0)
    # 10 interleaved blocks of 20 samples; the machine runs 20 % slower during every other block
    moving = [(1.0 + (block % 2) * 0.2) * 1e-3 + rng.gauss(0, 1e-6) for block in range(10) for _ in range(20)]
    steady = [1.0e-3 + rng.gauss(0, 1e-6) for _ in range(200)]
    assert summarize(moving, block_sizes=[20] * 10)["drift"] == pytest.approx(0.2 / 1.1, rel=0.01)
    assert summarize(steady, block_sizes=[20] * 10)["drift"] < 0.01
    assert summarize(moving)["drift"] is None  # no block structure given
    assert summarize(moving, block_sizes=[50] * 4)["drift"] is None  # fewer than 5 blocks
    assert summarize(moving[:40], block_sizes=[4] * 10)["drift"] is None  # blocks too small for a median


def test_verdict_is_noisy_when_the_iqr_is_large_relative_to_the_median():
    tight = [1.0e-3 + (i % 5) * 1e-6 for i in range(200)]
    spread = [1.0e-3 * (1 + (i % 4) * 0.3) for i in range(200)]
    assert summarize(tight)["verdict"] == "valid"
    assert summarize(spread)["verdict"] == "noisy"


def test_ci_half_width_shrinks_with_more_samples():
    rng = random.Random(0)
    few = [1 + rng.gauss(0, 0.1) for _ in range(20)]
    many = [1 + rng.gauss(0, 0.1) for _ in range(2000)]
    assert ci_relative_half_width(many) < ci_relative_half_width(few) / 4


def test_speedup_is_the_ratio_of_medians_with_an_interval_around_it():
    fast = summarize([0.001] * 50 + [0.0011] * 50)
    slow = summarize([0.002] * 50 + [0.0022] * 50)
    ratio, (low, high) = speedup(slow, fast)
    assert ratio == pytest.approx(slow["median_ms"] / fast["median_ms"])
    assert low <= ratio <= high


def test_empty_samples_are_rejected():
    with pytest.raises(ValueError):
        summarize([])
