"""Is a measurement run trustworthy? Noise evidence of one MeasurementRun, as its `quality` and for the engine.

Side-by-side speedups survive a steady load, not a changing one: a neighbour that starts mid-run, or threads that
lose their core while eager waits on a barrier, slow eager in one process and not in another (the example MLP's
eager ran 0.53 ms quiet and 23.6 ms in the process that reported ONNX Runtime "75x as fast"). The evidence, all
read from numbers the run already has:

- **eager drift across the run**: every process timed eager (the baseline row, then interleaved with each
  compiled option); their medians should agree. max / min above EAGER_DRIFT_MAX_RATIO: the machine's speed
  changed during the run;
- **interleaved bracket disagreement**: within one process, the medians of the interleaved blocks of one
  callable (`LatencyStats.drift`, p10-p90 over the median) above BRACKET_DRIFT_MAX: the speed moved inside the
  window, which the CI (computed as if samples were independent) does not show;
- **spread**: a row's own verdict (IQR / median above 0.1, advisor.core.stats);
- **wide speedup CI**: hi / lo of a side-by-side speedup's 95% CI above SPEEDUP_CI_MAX_RATIO: the row is
  *unresolved* - too wide to rank it against other options, and never "high" confidence; it is still faster than eager
  where its whole interval lies above 1 (the one rule, advisor.core.claims);
- **load**: the 1-minute load average per core at the start and the end of the run above LOAD_PER_CORE_MAX
  (at the end, the run's own measuring process is discounted).

A run is `noisy` when any of these fires; `whole_run` when the evidence is the machine's (drift or load), not one
row's. Torch-free: the API server calls `is_noisy` (a noisy analysis is never reused as a cached answer).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from advisor.core.catalogue import option_label

SPEEDUP_CI_MAX_RATIO = 1.5  # a speedup CI wider than hi/lo = 1.5 cannot say "faster"
HIGH_CONFIDENCE_MAX_CI_RATIO = 1.2  # "high" confidence needs the deciding speedups known at least this tightly
EAGER_DRIFT_MAX_RATIO = 1.5  # max / min of the eager medians of the run's processes
BRACKET_DRIFT_MAX = 0.25  # LatencyStats.drift (p10-p90 of the interleaved blocks' medians / median)
LOAD_PER_CORE_MAX = 1.0  # 1-minute load average per core
OWN_LOAD = 1.0  # what the run's own measuring process adds to the load average it reads at the end
_TIMED = ("ok", "fail_accuracy")


def thresholds() -> dict[str, float]:
    return {
        "speedup_ci_max_ratio": SPEEDUP_CI_MAX_RATIO,
        "eager_drift_max_ratio": EAGER_DRIFT_MAX_RATIO,
        "bracket_drift_max": BRACKET_DRIFT_MAX,
        "load_per_core_max": LOAD_PER_CORE_MAX,
        "high_confidence_max_ci_ratio": HIGH_CONFIDENCE_MAX_CI_RATIO,
        "shared_load_per_core": SHARED_LOAD_PER_CORE,
    }


def label(row: Mapping[str, Any]) -> str:
    return option_label(row.get("backend"), row.get("mode"))


def ci_ratio(interval: Any) -> float | None:
    """hi / lo of an interval (inf when lo <= 0); None without one."""
    if not interval or len(interval) != 2 or interval[0] is None or interval[1] is None:
        return None
    low, high = float(interval[0]), float(interval[1])
    return high / low if low > 0 else math.inf


def _is_baseline(row: Mapping[str, Any]) -> bool:
    return row.get("family") == "baseline" or row.get("backend") == "eager"


def _timed(row: Mapping[str, Any]) -> bool:
    return row.get("status", "ok") in _TIMED and bool(row.get("latency"))


def row_interval_ratio(row: Mapping[str, Any]) -> float | None:
    """The spread the row's comparison rests on: its side-by-side speedup CI (hi/lo), or without one its own
    latency CI (hi/lo, raw median from its own process). None for eager (the reference) and untimed rows."""
    if _is_baseline(row) or not _timed(row):
        return None
    ratio = ci_ratio(row.get("speedup_ci"))
    if ratio is not None:
        return ratio
    latency = row.get("latency") or {}
    return ci_ratio([latency.get("ci_low_ms"), latency.get("ci_high_ms")])


def unresolved(row: Mapping[str, Any]) -> bool:
    """Whether the row's interval is too wide for its speed to be called faster than anything."""
    ratio = row_interval_ratio(row)
    return ratio is not None and ratio > SPEEDUP_CI_MAX_RATIO


