"""What the recommendation tells the user besides the choice: why-not texts, caveats with fixes, the snippet.

Snippets come from advisor.core.snippets, the same text the measured backend shows. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from advisor.core import snippets
from advisor.core.context import DeploymentContext
from advisor.core.decision.break_even import format_calls
from advisor.core.decision.candidates import TORCHAIR_EXPORT_MODE, Option, Provenance, beats, comparison_phrase
from advisor.core.decision.rules import (
    InspectionFacts,
    TradeOff,
    calls_to_repay,
    paired_phrase,
    short_list,
    unresolved_phrase,
)

LONG_COMPILE_S = 5.0  # above this a shipped compile cache is worth suggesting
# torch_npu's Inductor (torch_npu/_inductor) generates Triton kernels by default; without triton-ascend it registers no
# NPU code generation (torch_npu/_inductor/__init__.py; advisor/harness/backends/inductor.py checks for it).
INDUCTOR_NPU_REQUIREMENT = (
    "Inductor on an NPU needs the triton-ascend package (torch_npu's default Inductor code generation is Triton)"
)


def _a(device: str) -> str:
    """The device with its article: "an NPU", "a CPU", "a CUDA GPU"."""
    return {"npu": "an NPU", "cuda": "a CUDA GPU"}.get(device, f"a {device.upper()}")


# ------------------------------------------------------------------------------------------- why not
def speed_comparison(other: Option, chosen: Option) -> str:
    """`other`'s speed against `chosen`'s, the better estimate first, with the interval of their ratio and the order
    it supports (advisor.core.claims): side by side with eager where a row allows, paired where both do."""
    if (chosen.latency_ms or 0) <= (other.latency_ms or 0):
        return comparison_phrase(other, chosen)
    return comparison_phrase(chosen, other)


def measured_why_not(other: Option, chosen: Option, trade: TradeOff, context: DeploymentContext) -> str:
    ms = speed_comparison(other, chosen)
    if beats(chosen, other):
        return f"slower than {chosen.label}: {ms}"
    if trade.inconclusive is not None and other in trade.inconclusive and chosen in trade.inconclusive:
        return (
            f"inconclusive against {chosen.label}: {paired_phrase(other, chosen)}; {chosen.label} is the better "
            "estimate, re-measure on a quiet node to rank them"
        )
    if other.is_baseline and chosen.unresolved and not beats(chosen, other):
        return (
            f"not ranked against {chosen.label} beyond the noise ({ms}); {chosen.label} is the better estimate, "
            "re-measure on a quiet node to settle it"
        )
    if other.unresolved:
        return f"unresolved: {unresolved_phrase(other)}; re-measure on a quiet machine to rank it"
    eager = trade.eager
    if eager is not None and other is not eager and chosen is not eager and not beats(other, eager):
        return f"not faster than eager beyond the noise ({speed_comparison(other, eager)}), so not worth a compile"
    if beats(other, chosen):
        return _faster_why_not(other, chosen, trade, context, ms)
    return f"as fast within the measured noise ({ms}); {chosen.label} compiles faster or is simpler"


def _faster_why_not(other: Option, chosen: Option, trade: TradeOff, context: DeploymentContext, ms: str) -> str:
    """Why `other`, which runs faster than `chosen`, lost: its compile does not pay off over the expected calls
    (against the fast-compiling option, or against eager), or compile time weighs most."""
    warm = context.ships_compile_cache
    c_other, c_chosen = other.compile_s(warm), chosen.compile_s(warm)
    compile_text = "" if c_other is None or c_chosen is None else f" ({c_other:.3g} s vs {c_chosen:.3g} s)"
    if trade.decided_by == "break_even" and other is trade.fast_run:
        return (
            f"runs faster ({ms}) but its longer compile{compile_text} pays off only after "
            f"{format_calls(trade.n_star)} {context.call_unit} per compile; you expect "
            f"{context.expected_calls_per_compile:,}"
        )
    if trade.decided_by == "eager_repays" and chosen.is_baseline and c_other is not None:
        n_star = calls_to_repay(other, chosen, warm)
        return (
            f"runs faster ({ms}) but its {c_other:.3g} s compile pays off only after {format_calls(n_star)} "
            f"{context.call_unit} per compile; you expect {context.expected_calls_per_compile:,}"
        )
    return f"runs faster ({ms}) but compiles slower{compile_text}, and compile time weighs most here"


def export_why_not(other: Option, chosen: Option) -> str:
    """Why not `other` when the deployment needs an offline export and `chosen` is the export path."""
    what = "plain PyTorch, not an exported graph" if other.is_baseline else "an online (JIT) compile, not an export"
    text = f"the deployment needs an offline export; {other.label} is {what}"
    if chosen.mode != TORCHAIR_EXPORT_MODE and other.latency_ms is not None and chosen.latency_ms is not None:
        text += f" ({speed_comparison(other, chosen)})"
    return text


def unmeasured_why_not(other: Option, chosen: Option) -> str:
    """Why not `other` when the choice did not rank measured speeds (the rows say what was measured)."""
    if other.row is None:
        return f"not measured; the selection tree prefers {chosen.label} here"
    status = other.row.get("status", "ok")
    if other.latency_ms is not None and chosen.latency_ms is not None:
        return f"measured ({speed_comparison(other, chosen)}), but the selection tree prefers {chosen.label} here"
    return f"measured (status {status}), but the selection tree prefers {chosen.label} here"


def noise_caveats(quality: dict[str, Any] | None) -> list[dict[str, str]]:
    """The run's noise (advisor.core.noise): the whole run when the machine's speed changed or it was loaded, else
    every noisy row by name."""
    if not quality or not quality.get("noisy"):
        return []
    remeasured = quality.get("remeasured") or []
    rounds = quality.get("rounds") or 1
    budget = quality.get("remeasure_budget_s")
    within = f" within a {budget:g} s budget" if isinstance(budget, int | float) else ""
    again = f" (re-measured in {rounds} round(s){within}: {', '.join(remeasured)}; still noisy)" if remeasured else ""
    fix = (
        "Re-measure on a quiet node (no other jobs on the machine; on a shared VM, pin the worker to dedicated "
        "cores); treat these speeds as rough until then."
    )
    if quality.get("whole_run"):
        reasons = "; ".join(quality.get("run_reasons") or quality.get("reasons") or ())
        rows = quality.get("noisy_rows") or {}
        also = f" Noisy rows: {', '.join(rows)}." if rows else ""
        return [{"issue": f"The whole run was noisy{again}: {reasons}.{also}", "fix": fix}]
    rows = quality.get("noisy_rows") or {}
    listed = "; ".join(f"{name} ({why})" for name, why in rows.items())
    return [{"issue": f"Noisy timings for {', '.join(rows)}{again}: {listed}.", "fix": fix}]


def shared_node_caveats(quality: dict[str, Any] | None) -> list[dict[str, str]]:
    """The load average says other work shared the node before or while the options were timed (noise.shared_reasons,
    threshold noise.SHARED_LOAD_PER_CORE per core)."""
    reasons = (quality or {}).get("shared_reasons") or []
    if not reasons:
        return []
    return [
        {
            "issue": f"The node was shared while measuring: {'; '.join(reasons)}. Absolute latencies are the shared "
            "node's; the side-by-side speedups hold only as long as the load stayed steady.",
            "fix": "Measure on a node with no other jobs (or pin the worker to dedicated cores) before relying on the "
            "latencies.",
        }
    ]


# ------------------------------------------------------------------------------------------- caveats
def caveats_for(
    chosen: Option | None,
    context: DeploymentContext,
    facts: InspectionFacts,
    prov: Provenance,
    trade: TradeOff | None,
    export_blockers: list[str],
    quality: dict[str, Any] | None = None,
) -> list[dict[str, str]]:
    """The recommendation's caveats, each {"issue", "fix"} (advisor.core.results.Caveat, as the engine stores it)."""
    caveats = _provenance_caveats(context, prov)
    caveats += _model_caveats(facts)
    caveats += _npu_caveats(chosen, context, facts, prov)
    if export_blockers:
        caveats.append(
            {
                "issue": "The offline export path is blocked: " + "; ".join(export_blockers) + ".",
                "fix": "Fix the blockers above, then re-run the analysis with needs_offline_export.",
            }
        )
    caveats += _dynamic_shape_caveats(chosen, context, facts)
    caveats += _cache_caveats(chosen, context)
    if prov.usable:
        caveats += noise_caveats(quality)
        caveats += shared_node_caveats(quality)
    if context.resource_constrained and context.memory_budget_mb is None:
        caveats.append(
            {
                "issue": "Resource-constrained target without a memory budget: peak memory was not a filter.",
                "fix": "Set memory_budget_mb so options that need too much memory are excluded.",
            }
        )
    return caveats


