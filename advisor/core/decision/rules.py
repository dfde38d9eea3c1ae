"""The selection tree, one named rule per question. Each rule returns a RuleStep (question, evidence, outcome).

Tree: edge / offline export -> export path if the graph converts; prototype or frequent changes -> fast compile;
otherwise steady-state speed (strongly so for npu:: ops TorchAir covers and Inductor cannot trace); the
break-even and the noise decide between the fast-compiling and the fast-running option; mixed fleets are layered.
Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from advisor.core import catalogue, claims, noise, snippets
from advisor.core.catalogue import EAGER_LABEL
from advisor.core.context import DEFAULT_WORKLOAD, DeploymentContext
from advisor.core.decision.break_even import break_even_calls, format_calls
from advisor.core.decision.candidates import (
    TORCHAIR_EXPORT_MODE,
    Option,
    Provenance,
    beats,
    both_side_by_side,
    comparison_phrase,
    paired_ratio,
    simplicity_key,
)
from advisor.core.shape_sweep import best_by_shape, where_the_answer_changes

COVERED = ("supported", "partial")
# Phrases of the note advisor/harness/decomposed_coverage.py writes for an op whose decomposition picks a kernel for the
# device it is traced on (sdpa): its GE coverage is only known on an NPU. Matched for inspections written before
# the `torchair_unknown` marker existed.
_DEVICE_DEPENDENT_PHRASES = (
    "decomposes per device",
    "picks the kernel",
    "only known there",
    "measure it on an npu",
    "auto-generate",  # custom ops without a converter (also the wording stored before this was marked unknown)
)


def step(rule: str, question: str, evidence: dict[str, Any], outcome: str) -> dict[str, Any]:
    """One step of the recommendation's path (advisor.core.results.RuleStep), as the engine stores it: a dict."""
    return {"rule": rule, "question": question, "evidence": evidence, "outcome": outcome}


# ------------------------------------------------------------------------------------------- inspection facts
@dataclass(frozen=True)
class InspectionFacts:
    """What the decision needs from an Inspection (all empty when there is none)."""

    present: bool = False
    custom_ops: tuple[str, ...] = ()
    npu_ops: tuple[str, ...] = ()
    torchair_uncovered: tuple[str, ...] = ()  # GE mode has no converter (none / stub): compile fails
    torchair_unknown: tuple[str, ...] = ()  # the kernel TorchAir gets is picked on the NPU: unknown until measured
    npu_ops_torchair_covered: bool = False
    inductor_untraceable: tuple[str, ...] = ()  # no fake kernel: Dynamo breaks the graph there
    graph_breaks_analysed: bool = False
    graph_breaks: tuple[dict[str, Any], ...] = ()
    graph_break_count: int = 0
    dynamic_dims: tuple[dict[str, Any], ...] = field(default=())
    runnable: bool = True
    runnable_reason: str | None = None
    keyword_inputs: tuple[str, ...] = ()  # inputs the model takes by keyword: snippets call model(*args, **kwargs)

    @classmethod
    def of(cls, inspection: dict[str, Any] | None) -> InspectionFacts:
        if not inspection:
            return cls()
        custom, npu, uncovered, unknown, untraceable = _op_facts(inspection)
        breaks = inspection.get("graph_breaks") or {}
        runnable = inspection.get("runnable") or {}
        return cls(
            present=True,
            custom_ops=tuple(custom),
            npu_ops=tuple(npu),
            torchair_uncovered=tuple(uncovered),
            torchair_unknown=tuple(unknown),
            npu_ops_torchair_covered=bool(npu) and not set(npu) & (set(uncovered) | set(unknown)),
            inductor_untraceable=tuple(untraceable),
            graph_breaks_analysed=bool(breaks.get("analysed")),
            graph_breaks=tuple(breaks.get("reasons") or ()),
            graph_break_count=int(breaks.get("count") or 0),
            dynamic_dims=tuple(inspection.get("dynamic_dims") or ()),
            runnable=runnable.get("ok", True) is not False,
            runnable_reason=runnable.get("reason"),
            keyword_inputs=snippets.keyword_inputs_of(inspection),
        )

    @property
    def strong_torchair_case(self) -> bool:
        """npu:: ops that TorchAir converts while Inductor cannot trace them."""
        return self.npu_ops_torchair_covered and bool(set(self.npu_ops) & set(self.inductor_untraceable))