def row_noise(row: Mapping[str, Any]) -> list[str]:
    """Why this row's timings are noisy (empty when they are not), one phrase per piece of evidence."""
    if not _timed(row):
        return []
    reasons = []
    ratio = row_interval_ratio(row)
    if ratio is not None and ratio > SPEEDUP_CI_MAX_RATIO:
        interval = row.get("speedup_ci") or [(row.get("latency") or {}).get(k) for k in ("ci_low_ms", "ci_high_ms")]
        what = "side-by-side speedup" if row.get("speedup_ci") else "median"
        unit = "x" if row.get("speedup_ci") else " ms"
        reasons.append(
            f"its {what}'s 95% CI {_g(interval[0])}-{_g(interval[1])}{unit} spans {_g(ratio)}x "
            f"(more than {SPEEDUP_CI_MAX_RATIO:g}x): unresolved"
        )
    sides = [("", row.get("latency"))]
    if not _is_baseline(row):
        sides.append(("eager side by side: ", row.get("eager_latency")))
    for prefix, stats in sides:
        stats = stats or {}
        median = stats.get("median_ms")
        if stats.get("verdict") == "noisy" and median:
            reasons.append(
                f"{prefix}spread between samples (IQR {100 * (stats.get('iqr_ms') or 0) / median:.0f}% of the median)"
            )
        drift = stats.get("drift")
        if drift is not None and drift > BRACKET_DRIFT_MAX:
            reasons.append(
                f"{prefix}the interleaved blocks disagree (their medians moved {100 * drift:.0f}% during "
                "the timing window)"
            )
    return reasons


def eager_medians(run: Mapping[str, Any] | None) -> dict[str, float]:
    """Eager's median (ms) in every process of the run that timed it, by row label."""
    medians: dict[str, float] = {}
    for row in sorted((run or {}).get("measurements") or [], key=label):  # independent of the rows' order
        if not _timed(row):
            continue
        eager = row.get("latency") if _is_baseline(row) else row.get("eager_latency")
        value = (eager or {}).get("median_ms")
        if value is not None and value > 0:
            medians.setdefault(label(row), float(value))
    return medians


def eager_drift(run: Mapping[str, Any] | None) -> float | None:
    """max / min of eager's medians across the run's processes; None with fewer than two."""
    values = list(eager_medians(run).values())
    return max(values) / min(values) if len(values) >= 2 else None