def _provenance_caveats(context: DeploymentContext, prov: Provenance) -> list[dict[str, str]]:
    """Where the numbers came from (a stand-in, none) and, for training, what they are per."""
    caveats: list[dict[str, str]] = []
    if prov.note and (prov.usable or prov.device is not None):
        caveats.append(
            {
                "issue": f"Provenance: {prov.note}.",
                "fix": f"Re-run the analysis on {_a(context.target)} worker before relying on the numbers.",
            }
        )
    if not prov.usable:
        caveats.append(
            {
                "issue": "Unmeasured: this recommendation comes from the selection tree and op coverage only.",
                "fix": f"Measure on {_a(context.target)} node (npu-advisor analyze on that node, or a worker).",
            }
        )
    if context.workload == "training" and prov.usable:
        caveats.append(
            {
                "issue": "Training: times, compile break-even and peak memory are per training step (forward, the "
                f"advisor's default loss, backward, {context.optimizer} step), gradients and optimizer state "
                "included; expected_calls_per_compile is read as steps per compile.",
                "fix": "Set expected_calls_per_compile to the steps one compiled model runs (steps per job between "
                "recompiles), and set the optimizer to the one you train with (sgd or adamw) if it is not "
                f"{context.optimizer}.",
            }
        )
    return caveats