def _op_facts(
    inspection: dict[str, Any],
) -> tuple[list[str], list[str], list[str], list[str], list[str]]:
    """The sorted names of the inspection's custom ops, its npu:: ops, the ops TorchAir's GE
    does not cover, those whose coverage only an NPU knows, and those Inductor cannot trace."""
    ops = list(inspection.get("ops") or []) + list(inspection.get("custom_ops") or [])
    by_name = {op["name"]: op for op in ops if "name" in op}
    custom = sorted(op["name"] for op in inspection.get("custom_ops") or [])
    npu = sorted(name for name in custom if by_name[name].get("namespace", name.split(".")[0]) == "npu")
    coverage = {name: op.get("coverage") or {} for name, op in by_name.items()}
    unknown = sorted(n for n, c in coverage.items() if torchair_status_unknown(c))
    uncovered = sorted(n for n, c in coverage.items() if c.get("torchair") not in COVERED and n not in unknown)
    untraceable = sorted(
        n
        for n, op in by_name.items()
        if coverage[n].get("inductor") == "untraceable" or (n in custom and op.get("has_fake_kernel") is False)
    )
    return custom, npu, uncovered, unknown, untraceable


def torchair_status_unknown(coverage: dict[str, Any]) -> bool:
    """Whether an op's GE coverage can only be known on an NPU (its kernel is picked there), not "uncovered"."""
    if "torchair_unknown" in coverage:
        return bool(coverage["torchair_unknown"])
    note = str(coverage.get("torchair_note") or "").lower()
    return any(phrase in note for phrase in _DEVICE_DEPENDENT_PHRASES)


def short_list(names: tuple[str, ...] | list[str], limit: int = 4) -> str:
    names = list(names)
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


# ------------------------------------------------------------------------------------------- rules
def rule_measurements(prov: Provenance, context: DeploymentContext) -> dict[str, Any]:
    evidence = {"device": prov.device, "measured_on": prov.measured_on, "target": context.target}
    if prov.usable:
        outcome = "Yes: the options are ranked by their measurements."
        if not prov.real:
            outcome += f" Note: {prov.note}."
    else:
        outcome = f"No ({prov.note}): deciding from the selection tree and op coverage alone (unmeasured)."
    return step(
        "measurements_on_target", f"Are there measurements on the target device ({context.target})?", evidence, outcome
    )


def rule_hard_filters(
    qualified: list[Option], excluded: dict[str, str], context: DeploymentContext | None = None
) -> dict[str, Any]:
    evidence: dict[str, Any] = {"qualified": [o.label for o in qualified], "excluded": dict(excluded)}
    if context is not None and context.latency_target_ms is not None:
        evidence["latency_target"] = (
            f"p99 <= {context.latency_target_ms:g} ms, checked on each option's own p99 as timed in its own "
            "process (a tail latency has no side-by-side normalisation)"
        )
    if not qualified:
        outcome = "No option qualifies."
    else:
        outcome = f"{len(qualified)} option(s) qualify: {', '.join(o.label for o in qualified)}."
        if excluded:
            outcome += f" Excluded: {', '.join(excluded)}."
    return step(
        "hard_filters", "Which options ran, stayed accurate and fit the latency and memory limits?", evidence, outcome
    )


def rule_plan_skips(skipped: dict[str, str]) -> dict[str, Any]:
    """The variants the measurement left out: no result of theirs could change the answer
    (advisor.core.decision.plan_pruning), or the inspection already ruled them out (cheap_evidence)."""
    return step(
        "plan_skipped_variants",
        "Which variants were not measured because no result of theirs could change the recommendation, or the "
        "inspection already ruled them out?",
        {"skipped": dict(skipped)},
        f"Not measured, for this context: {', '.join(skipped)} (each reason is under why not).",
    )


def rule_shape_sweep(
    run: dict[str, Any] | None, chosen: Option | None, qualified: list[Option]
) -> dict[str, Any] | None:
    """The context's shape sweep: the best qualified option at each swept shape, and where that changes."""
    allowed = {o.label for o in qualified}
    outcome = where_the_answer_changes(run, chosen.label if chosen else None, allowed)
    if outcome is None:
        return None
    evidence = {"best_by_shape": [a._asdict() for a in best_by_shape(run, allowed | {EAGER_LABEL})]}
    return step("shape_sweep", "Does the answer hold at every swept input shape?", evidence, outcome)


def export_option(
    context: DeploymentContext,
    facts: InspectionFacts,
    options: list[Option],
    excluded: dict[str, str],
    int8: Option | None = None,
) -> tuple[Option | None, list[str]]:
    """The export-path option for the target, or None with the reasons the graph does not convert. The float export
    (`onnxruntime:default`); its qualified int8 export `int8` when the float one is out (e.g. over the memory
    budget): its run shows the graph converts too (advisor.core.decision.edge_rules weighs the two)."""
    if context.target == "npu":
        option, blockers = _torchair_export(facts, options, excluded)
    else:
        option, blockers = _onnx_export(facts, options, excluded, int8)
    if facts.graph_break_count:
        blockers.append(f"{facts.graph_break_count} graph break(s): an offline export needs one whole graph")
    if not facts.present and option.row is None:
        blockers.append("without an inspection or a measurement it is unknown whether the graph converts")
    return (None if blockers else option), blockers


