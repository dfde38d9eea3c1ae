"""A generation workload's two phases, per option (advisor.harness.measurement.generation), as stored."""

from __future__ import annotations

from pydantic import Field

from advisor.core.results._base import Count, Open
from advisor.core.results.latency import LatencyStats


class Phase(Open):
    """One phase timed side by side with eager: prefill (the prompt: time to first token) or one decode step
    (time per output token, at the position right after the prompt)."""

    latency: LatencyStats | None = None
    eager_latency: LatencyStats | None = None
    speedup_vs_eager: float | None = None
    speedup_ci: list[float] | None = Field(default=None, max_length=2)
    compile_s: float | None = None  # this phase's first call minus its steady median (0 for eager)


class Generation(Open):
    prompt_tokens: Count | None = None
    decode_tokens: Count | None = None  # generated greedily after the prompt
    prefill: Phase | None = None  # None: the archive has a decode program only
    decode: Phase | None = None
    tokens_per_s: float | None = None  # 1000 / the decode step's median
    generate_s: float | None = None  # the whole greedy loop (prefill + every decode step), once, after warm-up
    # time per output token over that loop's decode steps (positions growing, the cache carried), this option's and
    # eager's (run right after it in the same child; the side-by-side speedup is `decode`'s)
    decode_steps: LatencyStats | None = None
    eager_decode_steps: LatencyStats | None = None
    tokens_match: bool | None = None  # the option's greedy tokens equal eager's
    first_mismatch: Count | None = None  # index of the first generated token that differs