def _model_caveats(facts: InspectionFacts) -> list[dict[str, str]]:
    """What the inspection found in the model itself: it did not run, graph breaks, ops torch.compile cannot trace."""
    caveats: list[dict[str, str]] = []
    if not facts.runnable:
        caveats.append(
            {
                "issue": f"The model could not run where it was inspected: {facts.runnable_reason}.",
                "fix": "Inspect and measure on a node that has the model's custom-op libraries (torch_npu).",
            }
        )
    for gb in facts.graph_breaks:
        where = f" at {gb['location']}" if gb.get("location") else ""
        caveats.append(
            {
                "issue": f"Graph break{where}: {gb.get('reason', 'unknown reason')}",
                "fix": "Remove the break (e.g. avoid .item()/data-dependent Python control flow, use torch.cond); "
                "check with torch._dynamo.explain(model)(*inputs).",
            }
        )
    if facts.graph_break_count > len(facts.graph_breaks):
        caveats.append(
            {
                "issue": f"{facts.graph_break_count} graph breaks in total.",
                "fix": "List them with torch._dynamo.explain(model)(*inputs).",
            }
        )
    untraceable = [n for n in facts.inductor_untraceable if n in facts.custom_ops]
    if untraceable:
        caveats.append(
            {
                "issue": f"torch.compile cannot trace {short_list(untraceable)} (no fake/meta kernel): "
                "a graph break at each call.",
                "fix": "Register a fake kernel with torch.library.register_fake('<ns>::<op>') so Dynamo can trace it.",
            }
        )
    return caveats


def _npu_caveats(
    chosen: Option | None, context: DeploymentContext, facts: InspectionFacts, prov: Provenance
) -> list[dict[str, str]]:
    """What an NPU deployment needs checked: GE coverage only an NPU knows, Inductor's Triton requirement, missing
    GE converters for the chosen TorchAir mode."""
    caveats: list[dict[str, str]] = []
    if facts.torchair_unknown and context.target == "npu" and not (prov.usable and prov.real):
        caveats.append(
            {
                "issue": f"TorchAir GE coverage of {short_list(facts.torchair_unknown)} is unknown until measured on "
                "an NPU: on this host the op decomposes into CPU kernels TorchAir never sees; on an NPU torch_npu "
                "picks the kernel when the graph is traced.",
                "fix": f"Measure on {_a('npu')} node (npu-advisor analyze on that node, or an NPU worker); if GE mode "
                "fails there, use mode npugraph_ex (captures the eager kernels) or register a converter.",
            }
        )
    ran_on_npu = prov.usable and prov.real and chosen is not None and chosen.row is not None  # then it was there
    if chosen is not None and chosen.backend == "inductor" and context.target == "npu" and not ran_on_npu:
        caveats.append(
            {
                "issue": f"{INDUCTOR_NPU_REQUIREMENT}; it is not part of torch_npu, "
                "and this was not measured on an NPU.",
                "fix": "pip install triton-ascend on the NPU nodes (the version matching your CANN and torch_npu), or "
                "use TorchAir (torchair.get_npu_backend: GE mode; or mode npugraph_ex, which needs no converters).",
            }
        )
    if chosen is not None and chosen.backend == "torchair" and chosen.mode in ("max-autotune", TORCHAIR_EXPORT_MODE):
        if facts.torchair_uncovered:
            caveats.append(
                {
                    "issue": f"TorchAir's GE mode has no converter for {short_list(facts.torchair_uncovered)}: "
                    "its compile fails (no per-op fallback).",
                    "fix": "Register a converter with @torchair.register_fx_node_ge_converter, or use mode npugraph_ex "
                    "(captures the eager kernels; no converters needed).",
                }
            )
    return caveats


