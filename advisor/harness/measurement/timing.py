"""Side-by-side timing in the child: warm-up, blocks of k calls, eager and the variant interleaved, until the
medians' CIs are tight or the cap is reached (TimingPolicy).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from advisor.harness import devices
from advisor.harness.measurement.errors import stage_error

_WARM_UP_S = 0.02  # warm-up lasts at least this long: the fastest of many calls sizes the timed blocks
SETTLE_FREE_SAMPLE_S = 0.1  # samples this long get no settle sample: a switch's few ms are under 3% of them
# ... and are slow enough that each costs what a quiet fast model's whole block does: their warm-up stops after two
# calls of this length (the compile's or the reference's call came before), and past the cap a loaded window stops
# once every such callable has LOADED_SLOW_MIN_ITERS samples (a loaded GPT-2's 500-600 ms calls: 10 + 10 samples and
# 3 + 3 warm-up calls made each side-by-side window ~14 s, where the truth's torch.utils.benchmark took ~2 s)
LOADED_SLOW_MIN_ITERS = 5


@dataclass
class TimingPolicy:
    """When the steady-state timing stops: at least `min_iters` samples and `min_time_s`, and the 95 % CI of
    every median within +-`ci_target` (relative), or the cap `max_time_s` (which still waits for `min_iters`,
    up to 10x longer, so slow models get usable statistics - but not when the samples say the node is loaded:
    see `loaded_min_iters`). Defaults suit a 2-core CI box.

    A sample is one call, or for calls faster than `sample_time_s` the mean of k back-to-back calls timed
    as one block (k chosen after warm-up so a block lasts >= `sample_time_s`), as torch.utils.benchmark
    does: the median of block means is what `blocked_autorange` reports."""

    min_iters: int = 20
    min_time_s: float = 0.5
    max_time_s: float = 5.0
    ci_target: float = 0.02
    warmup_iters: int = 3
    block_time_s: float = 0.05  # each interleaved block of one callable lasts about this long
    sample_time_s: float = 0.001  # calls faster than this are timed k at a time (one sample = a block mean)
    dynamic_sizes: int = 2  # extra sizes measured when the model has dynamic dims
    warm_cache: bool = True  # measure the warm-cache compile in a second child
    profile: bool = True  # after timing, a torch.profiler pass: where the time goes (measurement.profiler_pass)
    # past the cap, short of `min_iters`: stop once every callable has this many samples (LOADED_SLOW_MIN_ITERS for
    # samples of 0.1 s or more) and one of them spreads beyond stats.NOISY_IQR_RATIO (the node is loaded: more of
    # its samples only take longer, the row is noisy either way). Busy DistilBERT: each window ran 24 s for 20
    # samples of ~300 ms calls; 10 take half that.
    loaded_min_iters: int = 10
    # past the cap, a callable whose samples last SETTLE_FREE_SAMPLE_S or more has enough with this many, loaded or
    # not (None: `min_iters`); the extra shapes' windows, which quote a median, not a CI (short_policy)
    slow_min_iters: int | None = None
    # racing (advisor.core.decision.racing): the low end of the leader's speedup interval so far. Once every callable
    # has its floor of samples (as for `loaded_min_iters`) and this option's speedup interval lies wholly below it,
    # the window stops: the option is clearly behind, and more samples could not make it the pick. None: no race.
    race_below: float | None = None
    # the dual (racing.RaceBound.field_high): the highest high end of the other compiled options' speedup intervals
    # so far. Once the option's interval lies wholly above it, is tight enough for "high" confidence and neither side
    # is spread or drifting past the noise thresholds, the window stops: it leads, and more samples could not change
    # that. None: no such stop (no compiled option measured yet, a context where the compile time may decide).
    race_above: float | None = None


def short_policy(policy: TimingPolicy) -> TimingPolicy:
    """The shorter windows of the extra shapes (dynamic sizes, shape sweeps): a looser CI, a quarter of the cap."""
    return TimingPolicy(
        min_iters=10,
        min_time_s=min(0.2, policy.min_time_s),
        max_time_s=max(0.2, policy.max_time_s / 4),
        ci_target=policy.ci_target * 2,
        warmup_iters=1,
        block_time_s=policy.block_time_s,
        sample_time_s=policy.sample_time_s,
        loaded_min_iters=min(5, policy.loaded_min_iters),  # an extra shape's row quotes a median, not a CI
        slow_min_iters=LOADED_SLOW_MIN_ITERS,  # busy DistilBERT: its two extra sizes (batch 4, 8) 13.7 s -> 10 s
    )


# ------------------------------------------------------------------ timing
class TimedWindow(NamedTuple):
    """What `time_side_by_side` measured, per callable name."""

    samples: dict[str, list[float]]  # per-call seconds; a sample is the mean of calls_per_sample calls
    calls_per_sample: dict[str, int]
    seconds: float  # spent timing
    block_sizes: dict[str, list[int]]  # samples per interleaved block, in order (for `stats.drift`)
    raced: bool = False  # stopped early: clearly behind the leader it raced (TimingPolicy.race_below)
    ahead: bool = False  # stopped early: clearly ahead of every other option so far (TimingPolicy.race_above)


def time_side_by_side(
    fns: dict[str, Callable[..., Any]],
    inputs: tuple,
    dev: devices.Device,
    policy: TimingPolicy,
    on_round: Callable[[int], None],
) -> TimedWindow:
    """Interleave blocks of each callable (order alternating per round) until the policy says stop.

    A sample is the mean of `calls_per_sample[name]` back-to-back calls, synchronised once at its end. A block that
    follows another callable's calls starts with one sample that is not kept (a settle sample): the first calls
    after a switch pay for the other runtime (its threads still spinning or waking, its data in the caches). ResNet-18
    with ONNX Runtime interleaved with eager: the IQR of ORT's samples was 12-14% with that sample kept, 1-5%
    without it, and a first-pass row that noisy is timed again. Blocks alternate A B, B A: half the boundaries are
    no switch. The cost of a switch is a few milliseconds, not a share of the call (first call after a switch /
    the others, 2026-12-06: ORT +2.3 ms at 16 ms, +1.6 ms at 23 ms; torch's own runtimes +0.3 ms at 2-4 ms, none
    at 55 ms), so a callable whose samples last SETTLE_FREE_SAMPLE_S or more gets no settle sample: there it would
    only double the time per kept sample (a loaded node's 300-600 ms eager calls).
    """
    timer = dev.timer()
    calls_per_sample: dict[str, int] = {}
    run_sample: dict[str, Callable[[], Any]] = {}
    sample_s: dict[str, float] = {}  # how long one sample of each lasts: its fastest warm-up, then its last block
    for name, fn in fns.items():
        try:
            per_call = _warm_up(timer, lambda fn=fn: fn(*inputs), policy.warmup_iters)
        except Exception as exc:
            raise stage_error(exc, f"warm-up of {name}") from exc
        k = _calls_per_sample(policy, per_call)
        calls_per_sample[name] = k
        sample_s[name] = per_call * k
        run_sample[name] = _repeated(fn, inputs, k)
    samples_per_block = {name: _block_size(policy, sample_s[name], max(sample_s.values())) for name in fns}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    block_sizes: dict[str, list[int]] = {name: [] for name in fns}
    order = list(fns)
    previous = list(fns)[-1]  # the callable that ran last (its warm-up, then the block just timed)
    started, raced, ahead = time.perf_counter(), False, False
    while True:
        for name in order:
            run, times, k = run_sample[name], samples[name], calls_per_sample[name]
            try:
                if previous != name and sample_s[name] < SETTLE_FREE_SAMPLE_S:
                    timer(run)  # the settle sample: synchronised like the others, not kept
                previous = name
                for _ in range(samples_per_block[name]):
                    times.append(timer(run)[0] / k)
            except Exception as exc:
                raise stage_error(exc, f"timed calls of {name} (after {len(times) * k} calls)") from exc
            block_sizes[name].append(samples_per_block[name])
            # re-size the next block from this block's median (warm-up calls can be far slower than steady state)
            sample_s[name] = statistics.median(times[-samples_per_block[name] :]) * k
            samples_per_block[name] = _block_size(policy, sample_s[name], max(sample_s.values()))
        order.reverse()
        on_round(len(samples["backend"]) * calls_per_sample["backend"])
        if raced := _behind_the_leader(policy, samples, sample_s):
            break
        elapsed = time.perf_counter() - started
        if ahead := _ahead_of_the_field(policy, samples, sample_s, block_sizes, elapsed):
            break
        if _window_done(policy, samples, sample_s, elapsed):
            break
    return TimedWindow(samples, calls_per_sample, time.perf_counter() - started, block_sizes, raced, ahead)


def _window_done(
    policy: TimingPolicy, samples: dict[str, list[float]], sample_s: dict[str, float], elapsed: float
) -> bool:
    """Whether the window stops after this round (see TimingPolicy)."""
    from advisor.core.stats import ci_relative_half_width

    enough_samples = all(len(t) >= policy.min_iters for t in samples.values())
    if elapsed >= policy.max_time_s:
        slow_floor = min(LOADED_SLOW_MIN_ITERS, policy.loaded_min_iters)
        floors = {name: _floor(sample_s[name], slow_floor, policy.loaded_min_iters) for name in samples}
        slow_enough = policy.slow_min_iters is not None and all(
            len(t) >= _floor(sample_s[name], policy.slow_min_iters, policy.min_iters) for name, t in samples.items()
        )
        if enough_samples or slow_enough or elapsed >= _hard_cap_s(policy) or _loaded(samples, floors):
            return True
    if enough_samples and elapsed >= policy.min_time_s:
        return all(ci_relative_half_width(t) <= policy.ci_target for t in samples.values())
    return False


def _behind_the_leader(policy: TimingPolicy, samples: dict[str, list[float]], sample_s: dict[str, float]) -> bool:
    """Racing: every callable has its floor of samples and the option's speedup interval (eager's median CI high
    end over the option's low end, as `stats.speedup` bounds it) lies wholly below `race_below`."""
    from advisor.core.decision.racing import behind
    from advisor.core.stats import median_ci

    if policy.race_below is None or "eager" not in samples or not _race_floor_reached(policy, samples, sample_s):
        return False
    eager_high = median_ci(sorted(samples["eager"]))[1]
    backend_low = median_ci(sorted(samples["backend"]))[0]
    return backend_low > 0 and behind(eager_high / backend_low, policy.race_below)


def _ahead_of_the_field(
    policy: TimingPolicy,
    samples: dict[str, list[float]],
    sample_s: dict[str, float],
    block_sizes: dict[str, list[int]],
    elapsed: float,
) -> bool:
    """Racing's dual: past `min_time_s`, every callable has its floor of samples, the option's speedup interval (as
    the row will quote it) lies wholly above `race_above` with a width "high" confidence accepts, and neither side's
    summary is noisy or drifting (what advisor.core.noise.row_noise reads) - a stop that leaves the row as resolved as
    the full window would have, only less tightly known."""
    from advisor.core import noise, stats
    from advisor.core.decision.racing import ahead

    if policy.race_above is None or "eager" not in samples or elapsed < policy.min_time_s:
        return False
    if not _race_floor_reached(policy, samples, sample_s):
        return False
    sides = {name: stats.summarize(times, block_sizes=block_sizes[name]) for name, times in samples.items()}
    if any(side["verdict"] == "noisy" or (side["drift"] or 0.0) > noise.BRACKET_DRIFT_MAX for side in sides.values()):
        return False
    if min(side["ci_low_ms"] for side in sides.values()) <= 0:
        return False
    _, (low, high) = stats.speedup(sides["eager"], sides["backend"])
    return ahead(low, policy.race_above) and high / low <= noise.HIGH_CONFIDENCE_MAX_CI_RATIO


def _race_floor_reached(policy: TimingPolicy, samples: dict[str, list[float]], sample_s: dict[str, float]) -> bool:
    """Whether every callable has the floor of samples a racing stop (behind or ahead) needs: as for
    `loaded_min_iters`, LOADED_SLOW_MIN_ITERS for samples of SETTLE_FREE_SAMPLE_S or more."""
    floor = min(LOADED_SLOW_MIN_ITERS, policy.loaded_min_iters)
    return all(len(t) >= _floor(sample_s[name], floor, policy.loaded_min_iters) for name, t in samples.items())


def _warm_up(timer: Callable[[Callable[[], Any]], tuple[float, Any]], call: Callable[[], Any], iters: int) -> float:
    """Call at least `iters` times and for at least _WARM_UP_S - or twice, when both calls last SETTLE_FREE_SAMPLE_S
    or more; the fastest call (robust to descheduling)."""
    fastest, spent, n = float("inf"), 0.0, 0
    while n < max(1, iters) or spent < _WARM_UP_S:
        seconds = timer(call)[0]
        fastest, spent, n = min(fastest, seconds), spent + seconds, n + 1
        if n >= 2 and fastest >= SETTLE_FREE_SAMPLE_S:
            break
    return fastest


def _floor(sample_s: float, slow: int, fast: int) -> int:
    """A callable's floor of samples: `slow` for samples of SETTLE_FREE_SAMPLE_S or more, else `fast`."""
    return slow if sample_s >= SETTLE_FREE_SAMPLE_S else fast


def _calls_per_sample(policy: TimingPolicy, per_call_s: float) -> int:
    """k such that k calls last >= `sample_time_s` (1 for calls that long already)."""
    return max(1, min(10_000, math.ceil(policy.sample_time_s / max(per_call_s, 1e-7))))


def _repeated(fn: Callable[..., Any], inputs: tuple, k: int) -> Callable[[], Any]:
    """A callable running `fn(*inputs)` k times back to back, returning the last output."""
    if k == 1:
        return lambda: fn(*inputs)

    def run_k() -> Any:
        out = None
        for _ in range(k):
            out = fn(*inputs)
        return out

    return run_k


def _block_size(policy: TimingPolicy, per_sample_s: float, slowest_sample_s: float = 0.0) -> int:
    """Samples per interleaved block so that one block of one callable lasts about `block_time_s`; a fast callable
    next to a slow one (samples of SETTLE_FREE_SAMPLE_S or more) takes enough per block to reach its floor of
    samples on a loaded node (`loaded_min_iters`) in the rounds the slow one takes to reach its own
    (LOADED_SLOW_MIN_ITERS): next to a loaded eager's 500 ms calls, ONNX Runtime's 43 ms ones had one sample per
    round, and its ten came ten eager calls later."""
    n = round(policy.block_time_s / max(per_sample_s, 1e-6))
    if slowest_sample_s >= SETTLE_FREE_SAMPLE_S > per_sample_s:
        n = max(n, math.ceil(policy.loaded_min_iters / min(LOADED_SLOW_MIN_ITERS, policy.loaded_min_iters)))
    return max(1, min(1000, n))


def _loaded(samples: dict[str, list[float]], floors: dict[str, int]) -> bool:
    """Every callable has its floor of samples and one of them spreads as on a loaded node (a "noisy" verdict)."""
    from advisor.core.stats import summarize

    if any(len(times) < floors[name] for name, times in samples.items()):
        return False
    return any(summarize(times)["verdict"] == "noisy" for times in samples.values())


def _hard_cap_s(policy: TimingPolicy) -> float:
    """The cap yields to `min_iters` for slow models, up to this long."""
    return max(10 * policy.max_time_s, 30.0)


def summaries(window: TimedWindow, is_baseline: bool) -> dict:
    from advisor.core.stats import speedup, summarize

    def stats(name: str) -> Any:
        return summarize(
            window.samples[name], calls_per_sample=window.calls_per_sample[name], block_sizes=window.block_sizes[name]
        )

    latency = stats("backend")
    if is_baseline:
        return {"latency": latency, "eager_latency": latency, "speedup_vs_eager": 1.0, "speedup_ci": None}
    eager = stats("eager")
    ratio, interval = speedup(eager, latency)
    return {"latency": latency, "eager_latency": eager, "speedup_vs_eager": ratio, "speedup_ci": interval}


def throughput(inputs: tuple, median_ms: float) -> dict | None:
    import torch

    first = next((t for t in inputs if isinstance(t, torch.Tensor) and t.dim() > 0), None)
    if first is None or median_ms <= 0:
        return None
    per_s = 1e3 / median_ms
    tokens = first.shape[0] * first.shape[1] * per_s if first.dim() == 2 and not first.is_floating_point() else None
    return {"samples_per_s": first.shape[0] * per_s, "tokens_per_s": tokens}
