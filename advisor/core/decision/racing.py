"""Racing (successive elimination): time an option only while the answer is still open for it.

Two places stop timing an option that cannot become the recommendation:

* its first window (`race_bound`): where the steady-state speed decides (no expected calls, a context that does not
  want the fastest compile), the child racing an option against the leader so far stops its window as soon as the
  option's speedup interval lies wholly below the leader's (its 95% upper end under the leader's lower end: the
  paired ratio then excludes 1 too, advisor.core.decision.candidates.paired_ratio), instead of waiting for a tight
  interval or the time cap. A row whose accuracy check failed is timed only to its floor of samples: it cannot be
  recommended.
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
    """What a first window races against: the leader so far and the low end of its speedup interval (eager: 1.0)."""

    leader: str
    speedup_low: float

    def reason(self, row: dict[str, Any]) -> str:
        """Why the row's window stopped early, with both intervals (the row's as measured)."""
        low, high = (row.get("speedup_ci") or [None, None])[:2]
        interval = f"{claims.fmt_bound(low)}-{claims.fmt_bound(high)}x" if low and high else "?"
        return (
            f"clearly behind {self.leader}: its window stopped once its speedup over eager [95% CI {interval}] lay "
            f"wholly below {self.leader}'s (from {claims.fmt_bound(self.speedup_low)}x); the steady-state speed "
            "decides this context, so timing it longer could not change the recommendation"
        )


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
    interval; None when no row qualifies yet."""
    qualified, _ = split_by_filters(measured_options(run), context)
    best: RaceBound | None = None
    for option in qualified:
        interval = option.speedup_ci if option.side_by_side or option.is_baseline else None
        if interval is None or not math.isfinite(interval[0]) or interval[0] <= 0:
            continue
        if best is None or interval[0] > best.speedup_low:
            best = RaceBound(option.label, interval[0])
    return best


def behind(speedup_high: float, bound: float) -> bool:
    """The window's stop rule: the option's speedup interval lies wholly below the leader's."""
    return math.isfinite(speedup_high) and speedup_high < bound


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