def _dynamic_shape_caveats(
    chosen: Option | None, context: DeploymentContext, facts: InspectionFacts
) -> list[dict[str, str]]:
    dims = [f"{d.get('input')}[{d.get('dim')}]" for d in facts.dynamic_dims]
    dims += [f"{r.input}[{r.dim}] ({r.min}..{r.max})" for r in context.shape_ranges]
    if not dims:
        return []
    if chosen is not None and chosen.backend == "torchair":
        fix = (
            "Compile with dynamic=True and mark the dims: torch._dynamo.mark_dynamic(x, dim), or in GE mode "
            "torchair.inference.set_dim_gears(x, dim_gears={dim: [sizes...]}) to compile one graph per gear."
        )
    else:
        fix = (
            "Mark the dims before compiling: torch._dynamo.mark_dynamic(x, dim, min=..., max=...) to avoid recompiles."
        )
    return [{"issue": f"Dynamic shapes: {', '.join(sorted(set(dims)))}.", "fix": fix}]


def _cache_caveats(chosen: Option | None, context: DeploymentContext) -> list[dict[str, str]]:
    if chosen is None or chosen.is_baseline or chosen.backend not in ("inductor", "torchair"):
        return []
    compile_s = chosen.compile_s(context.ships_compile_cache)
    if context.ships_compile_cache:
        issue = "Compile times are the warm-cache numbers because the deployment ships a compile cache."
    elif compile_s is not None and compile_s >= LONG_COMPILE_S:
        issue = f"Compiling takes {chosen.compile_phrase(False)} on every start."
    else:
        return []
    if chosen.backend == "torchair":
        fix = (
            "Cache the compiled graph: model.forward = torchair.inference.cache_compile(model.forward, config=config, "
            "cache_dir=...); a recompile invalidates it and it is not portable across CANN versions."
        )
    else:
        fix = "Keep Inductor's cache between runs: set TORCHINDUCTOR_CACHE_DIR to a directory you ship or persist."
    return [{"issue": issue, "fix": fix}]


# ------------------------------------------------------------------------------------------- snippets
def snippet_for(
    option: Option | None,
    context: DeploymentContext,
    layered: dict[str, Any] | None,
    keyword_inputs: Sequence[str] = (),
) -> str:
    """The chosen option's snippet (with the development nodes' one for a layered fleet); it calls the model
    with `*args, **kwargs` when the model takes `keyword_inputs`."""
    if option is None:
        return snippets.NO_BACKEND
    call = snippets.call_for(keyword_inputs)
    text = _one_snippet(option, context.workload, call)
    if layered is None:
        return text
    if "prefill" in layered:  # a generation workload layered by phase (advisor.core.decision.generation_phases)
        parts = []
        for phase, part in layered.items():
            snippet = _one_snippet(Option(part["backend"], part["mode"], "generic"), context.workload, call)
            parts.append(
                f"# {phase} program (the archive's '{phase}'; `model` = its ExportedProgram's .module()):\n{snippet}"
            )
        return "\n".join(parts)
    dev = _one_snippet(Option("inductor", "default", "generic"), context.workload, call)
    return f"# Development nodes (CPU/GPU):\n{dev}\n# Production nodes ({context.target.upper()}):\n{text}"


def _one_snippet(option: Option, workload: str, call: str = snippets.POSITIONAL_CALL) -> str:
    try:
        return snippets.recommendation_snippet(option.backend, option.mode, workload, call)
    except (KeyError, ValueError):  # a backend or mode the catalogue cannot write: the row's own text
        pass
    if option.row and option.row.get("snippet"):
        return str(option.row["snippet"])
    return snippets.fallback_snippet(option.backend, option.mode)