def _torchair_export(
    facts: InspectionFacts, options: list[Option], excluded: dict[str, str]
) -> tuple[Option, list[str]]:
    """The NPU export (torchair.dynamo_export of the GE graph) and what blocks it."""
    blockers: list[str] = []
    ge = next((o for o in options if o.label == "torchair:max-autotune"), None)
    if ge is not None and ge.label in excluded:
        blockers.append(f"the TorchAir GE graph (what dynamo_export writes) is out: {excluded[ge.label]}")
    if facts.torchair_uncovered:
        blockers.append(f"no TorchAir GE converter for {short_list(facts.torchair_uncovered)}")
    return Option("torchair", TORCHAIR_EXPORT_MODE, "export", ge.row if ge else None), blockers


def _onnx_export(
    facts: InspectionFacts, options: list[Option], excluded: dict[str, str], int8: Option | None
) -> tuple[Option, list[str]]:
    """The ONNX export (its int8 export when the float one is out or absent) and what blocks it."""
    blockers: list[str] = []
    onnx = next((o for o in options if o.backend == "onnxruntime" and o.mode == "default"), None)
    if onnx is not None and onnx.label in excluded:
        if int8 is None:
            blockers.append(f"the ONNX Runtime run is out: {excluded[onnx.label]}")
        else:
            onnx = int8
    elif onnx is None:
        onnx = int8
    if facts.custom_ops:
        blockers.append(f"ONNX export has no translation for the custom ops {short_list(facts.custom_ops)}")
    return (onnx if onnx is not None else Option("onnxruntime", "default", "export")), blockers


NPU_EXPORT_PATH = "torchair.dynamo_export -> atc"
ONNX_EXPORT_PATH = "ONNX export -> ONNX Runtime"
# what each offline export the engine may ship deploys: the export path's label names the ones measured
EXPORT_PATHS = {
    catalogue.option_label("onnxruntime", "default"): ONNX_EXPORT_PATH,
    catalogue.option_label("onnxruntime", catalogue.ORT_INT8_MODE): "int8 ONNX export -> ONNX Runtime",
    catalogue.option_label("openvino", catalogue.OPENVINO_INT8_MODE): "OpenVINO int8 IR -> OpenVINO runtime",
}


def export_path_label(context: DeploymentContext, options: list[Option], excluded: dict[str, str]) -> str:
    """The export path as the report names it: on an NPU torchair.dynamo_export -> atc; elsewhere the offline
    exports measured and still in (each with its option), else the measured ones (all out), else - nothing
    measured - the tree's ONNX path, said unmeasured. So an analysis that measured only openvino:int8 never reads
    "ONNX Runtime"."""
    if context.target == "npu":
        return NPU_EXPORT_PATH
    measured = [o for o in options if o.label in EXPORT_PATHS and o.row is not None]
    named = [o for o in measured if o.label not in excluded] or measured
    if not named:
        return f"{ONNX_EXPORT_PATH}, unmeasured"
    return " or ".join(f"{EXPORT_PATHS[o.label]}: {o.label}" for o in named)


def rule_export_path(
    context: DeploymentContext, option: Option | None, blockers: list[str], path: str = ONNX_EXPORT_PATH
) -> dict[str, Any]:
    """Whether the export path (`path`, export_path_label's name for it) is taken or blocked, and by what."""
    evidence = {"stage": context.stage, "needs_offline_export": context.needs_offline_export, "blockers": blockers}
    path = NPU_EXPORT_PATH if context.target == "npu" else path
    if option is not None:
        outcome = f"The deployment needs an offline export and the graph converts: use the export path ({path})."
    else:
        outcome = (
            f"The deployment needs an offline export, but the export path ({path}) is blocked: "
            f"{'; '.join(blockers)}. Falling back to steady-state speed."
        )
    return step(
        "edge_prefers_export_path",
        "Does the deployment need an offline export (edge or needs_offline_export)?",
        evidence,
        outcome,
    )


def fast_compile_wanted(context: DeploymentContext) -> bool:
    return context.stage == "prototype" or context.model_changes == "frequent"


def rule_objective(context: DeploymentContext) -> dict[str, Any]:
    evidence = {"stage": context.stage, "model_changes": context.model_changes}
    if fast_compile_wanted(context):
        return step(
            "prototype_prefers_fast_compile",
            "Is this a prototype or a model that changes often?",
            evidence,
            "A prototype or often-changed model recompiles at every change, so compile time weighs most.",
        )
    return step(
        "production_prefers_steady_state",
        "Is this a fixed production model?",
        evidence,
        "A fixed production model is compiled rarely and called often, so steady-state speed weighs most.",
    )


def rule_npu_custom_ops(facts: InspectionFacts) -> dict[str, Any]:
    evidence = {
        "npu_ops": list(facts.npu_ops),
        "torchair_covers_them": facts.npu_ops_torchair_covered,
        "inductor_cannot_trace": [n for n in facts.inductor_untraceable if n in facts.npu_ops],
    }
    if facts.strong_torchair_case:
        outcome = (
            "TorchAir converts the npu:: ops while Inductor cannot trace them (graph breaks): "
            "a strong case for TorchAir."
        )
    elif facts.npu_ops_torchair_covered:
        outcome = "TorchAir converts them and Inductor can trace them too: no strong preference."
    else:
        outcome = "TorchAir's GE mode lacks a converter for some of them: no case for TorchAir from coverage."
    return step(
        "npu_custom_ops_favour_torchair",
        "Does the model use npu:: custom ops that only TorchAir handles?",
        evidence,
        outcome,
    )


