"""Break-even between a fast-compiling option A and a fast-running option B.

Serving N calls costs `compile_s + N * latency`. B pays for its longer compile after
`N* = (compile_B - compile_A) / (latency_A - latency_B)` calls; below N* the fast compiler wins.
"""

from __future__ import annotations

import math


def break_even_calls(compile_a_s: float, latency_a_ms: float, compile_b_s: float, latency_b_ms: float) -> float | None:
    """N* in calls, 0.0 when B never loses (compiles no slower), None when B never catches up (runs no faster)."""
    extra_compile_ms = (compile_b_s - compile_a_s) * 1000.0
    saved_per_call_ms = latency_a_ms - latency_b_ms
    if extra_compile_ms <= 0:
        return 0.0
    if saved_per_call_ms <= 0:
        return None
    return extra_compile_ms / saved_per_call_ms


def total_cost_s(compile_s: float, latency_ms: float, calls: int) -> float:
    """Seconds spent compiling and then serving `calls` calls."""
    return compile_s + calls * latency_ms / 1000.0


def format_calls(n: float | None) -> str:
    """6071.4 -> "6,071"; None -> "never"."""
    if n is None or math.isinf(n):
        return "never"
    return f"{n:,.0f}"
