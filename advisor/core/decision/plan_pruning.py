"""Which variants a measurement can leave out: those no result of theirs could make the recommendation.

Asked before each variant starts, with the rows measured so far. A variant is skipped only when the decision
engine, given the variant's most favourable plausible result, recommends the same option as without it. Most
favourable: it passes every check, runs OPTIMISTIC_SPEEDUP times faster than eager with a tight interval and no
memory cost, and compiles only just longer than the mode whose whole compile it does first (the catalogue's
`compile_floor`: Inductor's max-autotune lowers the graph as default does, then benchmarks kernel choices). A
variant without such a floor (a backend of its own) is always measured: nothing measured bounds its compile time,
and a fast-compiling, fast-running result could win any context.

So a prototype (the fastest-compiling option faster than eager wins) skips max-autotune once default has beaten
eager; a production model (steady state wins) never does; with expected calls the break-even decides, and it is
skipped only where even a free run could not pay back the extra compile. The check is of the engine itself, so it
stays true to the rules as they change. Torch-free.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from advisor.core import catalogue
from advisor.core.context import DeploymentContext, parse_context
from advisor.core.decision.break_even import format_calls
from advisor.core.decision.candidates import provenance
from advisor.core.decision.engine import decide
from advisor.core.decision.rules import leading_ranking

OPTIMISTIC_SPEEDUP = 1000.0  # the variant's best case: this many times faster than eager, side by side
FLOOR_MARGIN = 1.001  # its compile: just longer than the floor's (it does all of the floor's compile, then more)
_TIGHT = 0.001  # relative half-width of its best-case intervals


def skip_reason(
    context: DeploymentContext | dict[str, Any],
    inspection: dict[str, Any] | None,
    run: dict[str, Any],
    backend: str,
    mode: str,
) -> str | None:
    """Why (backend, mode) need not be measured for `context`, given `run` so far; None: measure it."""
    if not isinstance(context, DeploymentContext):
        context = parse_context(context)
    info = catalogue.BACKENDS.get(backend)
    floor_mode = info.compile_floor.get(mode) if info else None
    rows = list(run.get("measurements") or [])
    floor = next((r for r in rows if (r.get("backend"), r.get("mode")) == (backend, floor_mode)), None)
    if floor is None or floor.get("status") != "ok" or floor.get("compile_s_cold") is None:
        return None
    if not provenance(context, run).usable:
        return None  # measured off the target: the engine would not use the numbers, so they cannot prune
    without = decide(context, inspection, run)
    if without.get("backend") is None:
        return None
    best = best_case_row(floor, mode)
    with_best = decide(context, inspection, {**run, "measurements": [*rows, best]})
    chosen = (without["backend"], without["mode"])
    if (with_best.get("backend"), with_best.get("mode")) != chosen:
        return None
    return _reason(context, floor, chosen)


def best_case_row(floor: dict[str, Any], mode: str) -> dict[str, Any]:
    """The variant's most favourable plausible measurement, built from its floor mode's row."""
    row = copy.deepcopy(floor)
    eager_ms = (floor.get("eager_latency") or {}).get("median_ms")
    speedup = floor.get("speedup_vs_eager")
    median = (floor.get("latency") or {}).get("median_ms")
    if eager_ms is None and median is not None and speedup:
        eager_ms = median * speedup
    best_ms = (eager_ms or median or 1.0) / OPTIMISTIC_SPEEDUP
    latency = {key: value for key, value in (floor.get("latency") or {}).items() if key not in ("verdict", "drift")}
    latency.update(
        median_ms=best_ms,
        mean_ms=best_ms,
        p90_ms=best_ms,
        p99_ms=best_ms,
        ci_low_ms=best_ms * (1 - _TIGHT),
        ci_high_ms=best_ms * (1 + _TIGHT),
        iqr_ms=0.0,
        stdev_ms=0.0,
    )
    row.update(
        mode=mode,
        status="ok",
        reason=None,
        latency=latency,
        speedup_vs_eager=OPTIMISTIC_SPEEDUP,
        speedup_ci=[OPTIMISTIC_SPEEDUP * (1 - _TIGHT), OPTIMISTIC_SPEEDUP * (1 + _TIGHT)],
        peak_memory_mb=None,
        accuracy={**(floor.get("accuracy") or {}), "passed": True},
        compile_s_cold=float(floor["compile_s_cold"]) * FLOOR_MARGIN,
        compile_s_warm=None if floor.get("compile_s_warm") is None else float(floor["compile_s_warm"]) * FLOOR_MARGIN,
    )
    return row


def restate_skip(
    context: DeploymentContext, inspection: dict[str, Any] | None, run: dict[str, Any], row: dict[str, Any], chosen: Any
) -> str:
    """A skipped row's why-not against the final recommendation `chosen` (an Option).

    The skip was decided against the rows measured before it; a backend measured after it may have changed the
    recommendation (a prototype: Inductor default beat eager, max-autotune was skipped, then ONNX Runtime won). The
    same check is made again on the final rows: still true, the reason names the final recommendation; no longer
    true, it says so and what to measure."""
    stored = str(row.get("reason") or "not measured: it could not change the recommendation")
    backend, mode = str(row.get("backend")), str(row.get("mode"))
    info = catalogue.BACKENDS.get(backend)
    floor_mode = info.compile_floor.get(mode) if info else None
    rows = [r for r in run.get("measurements") or [] if r is not row]
    floor = next((r for r in rows if (r.get("backend"), r.get("mode")) == (backend, floor_mode)), None)
    if floor is None or floor.get("status") != "ok" or floor.get("compile_s_cold") is None:
        return stored
    final = (chosen.backend, chosen.mode)
    best = decide(
        context, inspection, {**run, "measurements": [*rows, best_case_row(floor, mode)]}, restate_skips=False
    )
    if (best.get("backend"), best.get("mode")) == final:
        return _reason(context, floor, final)
    then = _STORED_CHOICE.search(stored)
    earlier = f"the options measured before it gave {then.group(1)}" if then else "the options measured before it"
    label = catalogue.option_label(backend, mode)
    return (
        f"not measured: the plan skipped it because {earlier} and even its best result could not have changed "
        f"that; options measured after it made {chosen.label} the recommendation, and its best result could change "
        f"this one, so it is unresolved. Measure it: npu-advisor measure MODEL -b {label}."
    )


_STORED_CHOICE = re.compile(r"could not change the recommendation \(([^)]+)\)")


def _reason(context: DeploymentContext, floor: dict[str, Any], chosen: tuple[str, str]) -> str:
    floor_label = catalogue.option_label(str(floor["backend"]), str(floor["mode"]))
    chosen_label = catalogue.option_label(*chosen)
    compile_s = float(floor["compile_s_cold"])
    calls = context.expected_calls_per_compile
    setting = f"a {context.stage} context" + (
        f" with {format_calls(calls)} expected calls per compile" if calls is not None else " without expected calls"
    )
    if context.model_changes == "frequent" and context.stage != "prototype":
        setting += " (the model changes often)"
    return (
        f"not measured: it could not change the recommendation ({chosen_label}). Even at its best - "
        f"{OPTIMISTIC_SPEEDUP:g}x faster than eager and compiling only just longer than {floor_label} "
        f"({compile_s:.3g} s cold), whose compile it does first - {setting} would still get {chosen_label}. "
        "Analyse with another context to measure it."
    )


def detailed_options(
    context: DeploymentContext | dict[str, Any], inspection: dict[str, Any] | None, run: dict[str, Any]
) -> list[str]:
    """The options whose details - other sizes of the dynamic dims, the profile, the warm-cache compile - a
    measurement takes once its options are ranked: the recommendation and the leading options of the measured
    trade-off (two when the ranking is inconclusive). None of these details changes which option is recommended
    (the warm compile would, for a deployment that ships a compile cache: such a plan measures it for every
    option first), so the others' details would only cost time."""
    if not isinstance(context, DeploymentContext):
        context = parse_context(context)
    chosen = decide(context, inspection, run, restate_skips=False)
    labels = []
    if chosen.get("backend") is not None:
        labels.append(catalogue.option_label(chosen["backend"], chosen.get("mode") or "default"))
    labels += leading_ranking(run, context)["leading"]
    return list(dict.fromkeys(labels))


def plan_swept_options(
    context: DeploymentContext | dict[str, Any], inspection: dict[str, Any] | None, run: dict[str, Any]
) -> list[str]:
    """The options a shape plan's sizes are timed for (issue 43: "the recommended option and its closest rival"):
    the recommendation and the fastest other qualified option by its median - the rival the plan is set against
    (advisor.core.decision.engine). Nothing qualifies: the two fastest measured options, so a plan is still drawn."""
    from advisor.core.decision.candidates import measured_options, split_by_filters
    from advisor.core.decision.shape_rules import by_speed

    if not isinstance(context, DeploymentContext):
        context = parse_context(context)
    chosen = decide(context, inspection, run, restate_skips=False)
    backend = chosen.get("backend")
    label = catalogue.option_label(backend, chosen.get("mode") or "default") if backend else None
    measured = measured_options(run)
    qualified, _ = split_by_filters(measured, context)
    ranked = [o.label for o in by_speed(qualified or measured) if o.label != label]
    return ([label] if label else []) + ranked[: 2 - bool(label)]