def eager_outliers(run: Mapping[str, Any] | None) -> list[str]:
    """Rows whose eager median is off the run's middle eager median by more than EAGER_DRIFT_MAX_RATIO (either
    way): the processes that saw a different machine."""
    medians = eager_medians(run)
    if len(medians) < 2:
        return []
    ordered = sorted(medians.values())
    middle = ordered[(len(ordered) - 1) // 2]  # the lower middle: load only ever adds time
    return sorted(
        name for name, value in medians.items() if max(value / middle, middle / value) > EAGER_DRIFT_MAX_RATIO
    )


# ------------------------------------------------------------------------------------------- load
def read_load(runnable_samples: int = 0) -> dict[str, float] | None:
    """The 1-minute load average and the usable cores, now; None where the OS does not say. With
    `runnable_samples`, also `others_runnable`: the fewest processes runnable besides this one over that many
    readings RUNNABLE_GAP_S apart, which sees a neighbour at once where the load average takes a minute to catch
    up. Only a torch-free parent asks for it: a measuring child's idle OpenMP threads spin."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    reading: dict[str, float] = {"load": round(load, 2), "cores": max(1, cores)}
    others = others_runnable(runnable_samples) if runnable_samples else None
    if others is not None:
        reading["others_runnable"] = others
    return reading


RUNNABLE_SAMPLES = 10  # readings of the runnable count the re-measure gate takes, RUNNABLE_GAP_S apart
RUNNABLE_GAP_S = 0.02


def others_runnable(samples: int = RUNNABLE_SAMPLES, source: str = "/proc/loadavg") -> int | None:
    """The fewest processes runnable besides the reader over `samples` readings of the kernel's runnable count (the
    fourth field of /proc/loadavg, "running/total", node-wide like the load average); the fewest, so a process
    that ran for a moment does not count. None where the kernel does not say."""
    fewest: int | None = None
    for index in range(samples):
        if index:
            time.sleep(RUNNABLE_GAP_S)
        try:
            with open(source) as handle:
                running = int(handle.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        fewest = running - 1 if fewest is None else min(fewest, running - 1)  # the reader is running
    return None if fewest is None else max(0, fewest)


def load_reasons(load: Mapping[str, Any] | None) -> list[str]:
    """Why the load average says the machine was oversubscribed at the start or the end of the run."""
    reasons = []
    for when, own in (("start", 0.0), ("end", OWN_LOAD)):
        reading = (load or {}).get(when) or {}
        value, cores = reading.get("load"), reading.get("cores")
        if value is None or not cores:
            continue
        others = max(0.0, float(value) - own)
        if others / cores > LOAD_PER_CORE_MAX:
            discounted = " besides this run's own process" if own else ""
            reasons.append(
                f"load average {value:.2f} at the {when} on {cores} core(s){discounted}: other work "
                "competed for the CPUs"
            )
    return reasons


def still_busy(load_end: Mapping[str, Any] | None) -> str | None:
    """Why a reading taken now, after the run, says other work still competes for the CPUs (None: it does not):
    the load average, or (at once, where the load average still lags) as many other runnable processes as cores."""
    if reasons := load_reasons({"end": load_end} if load_end else None):
        return reasons[0]
    others, cores = (load_end or {}).get("others_runnable"), (load_end or {}).get("cores")
    if others is not None and cores and others >= cores:
        return (
            f"{others:g} other process(es) runnable on {cores:g} core(s) at every reading: the CPUs are oversubscribed"
        )
    return None


# ------------------------------------------------------------------------------------------- the verdict
def assess(run: Mapping[str, Any] | None, *, load: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run's `quality`: {noisy, whole_run, reasons, run_reasons, noisy_rows, unresolved, eager_drift,
    eager_medians_ms, load, remeasured, shared_reasons, thresholds}. `load` ({"start": read_load(), "end": ...})
    defaults to the one stored in the run's own quality; `remeasured` and the re-measure rounds' record (rounds,
    remeasure_budget_s, remeasure_spent_s, kept, not_remeasured, ranking) and the options racing eliminated are
    kept from it."""
    stored = dict((run or {}).get("quality") or {})
    load = load if load is not None else stored.get("load")
    rows = sorted((row for row in (run or {}).get("measurements") or [] if _timed(row)), key=label)
    noisy_rows: dict[str, str] = {}
    for row in rows:
        if reasons := row_noise(row):
            noisy_rows.setdefault(label(row), "; ".join(reasons))
    medians = eager_medians(run)
    drift = eager_drift(run)
    run_reasons = []
    if drift is not None and drift > EAGER_DRIFT_MAX_RATIO:
        slow = max(medians, key=medians.__getitem__)
        fast = min(medians, key=medians.__getitem__)
        run_reasons.append(
            f"eager's median moved {drift:.2f}x between the run's processes ({_g(medians[fast])} ms "
            f"in {fast}'s process, {_g(medians[slow])} ms in {slow}'s): the machine's speed changed "
            "during the run"
        )
    run_reasons += load_reasons(load)
    reasons = run_reasons + [f"{name}: {why}" for name, why in noisy_rows.items()]
    return {
        "noisy": bool(reasons),
        "whole_run": bool(run_reasons),
        "reasons": reasons,
        "run_reasons": run_reasons,
        "noisy_rows": noisy_rows,
        "unresolved": sorted({label(row) for row in rows if unresolved(row)}),
        "eager_drift": drift,
        "eager_medians_ms": medians,
        "load": dict(load) if load else None,
        "remeasured": list(stored.get("remeasured") or []),
        "shared_reasons": shared_reasons(run),  # a caveat, not noise: side-by-side ratios survive a steady load
        **{key: stored[key] for key in _KEPT if key in stored},
        "thresholds": thresholds(),
    }


_KEPT = ("rounds", "remeasure_budget_s", "remeasure_spent_s", "kept", "not_remeasured", "ranking", "eliminated")


def quality_of(run: Mapping[str, Any] | None) -> dict[str, Any]:
    """`assess` on the rows as they are now, still noisy when the stored quality said so (a run measured by a
    worker whose thresholds were stricter)."""
    quality = assess(run)
    stored = (run or {}).get("quality") or {}
    if stored.get("noisy") and not quality["noisy"]:
        quality["noisy"] = True
        quality["reasons"] = list(stored.get("reasons") or ["the measuring worker marked the run noisy"])
        quality["whole_run"] = bool(stored.get("whole_run", True))
        quality["run_reasons"] = list(stored.get("run_reasons") or quality["reasons"])
    return quality


