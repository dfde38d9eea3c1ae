"""The decision engine's answer (from advisor.core.decision.engine.decide).

Trusted output, never posted by a worker: no bounds, and infinity is kept (a break-even never reached is
`n_star` = inf until app.outcomes stores it as null).
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from advisor.core.results._base import Open


class _Decided(Open):
    model_config = ConfigDict(allow_inf_nan=True)


class RuleStep(_Decided):
    rule: str | None = None  # e.g. "prototype_prefers_fast_compile"
    question: str | None = None
    evidence: dict[str, Any] | None = None
    outcome: str | None = None


class Caveat(_Decided):
    issue: str | None = None
    fix: str | None = None


class BreakEven(_Decided):
    """After how many calls per compile the faster-running option pays off its longer compile."""

    fast_compile: str | None = None  # option labels, "backend:mode"
    fast_run: str | None = None
    compile_a_s: float | None = None
    compile_b_s: float | None = None
    latency_a_ms: float | None = None
    latency_b_ms: float | None = None
    latency_basis: str | dict[str, str] | None = None  # "side_by_side": eager's median over each speedup
    compile_kind: str | None = None  # cold | warm
    n_star: float | None = None  # None or inf: never
    expected: int | float | None = None  # the context's expected calls per compile
    unit: str | None = None  # calls | steps | ...
    decided: bool | None = None  # the break-even, not the objective, picked the option


class LayeredPart(_Decided):
    backend: str | None = None
    mode: str | None = None
    devices: list[str] | None = None
    why: str | None = None


class Recommendation(_Decided):
    backend: str | None = None  # None = no backend qualifies
    mode: str | None = None
    confidence: str | None = None  # high | medium | low
    measured: bool | None = None  # False = from the tree and coverage alone ("unmeasured")
    tie: bool | None = None
    layered: dict[str, LayeredPart] | None = None  # {"development": ..., "production": ...} for mixed fleets
    summary: str | None = None
    path: list[RuleStep] | None = None
    why_not: dict[str, str] | None = None
    break_even: BreakEven | None = None
    caveats: list[Caveat] | None = None
    snippet: str | None = None
    shape_plan: dict[str, Any] | None = None  # advisor.core.decision.shape_rules: a plan for the context's traffic
    engine_version: str | None = None