# ------------------------------------------------------------------------------------------- measured trade-off
@dataclass
class TradeOff:
    """The measured choice: fast-compiling option A vs fast-running option B."""

    chosen: Option
    fast_compile: Option
    fast_run: Option
    unbeaten: list[Option]
    n_star: float | None
    decided_by: str  # "single" | "dominates" | "break_even" | "objective" | "eager_repays" (compile not repaid)
    steps: list[dict[str, Any]]
    eager: Option | None = None  # the qualified eager option, the baseline every compiled option must beat
    # the two leading options when their ranking is unresolved (the better estimate first): "inconclusive between"
    inconclusive: tuple[Option, Option] | None = None

    @property
    def tie(self) -> bool:
        if self.inconclusive is not None:
            return False
        return self.chosen in self.unbeaten and len([o for o in self.unbeaten if not o.unresolved]) > 1

    @property
    def leads_beyond_noise(self) -> bool:
        """Whether the fast-running option beats every other unbeaten option, and eager, beyond the noise (the interval
        of each ratio above 1): only then is the ranking itself certain enough for "high" confidence."""
        others = [o for o in [*self.unbeaten, self.eager] if o is not None and o is not self.fast_run]
        return all(beats(self.fast_run, other) for other in others)

    @property
    def latency_basis(self) -> str:
        """ "side_by_side" when A's and B's latencies (and so N*) come from side-by-side speedups, else "raw"
        (at least one of them is a raw median from its own process)."""
        return "side_by_side" if both_side_by_side(self.fast_compile, self.fast_run) else "raw"


def measured_trade_off(context: DeploymentContext, qualified: list[Option]) -> TradeOff:
    """Pick among qualified measured options.

    When eager qualified, only the compiled options faster than eager beyond the noise compete (a tie with
    eager is not worth a compile); when none is, eager wins. Among the competitors:
    B = of those no other beats beyond noise, the fastest-compiling (then simplest);
    A = the fastest-compiling (then simplest). "Beats" compares side by side with eager where the rows allow
    (see decision_candidates). B wins when it compiles no slower; otherwise the break-even against expected
    calls decides, and without expected calls the stage's objective does.
    """
    warm = context.ships_compile_cache
    eager = next((o for o in qualified if o.is_baseline), None)
    pool, hopeful = _competitors(eager, qualified)
    unbeaten = [o for o in pool if not any(beats(other, o) for other in pool if other is not o)]
    resolved = [o for o in unbeaten if not o.unresolved]  # an unresolved option is unbeaten for want of evidence
    leading = _leading_pair(unbeaten, eager if hopeful else None)
    inconclusive = leading if leading is not None and _inconclusive(*leading) else None
    if inconclusive is not None:
        fast_run = inconclusive[0]  # the better estimate
    else:
        fast_run = min(_tie_candidates(resolved or unbeaten, eager), key=lambda o: simplicity_key(o, warm))
    fast_compile = fast_run if fast_run.is_baseline else min(pool, key=lambda o: simplicity_key(o, warm))
    steps = _ranking_steps(qualified, eager, pool, resolved, fast_run, inconclusive, warm)
    a, b = fast_compile, fast_run
    chosen, decided_by, n_star = _compile_or_run(context, a, b)
    steps.append(rule_break_even(context, a, b, n_star, chosen, decided_by))
    if eager is not None and not chosen.is_baseline and not repays_compile(chosen, eager, context):
        # the cheaper of A and B in total, and eager (no compile) is cheaper still over the expected calls
        steps.append(rule_compile_not_repaid(context, eager, chosen))
        chosen, decided_by = eager, "eager_repays"
    return TradeOff(chosen, a, b, unbeaten, n_star, decided_by, steps, eager, inconclusive)


def _competitors(eager: Option | None, qualified: list[Option]) -> tuple[list[Option], list[Option]]:
    """The options that compete, and the hopeful ones among them. When some compiled options run faster than eager
    beyond the noise, they compete with every compiled option whose estimate is better than eager's and that none of
    them beats (its rivals: an option is ranked against the others by their pairwise ratios, not by its own test
    against eager alone - 1.08x [0.99-1.13] is not set aside for 1.05x [1.00-1.14]). Else the unresolved ones whose
    estimate is faster (the ranking is open, not "eager"); else all."""
    faster_than_eager = [o for o in qualified if eager is not None and o is not eager and beats(o, eager)]
    if faster_than_eager:
        rivals = [
            o
            for o in _better_estimates_than(eager, qualified, resolved_too=True)  # type: ignore[arg-type]
            if o not in faster_than_eager and not any(beats(f, o) for f in faster_than_eager)
        ]
        return faster_than_eager + rivals, []
    # nothing resolved beats eager, but an unresolved option's estimate is faster: the ranking is open, not "eager"
    hopeful = [] if eager is None else _better_estimates_than(eager, qualified)
    return hopeful or qualified, hopeful  # no cycles in "beats": eager is unbeaten in `qualified`


