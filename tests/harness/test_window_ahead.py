"""Racing's dual in the timed window (issue 46 item 2): a window stops early once its option is clearly ahead of
every other option so far - its speedup interval wholly above theirs, tight enough to rank on "high", neither side
spread - and only then. Timed with a scripted clock, so each case is exact whatever the machine's load."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from advisor.core import noise
from advisor.harness.measurement.timing import TimingPolicy, time_side_by_side

# a window this policy times in full takes at least 200 samples a side (min_iters)
LONG = TimingPolicy(min_iters=200, min_time_s=0.0, max_time_s=0.3, ci_target=1e-6, warmup_iters=2, loaded_min_iters=10)


class ScriptedDevice:
    """A device whose timer reports the duration each call returns instead of measuring it."""

    def timer(self) -> Callable[[Callable[[], Any]], tuple[float, Any]]:
        def scripted(call: Callable[[], Any]) -> tuple[float, Any]:
            seconds = call()
            return seconds, seconds

        return scripted


def calls(median_s: float, spread: float) -> Callable[[], float]:
    """A callable whose calls 'last' around `median_s`, cycling through +-`spread` (relative)."""
    steps: Iterator[float] = itertools.cycle([1.0 - spread, 1.0 - spread / 2, 1.0, 1.0 + spread / 2, 1.0 + spread])
    return lambda: median_s * next(steps)


def window(backend_s: float, eager_s: float, spread: float, race_above: float | None):
    fns = {"backend": calls(backend_s, spread), "eager": calls(eager_s, spread)}
    policy = TimingPolicy(**{**LONG.__dict__, "race_above": race_above})
    return time_side_by_side(fns, (), ScriptedDevice(), policy, lambda _: None)  # type: ignore[arg-type]


def speedup_ratio(samples: dict[str, list[float]]) -> float:
    from advisor.core.stats import median_ci

    eager_low, eager_high = median_ci(sorted(samples["eager"]))
    backend_low, backend_high = median_ci(sorted(samples["backend"]))
    return (eager_high / backend_low) / (eager_low / backend_high)


def test_a_window_clearly_ahead_of_every_other_option_stops_at_its_floor() -> None:
    full = window(0.002, 0.004, 0.01, None)  # 2x eager; no other compiled option measured: no stop
    ahead = window(0.002, 0.004, 0.01, 1.5)  # the best other option reaches 1.5x at most
    assert not full.ahead and min(len(t) for t in full.samples.values()) >= LONG.min_iters
    assert ahead.ahead and not ahead.raced
    assert 10 <= min(len(t) for t in ahead.samples.values()) < LONG.min_iters
    assert speedup_ratio(ahead.samples) <= noise.HIGH_CONFIDENCE_MAX_CI_RATIO  # "high" stays possible


def test_a_window_not_wholly_above_the_field_or_too_spread_is_timed_in_full() -> None:
    overlapping = window(0.002, 0.004, 0.01, 2.0)  # its interval starts at 2x: not wholly above 2x
    spread = window(0.002, 0.004, 0.3, 1.2)  # far ahead, but its samples spread 30 %: the row would be noisy
    for timed in (overlapping, spread):
        assert not timed.ahead and min(len(t) for t in timed.samples.values()) >= LONG.min_iters
