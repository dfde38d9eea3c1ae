"""Racing (successive elimination): time an option only while the answer is still open for it.

Two places stop timing an option that cannot become the recommendation, and one stops timing the option that
already is the answer:

* its first window (`race_bound`): where the steady-state speed decides (no expected calls, a context that does not
  want the fastest compile), the child racing an option against the leader so far stops its window as soon as the
  option's speedup interval lies wholly below the leader's (its 95% upper end under the leader's lower end: the
  paired ratio then excludes 1 too, advisor.core.decision.candidates.paired_ratio), instead of waiting for a tight
  interval or the time cap. A row whose accuracy check failed is timed only to its floor of samples: it cannot be
  recommended.
* its first window, the dual (`RaceBound.field_high`): once an option's speedup interval lies wholly above every
  other qualified compiled option's so far (its low end over their highest high end), known as tightly as "high"
  confidence asks (noise.HIGH_CONFIDENCE_MAX_CI_RATIO) and with neither side spread or drifting past the noise
  thresholds, its window stops: timing it longer could not change which of them leads, nor make the row noisy.
  Never before another compiled option has been measured (the first one's interval is what later ones race).
* the re-measure rounds (`eliminated`): a row is not timed again when a stated rule rules it out - a filter of the
  context (its accuracy failed, over the memory budget, ...) or an option the choice rests on beats it beyond the
  noise (rules.deciding_labels: the chosen, the fast-compiling and fast-running options, those within noise of the
  best, eager). A row whose eager saw a different machine (noise.eager_outliers) is never eliminated on that
  evidence.

Every eliminated row stays in the results with its numbers and says why (MeasurementRow.eliminated). Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from advisor.core import claims, noise
from advisor.core.context import DeploymentContext
from advisor.core.decision.candidates import beats, comparison_phrase, measured_options, split_by_filters
from advisor.core.decision.rules import deciding_labels, fast_compile_wanted, measured_trade_off

ACCURACY_FAILED = "its accuracy check failed: it cannot be recommended, so its window stopped at its floor of samples"


@dataclass(frozen=True)
class RaceBound:
    """What a first window races against: the leader so far and the low end of its speedup interval (eager: 1.0);
    and the compiled option whose speedup interval reaches highest so far, with that high end (None: no compiled
    option measured yet), which a window clearly ahead of it stops above."""

    leader: str
    speedup_low: float
    field: str | None = None
    field_high: float | None = None

    def reason(self, row: dict[str, Any]) -> str:
        """Why the row's window stopped early, with both intervals (the row's as measured)."""
        return (
            f"clearly behind {self.leader}: its window stopped once its speedup over eager [95% CI {_interval(row)}] "
            f"lay wholly below {self.leader}'s (from {claims.fmt_bound(self.speedup_low)}x); the steady-state speed "
            "decides this context, so timing it longer could not change the recommendation"
        )

    def ahead_reason(self, row: dict[str, Any]) -> str:
        """Why the row's window stopped early while ahead, with both intervals (the row's as measured)."""
        return (
            f"clearly ahead: its window stopped once its speedup over eager [95% CI {_interval(row)}] lay wholly "
            f"above every other option's so far (the highest reached {claims.fmt_bound(self.field_high)}x: "
            f"{self.field}), known tightly enough to rank on; the steady-state speed decides this context, so timing "
            "it longer could not change which of them leads"
        )


def _interval(row: dict[str, Any]) -> str:
    low, high = (row.get("speedup_ci") or [None, None])[:2]
    return f"{claims.fmt_bound(low)}-{claims.fmt_bound(high)}x" if low and high else "?"


def races(context: DeploymentContext | None, workload: str) -> bool:
    """Whether first windows race for this context: inference in production with a context whose choice the
    steady-state speed decides. Where the compile time may decide (expected calls, a prototype, a model that changes
    often) or the edge's size and int8 rules may, an option behind on speed can still be the pick, so its window is
    timed in full."""
    return (
        context is not None
        and workload == "inference"
        and context.stage == "production"
        and context.expected_calls_per_compile is None
        and not fast_compile_wanted(context)
    )


def race_bound(run: dict[str, Any], context: DeploymentContext) -> RaceBound | None:
    """The leader so far among the qualified rows (eager included, at 1.0x): the highest low end of a speedup
    interval, and the highest high end among the compiled ones (`RaceBound.field_high`); None when no row
    qualifies yet."""
    qualified, _ = split_by_filters(measured_options(run), context)
    best: tuple[str, float] | None = None
    field: tuple[str, float] | None = None
    for option in qualified:
        interval = option.speedup_ci if option.side_by_side or option.is_baseline else None
        if interval is None or not math.isfinite(interval[0]) or interval[0] <= 0:
            continue
        if best is None or interval[0] > best[1]:
            best = (option.label, interval[0])
        if not option.is_baseline and (field is None or interval[1] > field[1]):
            field = (option.label, interval[1])
    if best is None:
        return None
    return RaceBound(best[0], best[1], *(field or (None, None)))


def behind(speedup_high: float, bound: float) -> bool:
    """The window's stop rule: the option's speedup interval lies wholly below the leader's."""
    return math.isfinite(speedup_high) and speedup_high < bound


def ahead(speedup_low: float, field_high: float) -> bool:
    """The dual stop rule: the option's speedup interval lies wholly above every other compiled option's."""
    return math.isfinite(field_high) and speedup_low > field_high


@dataclass(frozen=True)
class Elimination:
    """Why a row is not timed again, and the option ahead of it (None: a filter of the context rules it out)."""

    reason: str
    leader: str | None = None


def eliminations(run: dict[str, Any], context: DeploymentContext | None = None) -> dict[str, Elimination]:
    """The timed rows a re-measure round leaves out (never eager, never a row whose eager saw a different machine):
    those a filter of the context rules out, and those an option the choice rests on beats beyond the noise.
    `context` None: the run's device and workload with the defaults (as rules.leading_ranking reads it)."""
    context = context or _default_context(run)
    timed = {noise.label(row) for row in run.get("measurements") or [] if _timed(row) and row.get("backend") != "eager"}
    open_ = timed - set(noise.eager_outliers(run))
    qualified, excluded = split_by_filters(measured_options(run), context)
    out = {label: Elimination(f"ruled out: {why}") for label, why in excluded.items() if label in open_}
    if not qualified:
        return out
    trade = measured_trade_off(context, qualified)
    deciding = deciding_labels(trade)
    ahead = [o for o in [trade.fast_run, trade.chosen, *trade.unbeaten, trade.eager] if o is not None]
    for option in qualified:
        if option.label not in open_ or option.label in deciding:
            continue
        leader = next((lead for lead in ahead if beats(lead, option)), None)
        if leader is not None:
            why = f"clearly behind {leader.label}: {comparison_phrase(option, leader)}"
            out[option.label] = Elimination(why, leader.label)
    return out


def eliminated(run: dict[str, Any], context: DeploymentContext | None = None) -> dict[str, str]:
    """`eliminations`' reasons by label."""
    return {label: e.reason for label, e in eliminations(run, context).items()}


def _default_context(run: dict[str, Any]) -> DeploymentContext:
    from advisor.core.context import DEFAULT_WORKLOAD, parse_context

    device = (run.get("environment") or {}).get("device") or "cpu"
    return parse_context({"target": device, "workload": run.get("workload") or DEFAULT_WORKLOAD})


def _timed(row: dict[str, Any]) -> bool:
    return row.get("status") in ("ok", "fail_accuracy") and bool(row.get("latency"))
