"""The options the decision engine chooses between, where their numbers came from, and the hard filters.

An option is one (backend, mode) variant, with its measurement row when there is one. Torch-free.

Speeds are compared side by side: every measured row also timed eager interleaved in its own process, and
its `speedup_vs_eager` (with `speedup_ci`) survives the machine's load, while medians taken in different
processes do not (the same eager call measures 8.5-18 ms in different processes on a loaded host). Options are
therefore compared on a common scale, `reference eager median / speedup`; a row without side-by-side data
falls back to its raw median.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from advisor.core import catalogue, claims, noise
from advisor.core.context import DEFAULT_WORKLOAD, DeploymentContext
from advisor.core.decision import footprint, quantized_rules
from advisor.core.results.measurement import compile_is_bound

# Backend facts (devices, display names, simplicity ranks) live in advisor.core.catalogue; re-exported for callers.
TORCHAIR_EXPORT_MODE = catalogue.TORCHAIR_EXPORT_MODE


@dataclass(frozen=True)
class Option:
    """One (backend, mode) the engine may recommend; `row` is its measurement, None when unmeasured."""

    backend: str
    mode: str
    family: str
    row: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    reference_ms: float | None = field(default=None, compare=False, hash=False)  # the run's eager median

    @property
    def label(self) -> str:
        return catalogue.option_label(self.backend, self.mode)

    @property
    def display(self) -> str:
        """What the option is, as every surface names it (catalogue.option_display)."""
        return catalogue.option_display(self.backend, self.mode)

    @property
    def is_baseline(self) -> bool:
        return self.family == "baseline"

    def compile_bounded(self, warm: bool) -> bool:
        """Whether `compile_s(warm)` is an upper bound, not a measurement: the cold compile of a mode that started
        from another option's kernels (MeasurementRow.compile_seeded)."""
        if self.is_baseline or self.row is None or not compile_is_bound(self.row.get("compile_seeded")):
            return False
        return not (warm and self.row.get("compile_s_warm") is not None)

    def compile_phrase(self, warm: bool) -> str | None:
        """ "12.3 s", or "at most 20 s" for a bound; None when unknown."""
        seconds = self.compile_s(warm)
        if seconds is None:
            return None
        return f"{'at most ' if self.compile_bounded(warm) else ''}{seconds:.3g} s"

    def compile_s(self, warm: bool) -> float | None:
        """Compile seconds (warm when the deployment ships a cache and a warm number exists); eager is 0."""
        if self.is_baseline:
            return 0.0
        if self.row is None:
            return None
        value = self.row.get("compile_s_warm") if warm else None
        if value is None:
            value = self.row.get("compile_s_cold")
        return None if value is None else max(float(value), 0.0)

    def stat(self, key: str) -> float | None:
        latency = (self.row or {}).get("latency") or {}
        value = latency.get(key)
        return None if value is None else float(value)

    @property
    def median_ms(self) -> float | None:
        return self.stat("median_ms")

    @property
    def ci_ms(self) -> tuple[float, float] | None:
        median = self.median_ms
        if median is None:
            return None
        low, high = self.stat("ci_low_ms"), self.stat("ci_high_ms")
        return (median if low is None else low, median if high is None else high)

    @property
    def peak_memory_mb(self) -> float | None:
        value = (self.row or {}).get("peak_memory_mb")
        return None if value is None else float(value)

    @property
    def noisy(self) -> bool:
        """Its timings carry noise evidence (spread, disagreeing interleaved blocks, a too-wide CI; see core.noise)."""
        return bool(noise.row_noise(self.row)) if self.row else False

    @property
    def interval_ratio(self) -> float | None:
        """hi / lo of the interval its speed is compared on (side-by-side speedup CI, else its raw latency CI)."""
        return noise.row_interval_ratio(self.row) if self.row and not self.is_baseline else None

    @property
    def unresolved(self) -> bool:
        """Its interval spans more than noise.SPEEDUP_CI_MAX_RATIO: too wide to rank it against other options (it is
        still faster than another where the interval of their ratio excludes 1: `beats`)."""
        ratio = self.interval_ratio
        return ratio is not None and ratio > noise.SPEEDUP_CI_MAX_RATIO

    # ----------------------------------------------------------------------------- side by side with eager
    @property
    def speedup(self) -> float | None:
        """Eager median / this option's median, both timed interleaved in the same process (eager: 1.0)."""
        if self.is_baseline:
            return 1.0
        value = (self.row or {}).get("speedup_vs_eager")
        return float(value) if value is not None and value > 0 else None

    @property
    def speedup_ci(self) -> tuple[float, float] | None:
        if self.is_baseline:
            return (1.0, 1.0)
        interval = (self.row or {}).get("speedup_ci")
        if self.speedup is None or not interval or len(interval) != 2:
            return None
        return (float(interval[0]), float(interval[1]))

    @property
    def side_by_side(self) -> bool:
        """Whether this option sits on the common scale through a side-by-side speedup (eager: the reference)."""
        return self.reference_ms is not None and self.speedup_ci is not None

    @property
    def latency_ms(self) -> float | None:
        """The median on the common scale: reference eager median / speedup; the raw median without side-by-side
        data (then it was timed in a process of its own, under whatever load that process saw)."""
        if not self.side_by_side:
            return self.median_ms
        return self.reference_ms / self.speedup  # type: ignore[operator]

    @property
    def latency_ci_ms(self) -> tuple[float, float] | None:
        """95% CI of `latency_ms`: the speedup's interval carried through; eager keeps its own relative spread
        around the reference; the raw CI without side-by-side data."""
        ref = self.reference_ms
        if not self.side_by_side or ref is None:
            return self.ci_ms
        if self.is_baseline:
            median, ci = self.median_ms, self.ci_ms
            return (ref, ref) if not median or ci is None else (ref * ci[0] / median, ref * ci[1] / median)
        low, high = self.speedup_ci  # type: ignore[misc]
        return (ref / high if high > 0 else 0.0, ref / low if low > 0 else math.inf)

    @property
    def basis(self) -> str:
        """How `latency_ms` was obtained, for the evidence."""
        if not self.side_by_side:
            return "raw median from its own process (no side-by-side eager timing)"
        if self.is_baseline:
            return "the reference eager median (of every process's eager timing)"
        low, high = self.speedup_ci  # type: ignore[misc]
        return f"reference eager median / side-by-side speedup {self.speedup:.3g}x [{low:.3g}-{high:.3g}]"