def _tie_candidates(unbeaten: list[Option], eager: Option | None) -> list[Option]:
    """Of the options tied within the noise, those the tie rule picks from: the ones shown faster than eager beyond
    the noise when any is (a rival within noise of eager is not preferred to one shown faster), else all of them;
    `simplicity_key` (compile time, then the simpler backend) then picks."""
    shown = [o for o in unbeaten if eager is None or o is eager or beats(o, eager)]
    return shown or unbeaten


def _ranking_steps(
    qualified: list[Option],
    eager: Option | None,
    pool: list[Option],
    resolved: list[Option],
    fast_run: Option,
    inconclusive: tuple[Option, Option] | None,
    warm: bool,
) -> list[dict[str, Any]]:
    """The steps that rank the options before the compile/run trade-off: against eager, the unresolved ones, the
    leading pair compared with each other, a tie within the noise."""
    steps: list[dict[str, Any]] = []
    compiled = [o for o in qualified if not o.is_baseline]
    if eager is not None and compiled:
        steps.append(rule_compiled_vs_eager(eager, compiled))
    unresolved = [o for o in qualified if o.unresolved]
    if unresolved:
        steps.append(rule_unresolved(unresolved))
    ranked = _leading_pair(pool, None)
    if ranked is not None and not (ranked[0].is_baseline or ranked[1].is_baseline) and paired_ratio(*ranked[::-1]):
        steps.append(rule_leading_paired(*ranked, inconclusive is not None))
    elif inconclusive is not None:
        steps.append(rule_leading_paired(*inconclusive, True))
    if len(resolved) > 1 and inconclusive is None:
        steps.append(rule_noise_tie(resolved, fast_run, warm, eager))
    return steps


def _compile_or_run(context: DeploymentContext, a: Option, b: Option) -> tuple[Option, str, float | None]:
    """A (fastest to compile) or B (fastest to run): (chosen, decided_by, N*). B when it compiles no slower, A when
    it runs no slower, else the break-even against the expected calls, else the stage's objective."""
    warm = context.ships_compile_cache
    compile_a, compile_b = a.compile_s(warm), b.compile_s(warm)
    lat_a, lat_b = a.latency_ms, b.latency_ms
    if a == b:
        return a, "single", None
    if compile_a is not None and compile_b is not None and compile_b <= compile_a:
        return b, "dominates", 0.0
    if lat_a is not None and lat_b is not None and lat_a <= lat_b:
        return a, "dominates", None
    n_star: float | None = None
    if compile_a is not None and compile_b is not None and lat_a is not None and lat_b is not None:
        n_star = break_even_calls(compile_a, lat_a, compile_b, lat_b)
    expected = context.expected_calls_per_compile
    if n_star is not None and expected is not None:
        return (b if expected > n_star else a), "break_even", n_star
    return (a if fast_compile_wanted(context) else b), "objective", n_star


PAIRED_TIE_MAX_RATIO = noise.HIGH_CONFIDENCE_MAX_CI_RATIO  # a paired interval around 1.0 this tight: equally fast


def _better_estimates_than(eager: Option, qualified: list[Option], *, resolved_too: bool = False) -> list[Option]:
    """Compiled options (unresolved ones, or any with `resolved_too`) that eager does not beat and whose point
    estimate is faster than eager's."""
    ref = eager.latency_ms
    return [
        o
        for o in qualified
        if not o.is_baseline
        and (o.unresolved or resolved_too)
        and not beats(eager, o)
        and ref is not None
        and o.latency_ms is not None
        and o.latency_ms < ref
    ]


def _leading_pair(options: list[Option], runner_up: Option | None) -> tuple[Option, Option] | None:
    """The best point estimate on the common scale and the next one (`runner_up` when there is no next one)."""
    ranked = sorted((o for o in options if o.latency_ms is not None), key=lambda o: (o.latency_ms, o.label))
    if not ranked:
        return None
    second = ranked[1] if len(ranked) > 1 else runner_up
    return None if second is None or second is ranked[0] else (ranked[0], second)


