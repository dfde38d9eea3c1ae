"""The decision engine: deployment context + inspection + measurements -> Recommendation.

Pure and deterministic, torch-free (the API server calls it). The steps, in order: are there measurements
for the target; hard filters; the selection tree (decision_rules); caveats and snippet (decision_advice).
"""

from __future__ import annotations

from typing import Any

from advisor.core import noise
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
    export_option,
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
from advisor.core.decision.source_rules import source_caveats

# 1.3: the edge branch weighs the int8 export; 1.2: options ranked by paired comparison, "inconclusive between";
# 1.1: noise-aware
ENGINE_VERSION = "1.3.0"


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

    options = measured_options(run) if prov.usable and run else unmeasured_options(context.target)
    qualified, excluded = split_by_filters(options, context)
    if not prov.usable:
        qualified, excluded = _coverage_filter(qualified, excluded, facts)
    path.append(rule_hard_filters(qualified, excluded, context))
    skipped = {o.label: excluded[o.label] for o in options if o.row and o.row.get("status") == "skipped"}
    skips_at = len(path)
    if skipped:
        path.append(rule_plan_skips(skipped))

    quality = noise.quality_of(run) if prov.usable else None
    chosen: Option | None = None
    trade: TradeOff | None = None
    export_blockers: list[str] = []
    exported = False
    edge: EdgeChoice | None = None
    if context.stage == "edge" or context.needs_offline_export:
        int8 = int8_export(options, excluded) if prov.usable else None
        candidate, export_blockers = export_option(context, facts, options, excluded, int8)
        path.append(rule_export_path(context, candidate, export_blockers))
        if candidate is not None and prov.usable:  # float or int8 export, by latency, size and drift
            edge = weigh_quantization(context, candidate, options, excluded)
            path += edge.steps
            candidate = edge.chosen
        chosen, exported = candidate, candidate is not None
    if chosen is None and qualified:
        path.append(rule_objective(context))
        if facts.npu_ops and context.target == "npu":
            path.append(rule_npu_custom_ops(facts))
        if prov.usable:
            trade = measured_trade_off(context, qualified)
            path += trade.steps
            chosen = trade.chosen
        else:
            chosen, unmeasured_step = _unmeasured_choice(context, facts, qualified)
            path.append(unmeasured_step)

    layered = None
    if context.fleet == "mixed":
        layered_step, layered = rule_layered(context, chosen)
        path.append(layered_step)
    if prov.usable:
        phases_step, by_phase = rule_generation_phases(context, qualified, chosen)
        path += [phases_step] if phases_step else []
        layered = layered or by_phase

    if prov.usable and (sweep_step := rule_shape_sweep(run, chosen, qualified)) is not None:
        path.append(sweep_step)

    if skipped and restate_skips and chosen is not None and prov.usable and run:
        from advisor.core.decision.plan_pruning import restate_skip  # it imports this module

        excluded = dict(excluded)
        for option in options:
            if option.label in skipped:
                skipped[option.label] = excluded[option.label] = restate_skip(
                    context, inspection, run, option.row or {}, chosen
                )
        path[skips_at] = rule_plan_skips(skipped)
    why_not = _why_not(options, excluded, chosen, trade, context, exported)
    why_not.update(edge.why_not if edge else {})  # the export not shipped: why its twin (float / int8) won
    caveats = caveats_for(chosen, context, facts, prov, trade, export_blockers, quality)
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
    recommendation["summary"] = _summary(recommendation, chosen, prov, trade, context, why_not, quality)
    return recommendation


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
    noise.HIGH_CONFIDENCE_MAX_CI_RATIO, a tie, a near break-even or a choice left to the stage's objective."""
    if chosen is None:
        return "high" if prov.usable and prov.real and not (quality or {}).get("noisy") else "low"
    if not prov.usable:
        return "medium" if facts.strong_torchair_case and chosen.backend == "torchair" else "low"
    if not prov.real:
        return "low"
    quality = quality or {}
    deciding = [chosen] if trade is None else [trade.chosen, trade.fast_compile, trade.fast_run]
    if quality.get("whole_run") or chosen.unresolved or (trade is not None and trade.inconclusive is not None):
        return "low"
    ratios = [o.interval_ratio for o in deciding if o.row is not None and o.interval_ratio is not None]
    wide = any(ratio > noise.HIGH_CONFIDENCE_MAX_CI_RATIO for ratio in ratios)
    if quality.get("noisy") or wide or any(o.noisy for o in deciding):
        return "medium"
    if trade is None:  # export path: from a measured row, or from coverage alone
        return "medium" if chosen.row is None else "high"
    expected, n_star = context.expected_calls_per_compile, trade.n_star
    near_break_even = trade.decided_by == "break_even" and n_star and expected and n_star / 2 <= expected <= 2 * n_star
    return "medium" if trade.tie or near_break_even or trade.decided_by == "objective" else "high"


def _speed_sentence(chosen: Option, per: str = "call") -> str:
    """Its speed as measured: side by side with eager where the row has it (robust to the machine's load), and the
    one latency every surface quotes for it (the row's kept window, named: noise.latency_window)."""
    quoted = f"{chosen.median_ms:.3g} ms per {per} (median of its {noise.latency_window(chosen.row)})"
    if chosen.is_baseline:
        return f"Eager ran at {quoted}"
    if chosen.side_by_side:
        low, high = chosen.speedup_ci  # type: ignore[misc]
        unresolved = "; too wide an interval to rank it against other options" if chosen.unresolved else ""
        return (
            f"It ran {chosen.speedup:.2f}x as fast as eager side by side in the same process (95% CI "
            f"{low:.2f}-{high:.2f}x{unresolved}), {quoted}"
        )
    return f"It ran at {quoted}"


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
        compile_s = chosen.compile_s(context.ships_compile_cache)
        compile_text = "" if compile_s is None or chosen.is_baseline else f", compiling in {compile_s:.3g} s"
        parts.append(f"{_speed_sentence(chosen, context.call_unit.removesuffix('s'))}{compile_text}.")
        if trade.n_star and trade.fast_compile != trade.fast_run:
            parts.append(
                f"{trade.fast_run.label} overtakes {trade.fast_compile.label} after "
                f"{format_calls(trade.n_star)} {context.call_unit} per compile."
            )
        if rec.get("tie"):
            parts.append("The fastest options were tied within the measurement noise.")
    if rec.get("layered"):
        parts.append("Develop with torch.compile (Inductor) on CPU/GPU and serve with this choice on the NPUs.")
    if not prov.usable:
        parts.append("This is unmeasured: it comes from the model's structure and op coverage, not from timings.")
    elif not prov.real:
        parts.append(f"Caution: {prov.note}, so the speeds are not real {context.target.upper()} numbers.")
    else:
        parts.append(f"Numbers were measured on a real {context.target.upper()}.")
    if (quality or {}).get("whole_run"):
        parts.append(
            "The measurement run was noisy (the machine's speed changed or it was loaded): treat the "
            "speeds as rough and re-measure on a quiet node."
        )
    elif (quality or {}).get("noisy"):
        parts.append(f"Noisy timings for {', '.join(quality['noisy_rows'])}.")  # type: ignore[index]
    parts.append(f"Confidence: {rec['confidence']}.")
    if rec["caveats"]:
        parts.append(f"See the {len(rec['caveats'])} caveat(s) for things to check or fix.")
    return " ".join(parts)