@dataclass(frozen=True)
class Comparison:
    """How many times as fast one option ran as another, with the 95% interval every "faster" is read from
    (advisor.core.claims.order) and what it rests on."""

    ratio: float
    interval: tuple[float, float]
    basis: str  # "side_by_side" (a speedup vs eager), "paired" (two speedups combined), "raw" (separate processes)


def compare(slow: Option, fast: Option) -> Comparison | None:
    """How many times as fast `fast` runs as `slow`, on the most direct evidence the rows have: against eager, the
    option's own side-by-side speedup; two options timed side by side with eager, their paired ratio
    (`paired_ratio`); otherwise their latency intervals on the common scale (`latency_ci_ms`), as the ratio of two
    independent intervals ([slow low / fast high, slow high / fast low]: it excludes 1 exactly when they do not
    overlap). None when either has no latency, or both are eager."""
    if fast.is_baseline and slow.is_baseline:
        return None
    for option, other, inverted in ((fast, slow, False), (slow, fast, True)):
        if other.is_baseline and option.side_by_side and not option.is_baseline:
            low, high = option.speedup_ci  # type: ignore[misc]
            speed = option.speedup or 1.0
            if inverted:  # eager against the option: the reciprocal
                return Comparison(1.0 / speed, (_recip(high), _recip(low)), "side_by_side")
            return Comparison(speed, (low, high), "side_by_side")
    paired = paired_ratio(slow, fast)
    if paired is not None:
        return Comparison(paired[0], paired[1], "paired")
    fast_ms, slow_ms = fast.latency_ms, slow.latency_ms
    fast_ci, slow_ci = fast.latency_ci_ms, slow.latency_ci_ms
    if not fast_ms or not slow_ms or fast_ci is None or slow_ci is None:
        return None
    return Comparison(slow_ms / fast_ms, (slow_ci[0] / fast_ci[1], _div(slow_ci[1], fast_ci[0])), "raw")


def _recip(value: float) -> float:
    return 1.0 / value if value > 0 else math.inf