def _inconclusive(leader: Option, runner: Option) -> bool:
    """Whether the two leading (mutually unbeaten) options are unranked for want of evidence, not equally fast: one
    of them is unresolved, or their paired interval straddles 1.0 wider than PAIRED_TIE_MAX_RATIO. Two resolved rows
    without a paired comparison (not both timed side by side with eager) keep the overlap rule (a tie)."""
    if beats(leader, runner):
        return False
    if runner.is_baseline:
        return leader.unresolved  # a resolved tie with eager is not worth a compile
    paired = paired_ratio(runner, leader)
    if paired is None:
        # an unresolved estimate that leads is not set aside for a resolved one it could not be compared with
        return leader.unresolved or runner.unresolved
    low, high = paired[1]
    return leader.unresolved or runner.unresolved or not (low > 0 and high / low <= PAIRED_TIE_MAX_RATIO)


def paired_phrase(slower: Option, faster: Option) -> str:
    """`faster` against `slower` with the interval of their ratio and the order it supports (advisor.core.claims):
    paired where both were timed side by side with eager."""
    return comparison_phrase(slower, faster)


def rule_leading_paired(leader: Option, runner: Option, inconclusive: bool) -> dict[str, Any]:
    """The two leading options compared with each other, not only with eager."""
    paired = paired_ratio(runner, leader)
    evidence: dict[str, Any] = {
        "leader": leader.label,
        "runner_up": runner.label,
        "basis": "speedup_leader / speedup_runner_up, each timed side by side with eager in its own process; "
        "log-space 95% half-widths combined in quadrature",
        "tie_max_ratio": PAIRED_TIE_MAX_RATIO,
    }
    if paired is not None:
        low, high = paired[1]
        evidence["ratio"], evidence["ci"] = paired[0], [low, high if math.isfinite(high) else None]  # None: open
    what = paired_phrase(runner, leader)
    if runner.is_baseline and paired is None:
        what = f"{leader.label}'s estimate is faster than {runner.label}'s, {unresolved_phrase(leader)}"
    if inconclusive:
        outcome = (
            f"Inconclusive between {leader.label} and {runner.label}: {what}. Recommending {leader.label}, the better "
            "estimate, at low confidence; re-measure on a quiet node to settle it."
        )
    elif beats(leader, runner):
        outcome = f"{leader.label} leads beyond the noise: {what}."
    else:
        outcome = f"Equally fast within the noise: {what}."
    return step(
        "leading_options_paired",
        "How do the leading options compare with each other (paired), not only with eager?",
        evidence,
        outcome,
    )


def repays_compile(option: Option, eager: Option | None, context: DeploymentContext) -> bool:
    """Whether `option`'s compile pays for itself against eager (which compiles nothing) within the expected calls
    per compile: compile_s <= calls * (eager latency - its latency). True when the calls or a number are unknown."""
    calls = context.expected_calls_per_compile
    if eager is None or calls is None:
        return True
    compile_s = option.compile_s(context.ships_compile_cache)
    eager_ms, option_ms = eager.latency_ms, option.latency_ms
    if compile_s is None or eager_ms is None or option_ms is None:
        return True
    return compile_s * 1000.0 <= calls * (eager_ms - option_ms)


def calls_to_repay(option: Option, eager: Option, warm: bool) -> float | None:
    """After how many calls `option`'s compile pays for itself against eager (None: never)."""
    compile_s = option.compile_s(warm) or 0.0
    return break_even_calls(0.0, eager.latency_ms or 0.0, compile_s, option.latency_ms or 0.0)


def rule_compile_not_repaid(context: DeploymentContext, eager: Option, option: Option) -> dict[str, Any]:
    """The chosen option runs faster than eager, yet its compile costs more than the expected calls save."""
    unit = context.call_unit
    calls = context.expected_calls_per_compile or 0
    saved_ms = (eager.latency_ms or 0.0) - (option.latency_ms or 0.0)
    compile_s = option.compile_s(context.ships_compile_cache) or 0.0
    n_star = calls_to_repay(option, eager, context.ships_compile_cache)
    evidence = {
        "option": option.label,
        "compile_s": compile_s,
        "saved_ms_per_call": saved_ms,
        "expected_calls_per_compile": calls,
        "n_star_against_eager": n_star,
    }
    outcome = (
        f"{option.label} saves {saved_ms:.3g} ms per call, so {calls:,} {unit} save {calls * saved_ms / 1000.0:.3g} s, "
        f"less than its {option.compile_phrase(context.ships_compile_cache) or f'{compile_s:.3g} s'} compile "
        f"(it pays back after {format_calls(n_star)} {unit}): {eager.label}, which compiles nothing."
    )
    return step(
        "compile_repaid_against_eager",
        f"Does the chosen option's compile pay for itself against eager over the expected {unit}?",
        evidence,
        outcome,
    )


def eager_verdict(option: Option, eager: Option) -> str:
    """ "faster" / "slower" / "tie" against eager, beyond the noise (side by side where the row allows);
    "unresolved" when its interval is too wide to call it faster (noise.SPEEDUP_CI_MAX_RATIO) and it is not
    clearly slower."""
    if beats(option, eager):
        return "faster"
    if beats(eager, option):
        return "slower"
    return "unresolved" if option.unresolved else "tie"


