"""The edge branch with quantization: the float export or its int8 export, weighed on their measured rows.

The article's tree sends edge deployment to "export + quantization toolchain". Once the export path is chosen
(rules.export_option), this module decides whether to ship it quantized: the float ONNX export
(`onnxruntime:default`) against an int8 export (`onnxruntime:int8`, or OpenVINO's int8 IR `openvino:int8`: also an
offline artifact its runtime runs without Python; the faster of the two when both qualify), by measured latency
(side by side with eager, beyond the noise), deployed size (`serialized_bytes`) and drift, against the context's
limits. The hard filters already removed an int8 row beyond `accuracy_tolerance.quantized` and a row over
`memory_budget_mb` or `latency_target_ms`; what is left is the trade-off:

- not `resource_constrained`: latency decides; the int8 export wins only when it runs faster beyond the noise,
  since otherwise it changes the model's numbers for nothing;
- `resource_constrained`: the smaller deployed model wins while it stays within the tolerated drift and the
  latency target; a smaller int8 export that runs slower says by how much.

On an NPU the export is `torchair.dynamo_export` of the float model: TorchAir has no quantization entry point, so
the int8 path there is said, unmeasured. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from advisor.core import catalogue, quantized
from advisor.core.context import DeploymentContext
from advisor.core.decision.advice import speed_comparison
from advisor.core.decision.break_even import break_even_calls, format_calls
from advisor.core.decision.candidates import Option, beats
from advisor.core.decision.footprint import MIB

INT8_EXPORT_LABEL = catalogue.option_label("onnxruntime", catalogue.ORT_INT8_MODE)
# the int8 exports: offline artifacts a runtime runs without Python (model.int8.onnx; OpenVINO's int8 IR)
INT8_EXPORT_LABELS = tuple(catalogue.option_label(backend, mode) for backend, mode in catalogue.EXPORTED_INT8)
RULE = "edge_quantization"
QUESTION = "Ship the export quantized (int8) or in float?"
NPU_INT8_PATH = (
    "TorchAir has no quantization entry point (CompilerConfig has no quantization option; dump_config."
    "quant_dumpable only dumps): an int8 graph for torchair.dynamo_export -> atc is a model that already calls "
    "torch_npu's quantized ops (npu_weight_quant_batchmatmul and npu_dynamic_quant have GE converters, "
    "npu_quant_matmul, npu_quantize and npu_anti_quant partial ones), produced outside TorchAir (Ascend's AMCT)"
)


@dataclass
class EdgeChoice:
    """The export to ship, the rule step that chose it, and what the report says about the other one."""

    chosen: Option
    steps: list[dict[str, Any]]
    why_not: dict[str, str] = field(default_factory=dict)
    break_even: dict[str, Any] | None = None
    caveats: list[dict[str, str]] = field(default_factory=list)


def int8_export(options: list[Option], excluded: Mapping[str, str]) -> Option | None:
    """The qualified, measured int8 export (`onnxruntime:int8` or `openvino:int8`; the faster when both), or None."""
    qualified = [o for o in options if o.label in INT8_EXPORT_LABELS and o.row is not None and o.label not in excluded]
    return min(qualified, key=lambda o: o.latency_ms if o.latency_ms is not None else float("inf"), default=None)


def int8_tried(options: list[Option], excluded: Mapping[str, str]) -> dict[str, str]:
    """Each int8 export the run has a row for, and what became of it: "measured", or why it is out (not available
    here, failed its drift check, ...) - what an edge analysis, which measures them unasked, reports."""
    tried = {}
    for option in options:
        if option.label in INT8_EXPORT_LABELS and option.row is not None:
            tried[option.label] = f"out: {excluded[option.label]}" if option.label in excluded else "measured"
    return tried


def _int8_twins(options: list[Option], excluded: Mapping[str, str]) -> dict[str, str]:
    """Why not the other qualified int8 export when two are measured: the faster one is weighed."""
    chosen = int8_export(options, excluded)
    if chosen is None:
        return {}
    return {
        o.label: f"not weighed: {_twin_reason(o, chosen)}"
        for o in options
        if o.label in INT8_EXPORT_LABELS
        and o is not chosen
        and o.row is not None
        and o.label not in excluded
        and o.latency_ms
        and chosen.latency_ms
    }


def _twin_reason(other: Option, chosen: Option) -> str:
    """Why the int8 export `chosen` is weighed and not `other`: it runs faster beyond the noise, or - within the
    noise - it is the better estimate (said so, with the interval)."""
    speed = speed_comparison(other, chosen)
    if beats(chosen, other):
        return f"the int8 export {chosen.label} runs faster ({speed})"
    return (
        f"the int8 exports run equally fast within the noise ({speed}); {chosen.label} has the better estimate, so it "
        "is the one weighed"
    )


def weigh_quantization(
    context: DeploymentContext, export: Option, options: list[Option], excluded: Mapping[str, str]
) -> EdgeChoice:
    """Float or int8 export, once the export path is chosen (`export` is the float export, or the int8 one when the
    float one is out)."""
    if context.target == "npu":
        return _npu(context, export)
    int8 = int8_export(options, excluded) or next((o for o in options if o.label == INT8_EXPORT_LABEL), None)
    float_ = next((o for o in options if o.backend == "onnxruntime" and o.mode == "default"), None)
    choice = _weigh(context, export, float_, int8, excluded)
    tried = int8_tried(options, excluded)
    for step in choice.steps:
        step["evidence"]["int8_exports_tried"] = tried
        said = step["outcome"]
        unsaid = {
            label: what
            for label, what in tried.items()
            if label not in said and not (label in excluded and excluded[label] in said)
        }
        if unsaid:  # the int8 exports tried that the outcome does not already name
            step["outcome"] += " Int8 exports also tried: " + "; ".join(f"{k} ({v})" for k, v in unsaid.items()) + "."
    choice.why_not = {
        **_int8_twins(options, excluded),
        **choice.why_not,
    }
    return choice


def _weigh(
    context: DeploymentContext, export: Option, float_: Option | None, int8: Option | None, excluded: Mapping[str, str]
) -> EdgeChoice:
    evidence = _evidence(context, float_, int8, excluded)
    if int8 is None or int8.row is None:
        outcome = (
            f"The int8 export was not measured: {export.label} ships in float. An edge analysis measures the int8 "
            f"exports ({', '.join(INT8_EXPORT_LABELS)}) of the backends it measures; Measure {INT8_EXPORT_LABEL} too "
            "(`-b onnxruntime:int8`) to weigh what int8 buys in latency and size against its drift."
        )
        return EdgeChoice(export, [_step(evidence, outcome)])
    if int8.label in excluded:
        outcome = f"The int8 export is out ({excluded[int8.label]}): ship the float export {export.label}."
        return EdgeChoice(export, [_step(evidence, outcome)])
    if export is int8 or float_ is None or float_.label in excluded:
        why = f"the float export is out ({excluded[float_.label]})" if float_ is not None else "no float export row"
        drift = _drift(int8, context)
        outcome = f"Ship the int8 export {int8.label}: {why}, and it stays within the tolerated drift ({drift})."
        return EdgeChoice(int8, [_step(evidence, outcome)])
    return _both_qualify(context, float_, int8, evidence)


def _both_qualify(context: DeploymentContext, float_: Option, int8: Option, evidence: dict[str, Any]) -> EdgeChoice:
    faster = int8 if beats(int8, float_) else float_ if beats(float_, int8) else None
    speed = speed_comparison(float_, int8) if float_.latency_ms and int8.latency_ms else "latency not comparable"
    smaller = _smaller(float_, int8)
    sizes = _sizes_phrase(float_, int8)
    drift = _drift(int8, context)
    if context.resource_constrained and smaller is int8:
        chosen = int8
        how = (
            "it also runs faster beyond the noise"
            if faster is int8
            else "their latencies are within the noise"
            if faster is None
            else f"it runs slower ({speed}) but within the context's limits"
        )
        reason = f"resource_constrained: the smaller deployed model wins ({sizes}); {how}; drift {drift}"
    elif faster is int8:
        chosen = int8
        reason = f"it runs faster beyond the noise ({speed}); {sizes}; drift {drift}"
    else:
        chosen = float_
        if faster is float_:
            lead = f"the float export runs faster beyond the noise ({speed})"
        else:
            lead = f"the int8 export runs no faster beyond the noise ({speed})"
        if context.resource_constrained:
            lead += f", and is not the smaller one ({sizes})"
        else:
            lead += f"; {sizes}; not resource_constrained, so size alone does not buy the drift ({drift})"
        reason = f"{lead}, and the float export keeps the model's numbers"
    other = float_ if chosen is int8 else int8
    outcome = f"Ship {'the int8' if chosen is int8 else 'the float'} export {chosen.label}: {reason}."
    kind = "int8" if chosen is int8 else "float"
    why_not = {other.label: f"not shipped: the {kind} export {chosen.label} wins, {reason}"}
    steps = [_step(evidence, outcome)]
    return EdgeChoice(chosen, steps, why_not, _break_even(float_, int8, context))


def _npu(context: DeploymentContext, export: Option) -> EdgeChoice:
    outcome = (
        f"Ship the float export ({export.label}): {NPU_INT8_PATH}. No int8 option is measured on the NPU here, so "
        "what int8 would buy in latency and size there is unknown."
    )
    evidence = {"target": "npu", "int8_export": "not offered by TorchAir's API; unmeasured"}
    caveats = []
    if context.resource_constrained or context.memory_budget_mb is not None:
        caveats.append(
            {
                "issue": "int8 on the NPU is unmeasured: TorchAir has no quantization API, so the size and speed int8 "
                "would save on this constrained device are unknown.",
                "fix": "Quantize the model with Ascend's AMCT (its torch_npu quantized ops, e.g. "
                "npu_weight_quant_batchmatmul), export it, and analyse that model on an NPU worker.",
            }
        )
    return EdgeChoice(export, [_step(evidence, outcome)], caveats=caveats)


def _step(evidence: dict[str, Any], outcome: str) -> dict[str, Any]:
    return {"rule": RULE, "question": QUESTION, "evidence": evidence, "outcome": outcome}


def _smaller(float_: Option, int8: Option) -> Option | None:
    """The option with the smaller deployed model (`serialized_bytes`), or None when either is unknown or equal."""
    a, b = _bytes(float_), _bytes(int8)
    if a is None or b is None or a == b:
        return None
    return float_ if a < b else int8


def _bytes(option: Option) -> int | None:
    value = (option.row or {}).get("serialized_bytes")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _mib(value: int | None) -> str:
    return "unknown" if value is None else f"{value / MIB:.4g} MiB"


def _sizes_phrase(float_: Option, int8: Option) -> str:
    a, b = _bytes(float_), _bytes(int8)
    ratio = f", {b / a:.2f}x" if a and b else ""
    return f"deployed size {_mib(b)} int8 vs {_mib(a)} float{ratio}"


def _drift(int8: Option, context: DeploymentContext) -> str:
    """The int8 row's drift against the context's limits, e.g. "cosine 0.9950 >= min_cosine 0.99, ..."."""
    drift = ((int8.row or {}).get("accuracy") or {}).get("quantized") or {}
    tolerance = context.accuracy_tolerance.model_dump() if context.accuracy_tolerance else None
    min_cosine, min_top1 = quantized.limits(tolerance)
    cosine, top1 = drift.get("cosine"), drift.get("top1_agreement")
    parts = [f"cosine {cosine:.4f} >= min_cosine {min_cosine:g}" if isinstance(cosine, int | float) else "cosine ?"]
    if isinstance(top1, int | float):
        parts.append(f"top-1 agreement {top1:.0%} of {drift.get('top1_rows') or 0} rows >= {min_top1:g}")
    if isinstance(drift.get("max_abs_err"), int | float):
        parts.append(f"max abs error {drift['max_abs_err']:.3g}")
    return ", ".join(parts)


def _evidence(
    context: DeploymentContext, float_: Option | None, int8: Option | None, excluded: Mapping[str, str]
) -> dict[str, Any]:
    def facts(option: Option | None) -> dict[str, Any] | None:
        if option is None:
            return None
        row = option.row or {}
        return {
            "label": option.label,
            "measured": option.row is not None,
            "excluded": excluded.get(option.label),
            "latency_ms": option.latency_ms,
            "speedup_vs_eager": option.speedup,
            "serialized_bytes": _bytes(option),
            "peak_memory_mb": option.peak_memory_mb,
            "drift": (row.get("accuracy") or {}).get("quantized"),
        }

    return {
        "resource_constrained": context.resource_constrained,
        "memory_budget_mb": context.memory_budget_mb,
        "latency_target_ms": context.latency_target_ms,
        "float_export": facts(float_),
        "int8_export": facts(int8),
    }


def _break_even(float_: Option, int8: Option, context: DeploymentContext) -> dict[str, Any] | None:
    """Calls after which the quantization step (longer export) is paid back by faster calls; None without numbers."""
    a_s, b_s = float_.compile_s(context.ships_compile_cache), int8.compile_s(context.ships_compile_cache)
    a_ms, b_ms = float_.latency_ms, int8.latency_ms
    if a_s is None or b_s is None or a_ms is None or b_ms is None:
        return None
    return {
        "fast_compile": float_.label,
        "fast_run": int8.label,
        "compile_a_s": a_s,
        "compile_b_s": b_s,
        "latency_a_ms": a_ms,
        "latency_b_ms": b_ms,
        "latency_basis": "side_by_side" if float_.side_by_side and int8.side_by_side else "raw",
        "compile_kind": "warm" if context.ships_compile_cache else "cold",
        "n_star": break_even_calls(a_s, a_ms, b_s, b_ms),
        "expected": context.expected_calls_per_compile,
        "unit": context.call_unit,
        "decided": False,  # the edge choice weighs latency, size and drift; this says when quantizing pays back
    }


def break_even_phrase(be: Mapping[str, Any] | None) -> str:
    """ "the quantization step pays back after N calls" for the summary, or ""."""
    if not be:
        return ""
    return f"{be['fast_run']}'s quantization step pays back after {format_calls(be['n_star'])} {be['unit']}."