def is_noisy(measurements: Mapping[str, Any] | None) -> bool:
    """Whether a stored MeasurementRun is noisy: such an analysis must not be served as the cached answer to a new
    submission (measure again instead). False for None (nothing measured yet); True for a shape it cannot read
    (measuring again is the safe answer)."""
    if measurements is None:
        return False
    if not isinstance(measurements, Mapping):
        return True
    try:
        return bool(quality_of(measurements)["noisy"])
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, ZeroDivisionError):  # never raises
        return True


def _g(value: Any) -> str:
    return "?" if value is None else f"{float(value):.3g}"


# ------------------------------------------------------------------------------------------- which window, shared node
FIRST_WINDOW = "first window"
REMEASURED_WINDOW = "re-measured window"
# The node counts as shared when other work kept more than this many runnable threads per core busy (the 1-minute load
# average per core) before the run or at the start or end of a timed window, after discounting the measuring child's
# own intra-op threads (torch.get_num_threads(), at most one per core). Below 1.0 on purpose: on a node whose cores are
# all this run's, 0.7 of a competing thread per core already costs a side-by-side window its steady machine.
SHARED_LOAD_PER_CORE = 0.7


def latency_window(row: Any) -> str:
    """Which timed window an option's quoted latency (its row's `latency`) comes from: FIRST_WINDOW, or
    REMEASURED_WINDOW when a re-measure's timing was kept (`latency_window`; rows from before it: the first)."""
    if isinstance(row, Mapping):
        value = row.get("latency_window")
    else:
        value = getattr(row, "latency_window", None)
    return str(value or FIRST_WINDOW)


def shared_reasons(run: Mapping[str, Any] | None) -> list[str]:
    """Why the load average says other work shared the node before the run or during its timed windows (empty when
    it did not, or when the run has no readings): environment.load.before, and each row's `timing_load` (read by
    the measuring child at the start and the end of its timed window) less the child's own threads
    (environment.torch_threads)."""
    env = (run or {}).get("environment") or {}
    reasons = [_shared_before_run((env.get("load") or {}).get("before") or {})]
    reasons.append(_shared_while_timed(_busiest_window((run or {}).get("measurements") or [], env)))
    return [reason for reason in reasons if reason]


def _shared_before_run(before: Mapping[str, Any]) -> str | None:
    """The load average read before the run, when it is above SHARED_LOAD_PER_CORE per core."""
    if before.get("load") is None or not before.get("cores"):
        return None
    per_core = float(before["load"]) / before["cores"]
    if per_core <= SHARED_LOAD_PER_CORE:
        return None
    return (
        f"load average {float(before['load']):.2f} on {before['cores']} core(s) before the run "
        f"({per_core:.2f} per core)"
    )


@dataclass(frozen=True)
class _WindowLoad:
    """One load reading at the start or end of one row's timed window, less the measuring child's own threads."""

    per_core: float
    name: str
    when: str
    value: float
    cores: int
    own: int


def _busiest_window(rows: list[Mapping[str, Any]], env: Mapping[str, Any]) -> _WindowLoad | None:
    """The highest per-core reading over every row's timed window (rows by label, start before end; the first of
    equal readings wins), or None without any readable one."""
    own_threads = int(env.get("torch_threads") or 1)
    worst: _WindowLoad | None = None
    for row in sorted(rows, key=label):
        for when in ("start", "end"):
            reading = _window_load(row, when, own_threads)
            if reading is not None and (worst is None or reading.per_core > worst.per_core):
                worst = reading
    return worst


def _window_load(row: Mapping[str, Any], when: str, own_threads: int) -> _WindowLoad | None:
    reading = (row.get("timing_load") or {}).get(when) or {}
    value, cores = reading.get("load"), reading.get("cores")
    if value is None or not cores:
        return None
    own = min(own_threads, int(cores))
    per_core = max(0.0, float(value) - own) / cores
    return _WindowLoad(per_core, label(row), when, float(value), int(cores), own)


def _shared_while_timed(worst: _WindowLoad | None) -> str | None:
    if worst is None or worst.per_core <= SHARED_LOAD_PER_CORE:
        return None
    return (
        f"load average {worst.value:.2f} on {worst.cores} core(s) at the {worst.when} of {worst.name}'s timed window, "
        f"{worst.per_core:.2f} per core besides the measuring child's own {worst.own} thread(s)"
    )