def unresolved_phrase(option: Option) -> str:
    """Why an unresolved option's speed settles nothing, with its interval."""
    ratio = option.interval_ratio or math.inf
    if option.side_by_side:
        low, high = option.speedup_ci  # type: ignore[misc]
        what = (
            f"its side-by-side speedup {option.speedup:.2f}x has a 95% CI of "
            f"{claims.fmt_sig(low)}-{claims.fmt_sig(high)}x"
        )
    else:
        low, high = option.ci_ms or (math.nan, math.nan)
        what = f"its median {option.median_ms:.3g} ms has a 95% CI of {low:.3g}-{high:.3g} ms"
    against = "" if not option.side_by_side else f" ({claims.speedup_verdict(option.speedup_ci)}, by that interval)"
    return (
        f"{what}{against}, {ratio:.3g}x from end to end (more than {noise.SPEEDUP_CI_MAX_RATIO:g}x): too wide to rank "
        "it against other options"
    )


def rule_compiled_vs_eager(eager: Option, compiled: list[Option]) -> dict[str, Any]:
    """Each compiled option against eager, from the speedup timed interleaved in the same process."""
    options: dict[str, Any] = {}
    texts = []
    for option in compiled:
        verdict = eager_verdict(option, eager)
        if option.side_by_side:
            low, high = option.speedup_ci  # type: ignore[misc]
            options[option.label] = {"speedup": option.speedup, "speedup_ci": [low, high], "verdict": verdict}
        else:
            options[option.label] = {
                "basis": "raw medians from separate processes (the row has no side-by-side eager timing)",
                "median_ms": option.median_ms,
                "eager_median_ms": eager.median_ms,
                "verdict": verdict,
            }
        texts.append(comparison_phrase(eager, option))  # the ratio, its interval and the order it supports
    evidence = {
        "reference_eager_ms": eager.reference_ms,
        "reference": "median of the eager timings of every measured process",
        "options": options,
    }
    faster = [label for label, item in options.items() if item["verdict"] == "faster"]
    unresolved = [o.label for o in compiled if options[o.label]["verdict"] == "unresolved"]
    evidence["max_ci_ratio"] = noise.SPEEDUP_CI_MAX_RATIO
    if faster:
        outcome = f"{'; '.join(texts)}. Faster than eager beyond the noise: {', '.join(faster)}."
    else:
        outcome = (
            f"{'; '.join(texts)}. No compiled option is faster than eager beyond the noise: "
            "a tie or slower is not worth a compile."
        )
    if unresolved:
        outcome += (
            f" Within noise of eager and too wide to rank (95% CI wider than {noise.SPEEDUP_CI_MAX_RATIO:g}x): "
            f"{', '.join(unresolved)}."
        )
    return step(
        "compiled_vs_eager_side_by_side",
        "Does each compiled option run faster than eager, timed side by side in the same process?",
        evidence,
        outcome,
    )


def rule_unresolved(unresolved: list[Option]) -> dict[str, Any]:
    """Options whose interval is too wide to rank: they count as faster than nothing."""
    evidence = {
        "max_ci_ratio": noise.SPEEDUP_CI_MAX_RATIO,
        "options": {o.label: {"ci_ratio": o.interval_ratio, "basis": o.basis} for o in unresolved},
    }
    outcome = (
        "Unresolved, so ranked against another option only where the interval of their ratio excludes 1: "
        + "; ".join(f"{o.label}: {unresolved_phrase(o)}" for o in unresolved)
        + ". Re-measure on a quiet machine to rank them."
    )
    return step(
        "wide_ci_is_unresolved",
        "Is any option's speed too uncertain to rank (a confidence interval wider than the set ratio)?",
        evidence,
        outcome,
    )


def rule_noise_tie(unbeaten: list[Option], winner: Option, warm: bool, eager: Option | None = None) -> dict[str, Any]:
    """The fastest options run equally fast within the noise: the tie rules pick (shown faster than eager first, then
    the faster compile, then the simpler backend)."""
    evidence: dict[str, Any] = {
        o.label: {
            "latency_ms": o.latency_ms,
            "ci_ms": list(o.latency_ci_ms or ()),
            "basis": o.basis,
            "compile_s": o.compile_s(warm),
        }
        for o in unbeaten
    }
    others = [o for o in unbeaten if o is not winner]
    ratios = "; ".join(comparison_phrase(*sorted((o, winner), key=_slower_first)) for o in others)
    shown = eager is not None and not winner.is_baseline and any(not beats(o, eager) for o in others)
    why = "shown faster than eager beyond the noise, then " if shown else ""
    outcome = (
        f"Tie: {winner.label} and {', '.join(o.label for o in others)} run equally fast within the measured noise "
        f"({ratios}); preferring {winner.label}, {why}the faster-compiling, simpler option (the tie rules)."
    )
    return step(
        "noise_is_a_tie",
        "Is any speed difference between the fastest options larger than the noise?",
        evidence,
        outcome,
    )


