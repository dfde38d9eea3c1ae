"""The decision engine: deployment context + inspection + measurements -> Recommendation.

Pure and deterministic, torch-free (the API server calls it). The steps, in order: are there measurements
for the target; hard filters; the selection tree (decision_rules); caveats and snippet (decision_advice).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advisor.core import claims, noise
from advisor.core.context import DeploymentContext, parse_context
from advisor.core.decision.advice import (
    INDUCTOR_NPU_REQUIREMENT,
    caveats_for,
    export_why_not,
    measured_why_not,
    snippet_for,
    unmeasured_why_not,
)
from advisor.core.decision.break_even import format_calls
from advisor.core.decision.candidates import (
    Option,
    Provenance,
    measured_options,
    provenance,
    split_by_filters,
    unmeasured_options,
)
from advisor.core.decision.edge_rules import EdgeChoice, int8_export, weigh_quantization
from advisor.core.decision.generation_phases import rule_generation_phases
from advisor.core.decision.rules import (
    InspectionFacts,
    TradeOff,
    deciding_labels,
    export_option,
    export_path_label,
    fast_compile_wanted,
    measured_trade_off,
    rule_export_path,
    rule_hard_filters,
    rule_layered,
    rule_measurements,
    rule_npu_custom_ops,
    rule_objective,
    rule_plan_skips,
    rule_shape_sweep,
    short_list,
)
from advisor.core.decision.shape_rules import by_speed, plan_step, shape_plan
from advisor.core.decision.source_rules import source_caveats

# 1.4: one rule for "faster" (advisor.core.claims), options ranked against each other, not only against eager;
# 1.3: the edge branch weighs the int8 export; 1.2: options ranked by paired comparison, "inconclusive between";
# 1.1: noise-aware
ENGINE_VERSION = "1.4.0"


def decide(
    context: DeploymentContext | dict[str, Any],
    inspection: dict[str, Any] | None,
    run: dict[str, Any] | None,
    *,
    restate_skips: bool = True,
) -> dict[str, Any]:
    """Recommend a backend and mode for this deployment, with the reasons. Works with partial data.

    `restate_skips`: say why each variant the plan skipped could not change *this* recommendation (the skip was
    decided against the rows measured before it; advisor.core.decision.plan_pruning.restate_skip)."""
    if not isinstance(context, DeploymentContext):
        context = parse_context(context)
    facts = InspectionFacts.of(inspection)
    prov = provenance(context, run)
    path: list[dict[str, Any]] = [rule_measurements(prov, context)]

    options, qualified, excluded = _options(context, facts, prov, run)
    path.append(rule_hard_filters(qualified, excluded, context))
    skipped = {o.label: excluded[o.label] for o in options if o.row and o.row.get("status") == "skipped"}
    skips_at = len(path)
    if skipped:
        path.append(rule_plan_skips(skipped))

    quality = noise.quality_of(run) if prov.usable else None
    chosen: Option | None = None
    trade: TradeOff | None = None
    export_blockers: list[str] = []
    edge: EdgeChoice | None = None
    if context.stage == "edge" or context.needs_offline_export:
        chosen, export_blockers, edge = _export_choice(context, facts, prov, options, excluded, path)
    exported = chosen is not None
    if chosen is None and qualified:
        chosen, trade = _compiler_choice(context, facts, prov, qualified, path)
    layered = _layered(context, prov, qualified, chosen, path)

    if prov.usable and (sweep_step := rule_shape_sweep(run, chosen, qualified)) is not None:
        path.append(sweep_step)

    plan = _shape_plan(context, run, chosen, qualified) if prov.usable else None
    if plan is not None:
        path.append(plan_step(plan))

    if skipped and restate_skips and chosen is not None and prov.usable and run:
        excluded = _restate_skips(context, inspection, run, options, skipped, excluded, chosen)
        path[skips_at] = rule_plan_skips(skipped)
    outcome = _Outcome(chosen, trade, edge, exported, export_blockers, layered, plan)
    return _recommendation(context, inspection, facts, prov, quality, options, excluded, outcome, path)


def _options(
    context: DeploymentContext, facts: InspectionFacts, prov: Provenance, run: dict[str, Any] | None
) -> tuple[list[Option], list[Option], dict[str, str]]:
    """Every option (the measured rows, or the target's unmeasured ones), those that pass the hard filters, and
    why each other one is out."""
    options = measured_options(run) if prov.usable and run else unmeasured_options(context.target)
    qualified, excluded = split_by_filters(options, context)
    if not prov.usable:
        qualified, excluded = _coverage_filter(qualified, excluded, facts)
    return options, qualified, excluded


@dataclass(frozen=True)
class _Outcome:
    """What the rules chose: the option, the measured trade-off or the edge weighing behind it, whether it is the
    export path (and what blocked that), and the layered advice."""

    chosen: Option | None
    trade: TradeOff | None
    edge: EdgeChoice | None
    exported: bool
    export_blockers: list[str]
    layered: dict[str, Any] | None
    shape_plan: dict[str, Any] | None = None


def _shape_plan(
    context: DeploymentContext, run: dict[str, Any] | None, chosen: Option | None, qualified: list[Option]
) -> dict[str, Any] | None:
    """The chosen option's plan for the context's traffic, the fastest other qualified options as its rivals."""
    if chosen is None or not context.shape_traffic:
        return None
    return shape_plan(context, run, chosen.label, [o.label for o in by_speed(qualified)])


def _recommendation(
    context: DeploymentContext,
    inspection: dict[str, Any] | None,
    facts: InspectionFacts,
    prov: Provenance,
    quality: dict[str, Any] | None,
    options: list[Option],
    excluded: dict[str, str],
    outcome: _Outcome,
    path: list[dict[str, Any]],
) -> dict[str, Any]:
    """The recommendation of `outcome`, with why not each other option, the caveats, the confidence and summary."""
    chosen, trade, edge, layered = outcome.chosen, outcome.trade, outcome.edge, outcome.layered
    why_not = _why_not(options, excluded, chosen, trade, context, outcome.exported)
    why_not.update(edge.why_not if edge else {})  # the export not shipped: why its twin (float / int8) won
    caveats = caveats_for(chosen, context, facts, prov, trade, outcome.export_blockers, quality)
    caveats += edge.caveats if edge else []
    caveats += source_caveats(inspection, chosen, context)  # from the user's own code, when it was analysed
    confidence = _confidence(chosen, prov, facts, trade, context, quality)
    recommendation = {
        "backend": chosen.backend if chosen else None,
        "mode": chosen.mode if chosen else None,
        "confidence": confidence,
        "measured": prov.usable,
        "tie": bool(trade and trade.chosen is chosen and trade.tie),
        "layered": layered,
        "path": path,
        "why_not": why_not,
        "break_even": _break_even(trade, context) or (edge.break_even if edge else None),
        "caveats": caveats,
        "snippet": snippet_for(chosen, context, layered, facts.keyword_inputs),
        "engine_version": ENGINE_VERSION,
    }
    if outcome.shape_plan is not None:
        recommendation["shape_plan"] = outcome.shape_plan
    recommendation["summary"] = _summary(recommendation, chosen, prov, trade, context, why_not, quality)
    return recommendation


def _export_choice(
    context: DeploymentContext,
    facts: InspectionFacts,
    prov: Provenance,
    options: list[Option],
    excluded: dict[str, str],
    path: list[dict[str, Any]],
) -> tuple[Option | None, list[str], EdgeChoice | None]:
    """The deployment needs an offline export: the export option (float or int8, weighed by latency, size and drift
    when measured), or None with what blocks it. Appends its steps to `path`."""
    int8 = int8_export(options, excluded) if prov.usable else None
    candidate, export_blockers = export_option(context, facts, options, excluded, int8)
    path.append(rule_export_path(context, candidate, export_blockers, export_path_label(context, options, excluded)))
    edge: EdgeChoice | None = None
    if candidate is not None and prov.usable:  # float or int8 export, by latency, size and drift
        edge = weigh_quantization(context, candidate, options, excluded)
        path += edge.steps
        candidate = edge.chosen
    return candidate, export_blockers, edge


def _compiler_choice(
    context: DeploymentContext,
    facts: InspectionFacts,
    prov: Provenance,
    qualified: list[Option],
    path: list[dict[str, Any]],
) -> tuple[Option, TradeOff | None]:
    """The qualified option the stage's objective picks: by the measured trade-off, or by the tree without numbers.
    Appends its steps to `path`."""
    path.append(rule_objective(context))
    if facts.npu_ops and context.target == "npu":
        path.append(rule_npu_custom_ops(facts))
    if prov.usable:
        trade = measured_trade_off(context, qualified)
        path += trade.steps
        return trade.chosen, trade
    chosen, unmeasured_step = _unmeasured_choice(context, facts, qualified)
    path.append(unmeasured_step)
    return chosen, None


def _layered(
    context: DeploymentContext,
    prov: Provenance,
    qualified: list[Option],
    chosen: Option | None,
    path: list[dict[str, Any]],
) -> dict[str, Any] | None:
    """The layered advice: develop with one option and serve with another on a mixed fleet, or one per generation
    phase (measured). Appends its steps to `path`."""
    layered = None
    if context.fleet == "mixed":
        layered_step, layered = rule_layered(context, chosen)
        path.append(layered_step)
    if prov.usable:
        phases_step, by_phase = rule_generation_phases(context, qualified, chosen)
        path += [phases_step] if phases_step else []
        layered = layered or by_phase
    return layered


def _restate_skips(
    context: DeploymentContext,
    inspection: dict[str, Any] | None,
    run: dict[str, Any],
    options: list[Option],
    skipped: dict[str, str],
    excluded: dict[str, str],
    chosen: Option,
) -> dict[str, str]:
    """Why each skipped variant could not change this recommendation: updates `skipped` in place, returns a copy of
    `excluded` with the same reasons."""
    from advisor.core.decision.plan_pruning import restate_skip  # it imports this module

    excluded = dict(excluded)
    for option in options:
        if option.label in skipped:
            skipped[option.label] = excluded[option.label] = restate_skip(
                context, inspection, run, option.row or {}, chosen
            )
    return excluded


def _coverage_filter(
    qualified: list[Option], excluded: dict[str, str], facts: InspectionFacts
) -> tuple[list[Option], dict[str, str]]:
    """Without numbers, TorchAir's GE mode is out when a converter is missing: it has no per-op fallback."""
    if not facts.torchair_uncovered:
        return qualified, excluded
    excluded = dict(excluded)
    kept = []
    for option in qualified:
        if option.label == "torchair:max-autotune":
            excluded[option.label] = f"no GE converter for {short_list(facts.torchair_uncovered)} (compile would fail)"
        else:
            kept.append(option)
    return kept, excluded


def _unmeasured_choice(
    context: DeploymentContext, facts: InspectionFacts, qualified: list[Option]
) -> tuple[Option, dict[str, Any]]:
    by_label = {o.label: o for o in qualified}
    inductor = by_label.get("inductor:default", qualified[0])
    ge = by_label.get("torchair:max-autotune")
    if fast_compile_wanted(context):
        chosen, why = inductor, "compile time weighs most, and Inductor compiles fastest"
    elif context.target == "npu" and ge is not None:
        strong = "npu:: ops TorchAir converts and Inductor cannot trace" if facts.strong_torchair_case else ""
        chosen = ge
        why = (
            f"steady-state speed weighs most{' and the model has ' + strong if strong else ''}; TorchAir's GE graph "
            "is the NPU's steady-state path"
        )
        if facts.torchair_unknown:
            why += f" (GE coverage of {short_list(facts.torchair_unknown)} is only known once measured on an NPU)"
    else:
        chosen, why = inductor, "steady-state speed weighs most and Inductor is the generic compiler for this target"
    if chosen.backend == "inductor" and context.target == "npu":
        why += f"; {INDUCTOR_NPU_REQUIREMENT}"
    step = {
        "rule": "unmeasured_tree_choice",
        "question": "Without numbers, what does the tree pick?",
        "evidence": {"candidates": [o.label for o in qualified], "torchair_unknown": list(facts.torchair_unknown)},
        "outcome": f"{chosen.label}: {why}.",
    }
    return chosen, step


def _why_not(
    options: list[Option],
    excluded: dict[str, str],
    chosen: Option | None,
    trade: TradeOff | None,
    context: DeploymentContext,
    exported: bool,
) -> dict[str, str]:
    """One reason per option not chosen, each from that option's own row (or its absence)."""
    why_not: dict[str, str] = {}
    for option in options:
        if chosen is not None and option.label == chosen.label:
            continue
        if option.label in excluded:
            why_not[option.label] = excluded[option.label]
        elif chosen is None:
            continue
        elif exported:
            why_not[option.label] = export_why_not(option, chosen)
        elif trade is not None and option.median_ms is not None and chosen.median_ms is not None:
            why_not[option.label] = measured_why_not(option, chosen, trade, context)
        else:
            why_not[option.label] = unmeasured_why_not(option, chosen)
        if option.backend == "inductor" and context.target == "npu" and option.row is None:
            why_not[option.label] += f" ({INDUCTOR_NPU_REQUIREMENT})"
    return why_not


def _break_even(trade: TradeOff | None, context: DeploymentContext) -> dict[str, Any] | None:
    if trade is None or trade.fast_compile == trade.fast_run:
        return None
    warm = context.ships_compile_cache
    a, b = trade.fast_compile, trade.fast_run
    return {
        "fast_compile": a.label,
        "fast_run": b.label,
        "compile_a_s": a.compile_s(warm),
        "compile_b_s": b.compile_s(warm),
        "latency_a_ms": a.latency_ms,
        "latency_b_ms": b.latency_ms,
        "latency_basis": trade.latency_basis,  # "side_by_side": reference eager median / speedup
        "compile_kind": "warm" if warm else "cold",
        "n_star": trade.n_star,
        "expected": context.expected_calls_per_compile,
        "unit": context.call_unit,
        "decided": trade.decided_by == "break_even",
    }


def _confidence(
    chosen: Option | None,
    prov: Provenance,
    facts: InspectionFacts,
    trade: TradeOff | None,
    context: DeploymentContext,
    quality: dict[str, Any] | None = None,
) -> str:
    """high / medium / low. Measured: low on a run whose machine was noisy (advisor.core.noise: eager drift, load) or
    when the choice itself is unresolved; never high with any noisy row, a deciding interval wider than
    noise.HIGH_CONFIDENCE_MAX_CI_RATIO, a tie, a leader that does not beat the runner-up (and eager) beyond the
    noise, a near break-even or a choice left to the stage's objective."""
    if chosen is None:
        return "high" if prov.usable and prov.real and not (quality or {}).get("noisy") else "low"
    if not prov.usable:
        return "medium" if facts.strong_torchair_case and chosen.backend == "torchair" else "low"
    if not prov.real:
        return "low"
    quality = quality or {}
    if _left_open(chosen, trade, quality):
        return "low"
    if _noise_touches_choice(quality, trade) or _noisy(chosen, trade):
        return "medium"
    if trade is None:  # export path: from a measured row, or from coverage alone
        return "medium" if chosen.row is None else "high"
    if trade.tie or not trade.leads_beyond_noise:
        return "medium"
    return "medium" if _near_break_even(trade, context) or trade.decided_by == "objective" else "high"


def _left_open(chosen: Option, trade: TradeOff | None, quality: dict[str, Any]) -> bool:
    """Whether the measurements leave the choice open: the whole run was noisy, the chosen option is unresolved,
    or the leading two are inconclusive."""
    return bool(quality.get("whole_run") or chosen.unresolved or (trade is not None and trade.inconclusive is not None))


def _noise_touches_choice(quality: dict[str, Any], trade: TradeOff | None) -> bool:
    """Whether the run's noise reaches what the choice rests on: a noisy row among rules.deciding_labels (any noisy
    row without a measured trade-off), or noise not pinned to rows. A noisy row beaten beyond its own noise by the
    options that decided does not lower the confidence (the report still names it)."""
    if not quality.get("noisy"):
        return False
    rows = set(quality.get("noisy_rows") or {})
    return not rows or trade is None or bool(rows & deciding_labels(trade))


def _noisy(chosen: Option, trade: TradeOff | None) -> bool:
    """Whether an option that decided (the chosen one, A and B) has an interval wider than
    noise.HIGH_CONFIDENCE_MAX_CI_RATIO or a noisy row."""
    deciding = [chosen] if trade is None else [trade.chosen, trade.fast_compile, trade.fast_run]
    ratios = [o.interval_ratio for o in deciding if o.row is not None and o.interval_ratio is not None]
    wide = any(ratio > noise.HIGH_CONFIDENCE_MAX_CI_RATIO for ratio in ratios)
    return wide or any(o.noisy for o in deciding)


def _near_break_even(trade: TradeOff, context: DeploymentContext) -> bool:
    """Decided by a break-even the expected calls are within a factor of two of."""
    expected, n_star = context.expected_calls_per_compile, trade.n_star
    return bool(trade.decided_by == "break_even" and n_star and expected and n_star / 2 <= expected <= 2 * n_star)


def _speed_sentence(chosen: Option, per: str = "call") -> str:
    """Its speed as measured: side by side with eager where the row has it (robust to the machine's load), and the
    one latency every surface quotes for it (the row's kept window, named: noise.latency_window)."""
    quoted = _quoted_latency(chosen, per)
    if chosen.is_baseline:
        return f"Eager ran at {quoted}"
    if chosen.side_by_side:
        low, high = chosen.speedup_ci  # type: ignore[misc]
        verdict = claims.VERDICT_WORDS[claims.order((low, high))]
        unresolved = "; too wide an interval to rank it against other options" if chosen.unresolved else ""
        return (
            f"It ran {chosen.speedup:.2f}x as fast as eager side by side in the same process (95% CI "
            f"{claims.fmt_bound(low)}-{claims.fmt_bound(high)}x: {verdict}{unresolved}), {quoted}"
        )
    return f"It ran at {quoted}"


def _quoted_latency(chosen: Option, per: str) -> str:
    """The chosen option's one latency, as every table and chart quotes it: its kept window's median on the reference
    eager's scale (advisor.core.common_scale); said plainly where the scale leaves it as measured."""
    from advisor.core.common_scale import row_factor  # it reads decision.candidates: imported when first needed

    median, window = float(chosen.median_ms or 0.0), noise.latency_window(chosen.row)
    factor = row_factor(chosen.row or {}, chosen.reference_ms)
    if factor is None or f"{median * factor:.3g}" == f"{median:.3g}":
        return f"{median:.3g} ms per {per} (median of its {window})"
    return f"{median * factor:.3g} ms per {per} on the reference eager's scale (median of its {window}, scaled)"


def _summary(
    rec: dict[str, Any],
    chosen: Option | None,
    prov: Provenance,
    trade: TradeOff | None,
    context: DeploymentContext,
    why_not: dict[str, str],
    quality: dict[str, Any] | None = None,
) -> str:
    if chosen is None:
        reasons = "; ".join(f"{label}: {reason}" for label, reason in why_not.items()) or "no options were available"
        return (
            f"No backend qualifies for this deployment on {context.target}. {reasons}. Fix the first problem "
            "listed, loosen the latency or memory limits, or measure on another node, then analyse again."
        )
    parts = [f"Use {chosen.display} on {context.target.upper()}."]
    if trade is not None and trade.inconclusive is not None:
        leader, runner = trade.inconclusive
        parts.append(
            f"Inconclusive between {leader.label} and {runner.label}: the measurements cannot rank them beyond the "
            f"noise; {leader.label} is the better estimate."
        )
    elif chosen.is_baseline:
        parts.append("No compiled option ran measurably faster than plain PyTorch here, so compiling does not pay off.")
    deciding = next((s for s in reversed(rec["path"]) if s["rule"] not in ("mixed_fleet_layered",)), None)
    if deciding is not None:
        parts.append(f"Why: {deciding['outcome']}")
    if trade is not None and chosen.median_ms is not None:
        parts += _speed_parts(rec, chosen, trade, context)
    if rec.get("layered"):
        parts.append("Develop with torch.compile (Inductor) on CPU/GPU and serve with this choice on the NPUs.")
    parts.append(_provenance_sentence(prov, context))
    parts += _quality_parts(quality)
    parts.append(f"Confidence: {rec['confidence']}.")
    if rec["caveats"]:
        parts.append(f"See the {len(rec['caveats'])} caveat(s) for things to check or fix.")
    return " ".join(parts)


def _speed_parts(rec: dict[str, Any], chosen: Option, trade: TradeOff, context: DeploymentContext) -> list[str]:
    """The chosen option's measured speed and compile time, where the fast-running option overtakes the
    fast-compiling one, and whether the fastest tied."""
    phrase = chosen.compile_phrase(context.ships_compile_cache)
    compile_text = "" if phrase is None or chosen.is_baseline else f", compiling in {phrase}"
    parts = [f"{_speed_sentence(chosen, context.call_unit.removesuffix('s'))}{compile_text}."]
    if trade.n_star and trade.fast_compile != trade.fast_run:
        parts.append(
            f"{trade.fast_run.label} overtakes {trade.fast_compile.label} after "
            f"{format_calls(trade.n_star)} {context.call_unit} per compile."
        )
    if rec.get("tie"):
        parts.append("The fastest options were tied within the measurement noise.")
    return parts


def _provenance_sentence(prov: Provenance, context: DeploymentContext) -> str:
    """Where the numbers came from: none (the structure), a stand-in, or a real device of the target."""
    if not prov.usable:
        return "This is unmeasured: it comes from the model's structure and op coverage, not from timings."
    if not prov.real:
        return f"Caution: {prov.note}, so the speeds are not real {context.target.upper()} numbers."
    return f"Numbers were measured on a real {context.target.upper()}."


def _quality_parts(quality: dict[str, Any] | None) -> list[str]:
    """The run's noise in words: the whole run, or the noisy rows."""
    if (quality or {}).get("whole_run"):
        return [
            "The measurement run was noisy (the machine's speed changed or it was loaded): treat the "
            "speeds as rough and re-measure on a quiet node."
        ]
    if (quality or {}).get("noisy"):
        return [f"Noisy timings for {', '.join(quality['noisy_rows'])}."]  # type: ignore[index]
    return []
