"""Generation workloads: prefill and decode may want different options (e.g. eager prefill + compiled decode).

The engine decides a generation workload on its rows' top-level numbers, which are the decode step's (time per
output token: a request spends most of its time decoding). This step then picks the prefill's option on the
prefill's own side-by-side speedup (time to first token) and, when the two differ, makes the recommendation
layered by phase. An option counts as faster for a phase only when its speedup's CI is above 1, and the
decode's option keeps the prefill too unless another one (eager included) is faster beyond the noise: their
intervals do not overlap.
"""

from __future__ import annotations

from typing import Any

from advisor.core.catalogue import EAGER_LABEL
from advisor.core.context import DeploymentContext
from advisor.core.decision.candidates import Option
from advisor.core.decision.rules import step


def phase_numbers(option: Option, phase: str) -> dict[str, Any]:
    generation = (option.row or {}).get("generation") or {}
    return generation.get(phase) or {}


def best_for_phase(qualified: list[Option], phase: str, prefer: Option | None = None) -> tuple[Option | None, float]:
    """The qualified option with the highest resolved speedup for `phase` (eager when none resolves above 1); or
    `prefer` (the decode's choice) when its interval for this phase overlaps the best one's: one option for both
    phases unless the other is faster beyond the noise."""
    best = next((o for o in qualified if o.label == EAGER_LABEL), None)
    speed = 1.0
    for option in qualified:
        numbers = phase_numbers(option, phase)
        ratio, interval = numbers.get("speedup_vs_eager"), numbers.get("speedup_ci") or [None, None]
        if option.label == EAGER_LABEL or ratio is None or interval[0] is None:
            continue
        if interval[0] > 1.0 and ratio > speed:
            best, speed = option, ratio
    if prefer is not None and best is not None and prefer.label != best.label:
        mine, theirs = _interval(prefer, phase), _interval(best, phase)
        if mine is not None and theirs is not None and mine[1] >= theirs[0]:
            return prefer, phase_numbers(prefer, phase).get("speedup_vs_eager") or 1.0
    return best, speed


def _interval(option: Option, phase: str) -> list[float] | None:
    if option.label == EAGER_LABEL:
        return [1.0, 1.0]
    interval = phase_numbers(option, phase).get("speedup_ci")
    return interval if interval and None not in interval else None


def rule_generation_phases(
    context: DeploymentContext, qualified: list[Option], chosen: Option | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The per-phase step, and the layered recommendation when prefill's option differs from decode's."""
    measured = [o for o in qualified if phase_numbers(o, "decode")]
    if context.workload != "generation" or chosen is None or not measured:
        return None, None
    prefill, prefill_speed = best_for_phase(measured, "prefill", prefer=chosen)
    decode_speed = phase_numbers(chosen, "decode").get("speedup_vs_eager")
    evidence = {
        "decode": {"option": chosen.label, "speedup_vs_eager": decode_speed},
        "prefill": {"option": prefill.label if prefill else None, "speedup_vs_eager": prefill_speed},
        "by_option": {
            o.label: {phase: phase_numbers(o, phase).get("speedup_vs_eager") for phase in ("prefill", "decode")}
            for o in measured
        },
    }
    question = "Do prefill (time to first token) and decode (time per output token) want the same option?"
    if prefill is None or not any(phase_numbers(o, "prefill") for o in measured):
        return step("generation_phases", question, evidence, "Only a decode program was measured."), None
    if prefill.label == chosen.label:
        outcome = f"Yes: {chosen.label} is the choice for both phases."
        return step("generation_phases", question, evidence, outcome), None
    outcome = (
        f"No: prefill with {prefill.label} ({prefill_speed:.2f}x vs eager for the prompt), decode with {chosen.label}"
        f" ({decode_speed:.2f}x per token)"
        if decode_speed
        else f"No: prefill with {prefill.label}, decode with {chosen.label}"
    )
    layered = {
        "prefill": _part(prefill, context, f"prefill (time to first token): {prefill_speed:.2f}x vs eager"),
        "decode": _part(chosen, context, "decode (time per output token): the option the recommendation is for"),
    }
    return step("generation_phases", question, evidence, outcome + "."), layered


def _part(option: Option, context: DeploymentContext, why: str) -> dict[str, Any]:
    return {"backend": option.backend, "mode": option.mode, "devices": [context.target], "why": why}