def _slower_first(option: Option) -> tuple[float, str]:
    """Sort key: the worse estimate first, so a ratio reads "the better one ran r x as fast as the other"."""
    return (-(option.latency_ms or 0.0), option.label)


def rule_break_even(
    context: DeploymentContext,
    a: Option,
    b: Option,
    n_star: float | None,
    chosen: Option,
    decided_by: str,
) -> dict[str, Any]:
    warm = context.ships_compile_cache
    unit = context.call_unit
    evidence = {
        "fast_compile": a.label,
        "fast_run": b.label,
        "compile_s": {a.label: a.compile_s(warm), b.label: b.compile_s(warm)},
        "compile_kind": "warm (cached)" if warm else "cold",
        "latency_ms": {a.label: a.latency_ms, b.label: b.latency_ms},
        "latency_basis": {a.label: a.basis, b.label: b.basis},
        "n_star": n_star,
        "expected_calls_per_compile": context.expected_calls_per_compile,
    }
    if decided_by == "single" and a.is_baseline:
        outcome = f"{a.label} needs no compile and no compiled option runs faster beyond the noise: no trade-off."
    elif decided_by == "single":
        outcome = f"{a.label} both compiles fastest and runs fastest (within noise): no trade-off."
    elif decided_by == "dominates":
        loser = a if chosen is b else b
        outcome = f"{chosen.label} is at least as fast to compile and to run as {loser.label}: no trade-off."
    elif decided_by == "break_even":
        side = "above" if chosen is b else "at or below"
        outcome = (
            f"{b.label} pays for its longer compile after {format_calls(n_star)} {unit}; you expect "
            f"{context.expected_calls_per_compile:,} per compile ({side} the break-even): {chosen.label}."
        )
    else:
        why = "compile time weighs most" if chosen is a else "steady-state speed weighs most"
        known = f"break-even {format_calls(n_star)} {unit}" if n_star is not None else "break-even unknown"
        outcome = f"Expected {unit} per compile not given ({known}); {why} at this stage: {chosen.label}."
    return step(
        "break_even_decides",
        f"Does the faster-running option pay for its compile time over the expected {unit}?",
        evidence,
        outcome,
    )


def rule_layered(context: DeploymentContext, production: Option | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    evidence = {"fleet": context.fleet, "target": context.target}
    if production is None:
        return step(
            "mixed_fleet_layered",
            "Is the model developed on CPU/GPU and served on NPU?",
            evidence,
            "Mixed fleet, but no option qualifies for production.",
        ), None
    layered = {
        "development": {
            "backend": "inductor",
            "mode": "default",
            "devices": ["cpu", "cuda"],
            "why": "fast to compile and runs anywhere while the model is being developed",
        },
        "production": {
            "backend": production.backend,
            "mode": production.mode,
            "devices": [context.target],
            "why": f"the choice for serving on {context.target}",
        },
    }
    outcome = (
        f"Mixed fleet: layered - torch.compile with Inductor on the CPU/GPU development nodes, {production.label} "
        f"on the {context.target.upper()} production nodes."
    )
    return step(
        "mixed_fleet_layered", "Is the model developed on CPU/GPU and served on NPU?", evidence, outcome
    ), layered


def leading_ranking(run: dict[str, Any], context: DeploymentContext | None = None) -> dict[str, Any]:
    """Whether the run ranks its leading options beyond the noise, as the measured trade-off reads it (for the
    re-measure rounds: advisor.harness.measurement.run). `context`: the deployment's, else the run's device and
    workload with the defaults. {"resolved": bool, "leading": [labels], "text": str}."""
    from advisor.core.context import parse_context
    from advisor.core.decision.candidates import measured_options, split_by_filters

    if context is None:
        device = (run.get("environment") or {}).get("device") or "cpu"
        context = parse_context({"target": device, "workload": run.get("workload") or DEFAULT_WORKLOAD})
    qualified, _ = split_by_filters(measured_options(run), context)
    if not qualified:
        return {"resolved": True, "leading": [], "text": "no option qualifies"}
    trade = measured_trade_off(context, qualified)
    deciding = sorted(deciding_labels(trade))
    if trade.inconclusive is not None:
        leader, runner = trade.inconclusive
        return {
            "resolved": False,
            "leading": [leader.label, runner.label],
            "deciding": deciding,
            "text": f"inconclusive between {leader.label} and {runner.label}",
        }
    return {
        "resolved": True,
        "leading": [trade.fast_run.label],
        "deciding": deciding,
        "text": f"{trade.fast_run.label} leads",
    }


def deciding_labels(trade: TradeOff) -> set[str]:
    """The options a measured choice rests on: the chosen one, the fast-compiling A and fast-running B, those
    within the noise of the best (unbeaten), and eager. Any other option is beaten beyond its own noise: timing it
    again cannot change the choice."""
    options = [trade.chosen, trade.fast_compile, trade.fast_run, *trade.unbeaten, trade.eager]
    return {option.label for option in options if option is not None}