def _div(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else math.inf


def beats(fast: Option, slow: Option) -> bool:
    """`fast` runs faster than `slow` beyond the measured noise: the 95% interval of their ratio (`compare`) lies
    entirely above 1 (advisor.core.claims.order, the one rule every surface reads). Each basis implies a lower point
    estimate on the common scale (`latency_ms`), so "beats" has no cycles. A wide interval (an unresolved row) is no
    exception: when even its low end is above 1, the option is faster; it only ranks less often."""
    comparison = compare(slow, fast)
    return comparison is not None and claims.order(comparison.interval) == claims.FASTER


def comparison_phrase(slow: Option, fast: Option) -> str:
    """`fast` against `slow` in words, with the interval and the order it supports (advisor.core.claims)."""
    comparison = compare(slow, fast)
    if comparison is None:
        return f"{fast.label} vs {slow.label}: no comparable latencies"
    if comparison.basis == "paired":
        basis = f"paired: its side-by-side speedup {fast.speedup:.2f}x over {slow.label}'s {slow.speedup:.2f}x"
    elif comparison.basis == "raw":
        basis = "medians from separate processes (not both timed side by side with eager)"
    elif fast.is_baseline:
        basis = f"side by side with eager in the same process: {slow.label}'s speedup {slow.speedup:.2f}x, inverted"
    else:
        basis = "side by side with eager in the same process"
    return claims.ratio_phrase(fast.label, slow.label, comparison.ratio, comparison.interval, basis)


def _log_halves(value: float, interval: tuple[float, float]) -> tuple[float, float]:
    """How far below and above `value` its interval reaches, in log space (inf for an open end)."""
    low, high = interval
    down = math.log(value / low) if low > 0 else math.inf
    up = math.log(high / value) if math.isfinite(high) and high > 0 else math.inf
    return max(down, 0.0), max(up, 0.0)


def paired_ratio(a: Option, b: Option) -> tuple[float, tuple[float, float]] | None:
    """How many times as fast `b` runs as `a`, from their own side-by-side comparisons: speedup_b / speedup_a, with a
    95% interval. None unless both were timed side by side with eager (eager itself: 1.0 exactly).

    Each speedup is a ratio taken inside one process, eager's blocks interleaved with the option's, so what slowed
    that process slowed both sides and cancels; the two speedups come from independent processes, so their log-space
    half-widths add in quadrature (lower end: b's lower half with a's upper half, and vice versa). The measuring
    children compile one option each (one sandbox, one compile cache and one Dynamo state per variant), so A and B
    are not interleaved in one process: that would need two compiled models in one child, sharing its memory limit
    and Inductor's global state. Against eager this is the option's own speedup interval."""
    if a is b or not (a.side_by_side and b.side_by_side):
        return None
    speed_a, speed_b, ci_a, ci_b = a.speedup, b.speedup, a.speedup_ci, b.speedup_ci
    if not speed_a or not speed_b or ci_a is None or ci_b is None:
        return None
    down_a, up_a = _log_halves(speed_a, ci_a)
    down_b, up_b = _log_halves(speed_b, ci_b)
    ratio = speed_b / speed_a
    low = ratio * math.exp(-math.hypot(down_b, up_a))
    spread_up = math.hypot(up_b, down_a)
    high = ratio * math.exp(spread_up) if spread_up < 700 else math.inf  # exp overflows past ~709
    return ratio, (low, high)


def both_side_by_side(*options: Option) -> bool:
    return all(o.side_by_side for o in options)


def simplicity_key(option: Option, warm: bool) -> tuple[float, int, str]:
    """Faster compile first, then the simpler backend, then the name (for determinism)."""
    compile_s = option.compile_s(warm)
    return (math.inf if compile_s is None else compile_s, catalogue.simplicity_rank(option.backend), option.label)


# ------------------------------------------------------------------------------------------- provenance
@dataclass(frozen=True)
class Provenance:
    """Where the numbers came from, and whether they can rank options for the target."""

    device: str | None  # the device the run measured on
    measured_on: str | None  # "npu" only on a real Ascend NPU; "test-double" in CI
    usable: bool  # the run measured on the target device and has at least one real attempt
    real: bool  # the numbers came from real hardware of the target kind
    note: str | None  # why the numbers are not used, or what they are not


def provenance(context: DeploymentContext, run: dict[str, Any] | None) -> Provenance:
    if not run:
        return Provenance(None, None, False, False, "no measurements yet")
    env = run.get("environment") or {}
    device = env.get("device")
    measured_on = env.get("measured_on") or (device if device in ("cpu", "cuda") else None)
    rows = run.get("measurements") or []
    if device != context.target:
        note = f"the measurements were taken on {device or 'an unknown device'}, not on the target ({context.target})"
        return Provenance(device, measured_on, False, False, note)
    workload = run.get("workload") or DEFAULT_WORKLOAD
    if workload != context.workload:
        note = (
            f"the measurements are of {workload}, not {context.workload}; measure again with "
            f"--workload {context.workload}"
        )
        return Provenance(device, measured_on, False, False, note)
    if not any(row.get("status") != "unavailable" for row in rows):
        return Provenance(device, measured_on, False, False, f"no backend could run on {device} where it was measured")
    real = measured_on == context.target
    note = None
    if not real:
        where = "the TorchAir test double" if measured_on == "test-double" else (measured_on or "an unknown source")
        note = f"the numbers come from {where}, not from a real {context.target.upper()}"
    return Provenance(device, measured_on, True, real, note)


# ------------------------------------------------------------------------------------------- options
def measured_options(run: dict[str, Any]) -> list[Option]:
    reference = reference_eager_ms(run)
    options: dict[str, Option] = {}
    for row in run.get("measurements") or []:
        backend = row.get("backend") or "unknown"
        family = row.get("family") or ("baseline" if backend == "eager" else "generic")
        option = Option(backend, row.get("mode") or "default", family, row, reference)
        options.setdefault(option.label, option)  # first row per variant wins: deterministic
    return sorted(options.values(), key=lambda o: o.label)


def reference_eager_ms(run: dict[str, Any] | None) -> float | None:
    """The eager median the side-by-side scale is anchored on: the median of every process's eager timing.

    Each row's `eager_latency` (the eager row's own latency where it has none). The lower middle for an even
    count: load only ever adds time. None when no row timed eager.
    """
    medians = []
    for row in (run or {}).get("measurements") or []:
        is_eager = row.get("backend") == "eager" or row.get("family") == "baseline"
        eager = row.get("eager_latency") or (row.get("latency") if is_eager else None)
        value = (eager or {}).get("median_ms")
        if value is not None and value > 0:
            medians.append(float(value))
    return statistics.median_low(medians) if medians else None


def unmeasured_options(target: str) -> list[Option]:
    """What the tree may recommend on `target` without numbers (eager is never recommended blind)."""
    inductor, torchair = catalogue.info("inductor"), catalogue.info("torchair")
    options = [Option(inductor.name, inductor.default_mode, inductor.family)]
    if target == "npu":
        options += [Option(torchair.name, mode, torchair.family) for mode in torchair.modes_for("npu")]
    return options


# ------------------------------------------------------------------------------------------- hard filters
def exclusion_reason(option: Option, context: DeploymentContext) -> str | None:
    """Why `option` cannot be recommended at all, or None when it qualifies."""
    devices = catalogue.devices_of(option.backend)
    if devices is not None and context.target not in devices:
        runs_on = ", ".join(devices)
        return f"not available on the target: {option.display} runs on {runs_on}, the target is {context.target}"
    row = option.row
    if row is None:
        return None
    return _status_reason(row, context) or _limit_reason(option, row, context) or _no_latency_reason(option)


def _status_reason(row: dict[str, Any], context: DeploymentContext) -> str | None:
    """Why a row that did not run cleanly is out: its status (failed accuracy, unavailable, skipped, an error) or a
    failed accuracy check on an ok row."""
    status = row.get("status", "ok")
    reason = row.get("reason") or ""
    if status == "fail_accuracy":
        accuracy = row.get("accuracy") or {}
        detail = accuracy.get("reason") or reason or "outputs differ from the float64 reference beyond tolerance"
        return f"failed the accuracy check: {detail}"
    if status == "unavailable":
        return f"unavailable on {context.target}: {reason or 'not installed or no device'}"
    if status == "skipped":
        return reason or "not measured: it could not change the recommendation"
    if status != "ok":
        return f"{status.replace('_', ' ')}: {reason or 'no details'}"
    if (row.get("accuracy") or {}).get("passed") is False:
        detail = (row.get("accuracy") or {}).get("reason") or "outputs differ from the float64 reference"
        return f"failed the accuracy check: {detail}"
    return None


def _limit_reason(option: Option, row: dict[str, Any], context: DeploymentContext) -> str | None:
    """Why a measured row is over the context's limits: int8 drift, deployed size, p99 latency, peak memory."""
    # int8 rows: the context's tolerated drift; every row: its deployed size against the memory budget
    footprint_reason = quantized_rules.drift_exclusion(row, context) or footprint.size_exclusion(row, context)
    if footprint_reason:
        return footprint_reason
    p99 = option.stat("p99_ms")
    if context.latency_target_ms is not None and p99 is not None and p99 > context.latency_target_ms:
        return f"over the latency target: p99 {p99:.3g} ms > {context.latency_target_ms:g} ms"
    memory = option.peak_memory_mb
    if context.memory_budget_mb is not None and memory is not None and memory > context.memory_budget_mb:
        peak = "training peak (gradients and optimizer state included)" if context.workload == "training" else "peak"
        return f"over the memory budget: {peak} {memory:.4g} MiB > {context.memory_budget_mb:g} MiB"
    return None


def _no_latency_reason(option: Option) -> str | None:
    return "measured without a steady-state latency" if option.median_ms is None else None


def split_by_filters(options: list[Option], context: DeploymentContext) -> tuple[list[Option], dict[str, str]]:
    qualified: list[Option] = []
    excluded: dict[str, str] = {}
    for option in options:
        reason = exclusion_reason(option, context)
        if reason is None:
            qualified.append(option)
        else:
            excluded[option.label] = reason
    return qualified, excluded
