"""A generation workload in the child: a causal LM with a static KV cache, prefill and decode timed separately.

The archive (advisor.harness.loading.GENERATION_FORMAT) holds a `decode` program and optionally a `prefill` one,
as `transformers`' TorchExportableModuleForDecoderOnlyLM exports them: both take `(input_ids [1, T],
cache_position [T])` and return logits `[1, T, vocab]`, and keep the KV cache in mutable buffers of the same
names. The cache is carried from prefill to decode by copying those buffers, then from step to step by the decode
program itself. A one-program archive is a decode program alone: generation starts from its example token.

Per option: the prefill (time to first token) and one decode step at the position after the prompt (time per
output token) are each timed side by side with eager; each phase's compile is its first call minus its steady
median; the option's greedy tokens over `decode_tokens` steps are compared with eager's (the accuracy check).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from advisor.core.noise import read_load
from advisor.harness import devices
from advisor.harness.measurement.child_variant import Variant
from advisor.harness.measurement.compiling import compile_variant
from advisor.harness.measurement.dynamic import graph_stats, reset_dynamo_counters
from advisor.harness.measurement.errors import stage_error
from advisor.harness.measurement.profiler_pass import profiled_breakdown
from advisor.harness.measurement.timing import TimingPolicy, summaries, time_side_by_side


class Program:
    """One program of the archive, as a fresh module (own cache buffers) and how it is called."""

    def __init__(self, exported: Any) -> None:
        self.module = copy.deepcopy(exported.module())
        args, kwargs = exported.example_inputs or ((), {})
        self.keyword = "input_ids" in (kwargs or {})
        self.example_ids, self.example_positions = (
            (kwargs["input_ids"], kwargs["cache_position"]) if self.keyword else args[:2]
        )
        self.fn: Callable[..., Any] = self.module

    def __call__(self, ids: Any, positions: Any) -> Any:
        return self.fn(input_ids=ids, cache_position=positions) if self.keyword else self.fn(ids, positions)

    def cache_length(self) -> int | None:
        lengths = [b.shape[-2] for name, b in self.module.named_buffers() if "cache" in name and b.dim() >= 3]
        return min(lengths) if lengths else None


def measure_generation(v: Variant, *, reference_path: str, decode_tokens: int) -> dict:
    """The variant's greedy generation: prefill and decode timed side by side with eager, tokens checked."""
    programs = v.loaded.programs or {"decode": v.loaded.exported_program}
    if "decode" not in programs:
        raise stage_error(ValueError("the archive has no decode program"), "loading the generation programs")
    compile_s = [0.0]
    eager = _programs(programs, v.dev)
    mine = eager if v.is_baseline else _programs(programs, v.dev)
    prompt = v.dev.to_device(_prompt(eager))
    steps = _steps(eager, prompt, decode_tokens)
    v.dev.reset_peak_memory()
    if not v.is_baseline:
        v.progress("compiling")
        _compile_programs(mine, v.backend, v.request, v.dev, compile_s)
    reset_dynamo_counters()
    v.progress("generating")
    tokens, first, _ = _greedy(mine, prompt, steps, v.dev)
    result: dict[str, Any] = {**graph_stats()}
    expected = _reference_tokens(tokens, v.is_baseline, reference_path)
    mismatch = _first_mismatch(tokens, expected)
    v.progress("timing")
    load_start = read_load()  # was the node shared while the phases were timed (advisor.core.noise.shared_reasons)
    phases, decode_step = _timed_phases(mine, eager, prompt, tokens[0], first, v.dev, v.timing, v.is_baseline)
    result["timing_load"] = {"start": load_start, "end": read_load()}
    generate_s, step_s, eager_steps = None, [], []
    if not v.warm_run:  # the warm-cache child is for the warm compile: one timed window per phase is enough there
        generate_s, step_s, eager_steps = _timed_generation(mine, eager, prompt, steps, v.dev, v.is_baseline)
    decode = phases["decode"]
    result.update(
        {key: decode[key] for key in ("latency", "eager_latency", "speedup_vs_eager", "speedup_ci")},
        timed_s=sum(p.pop("timed_s") for p in phases.values()),
        first_call_s=compile_s[0] + sum(p["compile_s"] for p in phases.values()) + decode["latency"]["median_ms"] / 1e3,
        throughput={"tokens_per_s": 1e3 / decode["latency"]["median_ms"], "samples_per_s": None},
        generation={
            "prompt_tokens": int(prompt["ids"].shape[-1]) if eager["prefill"] is not None else 0,
            "decode_tokens": len(tokens),
            "prefill": phases.get("prefill"),
            "decode": decode,
            "tokens_per_s": 1e3 / decode["latency"]["median_ms"],
            "generate_s": generate_s,
            "decode_steps": _step_stats(step_s),
            "eager_decode_steps": _step_stats(eager_steps),
            "tokens_match": mismatch is None,
            "first_mismatch": mismatch,
        },
        accuracy=_accuracy(mismatch, tokens, expected),
    )
    result["peak_memory_mb"], result["memory_kind"] = v.dev.peak_memory_mb()
    if v.timing.profile and not v.warm_run:
        v.progress("profiling")
        result["time_breakdown"] = profiled_breakdown(decode_step, (), v.dev, decode["latency"]["median_ms"])
    return result


def _programs(programs: dict[str, Any], dev: devices.Device) -> dict[str, Program | None]:
    """A fresh prefill (None when the archive has none) and decode program on the device."""

    def build(name: str) -> Program | None:
        if name not in programs:
            return None
        program = Program(programs[name])
        program.module = dev.to_device(program.module)
        return program

    return {"prefill": build("prefill"), "decode": build("decode")}


def _compile_programs(
    mine: dict[str, Program | None], backend: Any, request: Any, dev: devices.Device, compile_s: list[float]
) -> None:
    for program in mine.values():
        if program is not None:
            example = dev.to_device((program.example_ids, program.example_positions))
            program.fn = compile_variant(backend, program.module, example, request, compile_s)


def _reference_tokens(tokens: list, is_baseline: bool, reference_path: str) -> list:
    """Eager's greedy tokens: the baseline writes its own, every other option reads them."""
    import torch

    if is_baseline:
        torch.save({"tokens": tokens}, reference_path)
        return tokens
    return torch.load(reference_path, weights_only=True)["tokens"]


def _first_mismatch(tokens: list, expected: list) -> int | None:
    """The first step whose token differs from eager's (a shorter run differs where it ends); None when all match."""
    mismatch = next((i for i, (a, b) in enumerate(zip(tokens, expected, strict=False)) if a != b), None)
    if mismatch is None and len(tokens) != len(expected):
        mismatch = min(len(tokens), len(expected))
    return mismatch


def _timed_phases(
    mine: dict[str, Program | None],
    eager: dict[str, Program | None],
    prompt: dict,
    first_token: Any,
    first: dict,
    dev: devices.Device,
    timing: TimingPolicy,
    is_baseline: bool,
) -> tuple[dict[str, dict], Callable[[], Any]]:
    """The prefill (when there is one) and one decode step after the prompt, each timed side by side with eager;
    and that decode step as a callable (the profiler's)."""
    import torch

    phases = {}
    positions = prompt["positions"]
    if eager["prefill"] is not None:
        phases["prefill"] = _phase(mine["prefill"], eager["prefill"], prompt, positions, dev, timing, is_baseline)
        phases["prefill"]["compile_s"] = _compile_s(first["prefill"], phases["prefill"], is_baseline)
    token = dev.to_device(torch.tensor([[first_token]], dtype=prompt["ids"].dtype))
    at = dev.to_device(torch.tensor([prompt["next_position"]], dtype=positions.dtype))
    phases["decode"] = _phase(mine["decode"], eager["decode"], {"ids": token}, at, dev, timing, is_baseline)
    phases["decode"]["compile_s"] = _compile_s(first["decode"], phases["decode"], is_baseline)
    decode_step = mine["decode"]
    return phases, lambda: decode_step(token, at)


def _timed_generation(
    mine: dict[str, Program | None],
    eager: dict[str, Program | None],
    prompt: dict,
    steps: int,
    dev: devices.Device,
    is_baseline: bool,
) -> tuple[float, list[float], list[float]]:
    """The whole greedy generation's seconds, its decode steps' seconds, and eager's steps (the baseline's own)."""
    generate_s, (_, _, step_s) = dev.timer()(lambda: _greedy(mine, prompt, steps, dev))
    eager_steps = step_s if is_baseline else _greedy(eager, prompt, steps, dev)[2]
    return generate_s, step_s, eager_steps


def _step_stats(step_s: list[float]) -> dict | None:
    """Time per output token over the greedy loop's decode steps (positions growing, the cache carried)."""
    from advisor.core.stats import summarize

    return summarize(step_s) if len(step_s) >= 2 else None


def _prompt(eager: dict[str, Program | None]) -> dict:
    """The prompt (the prefill program's example input_ids) or, decode-only, the decode program's example token."""
    source = eager["prefill"] or eager["decode"]
    assert source is not None
    ids, positions = source.example_ids, source.example_positions
    return {"ids": ids, "positions": positions, "next_position": int(positions[-1]) + 1}


def _steps(eager: dict[str, Program | None], prompt: dict, wanted: int) -> int:
    """Tokens to generate that fit the static cache after the prompt (the first comes from the prompt itself)."""
    room = eager["decode"].cache_length() if eager["decode"] is not None else None
    if room is None:
        return wanted
    if prompt["next_position"] >= room:
        raise stage_error(
            ValueError(f"the prompt ({prompt['next_position']} positions) fills the static cache ({room})"),
            "planning the decode steps",
        )
    return max(1, min(wanted, room - prompt["next_position"] + 1))


def _greedy(
    programs: dict[str, Program | None], prompt: dict, steps: int, dev: devices.Device
) -> tuple[list, dict, list[float]]:
    """Greedy tokens (the first one from the prompt, then `steps - 1` decode steps), each phase's first call, and
    the seconds of every decode step after the first (each at its own position, the cache carried)."""
    import torch

    timer = dev.timer()
    prefill, decode = programs["prefill"], programs["decode"]
    assert decode is not None
    first: dict[str, float] = {}
    step_s: list[float] = []
    try:
        with torch.no_grad():
            if prefill is not None:
                first["prefill"], logits = timer(lambda: prefill(prompt["ids"], prompt["positions"]))
                _carry_cache(prefill.module, decode.module)
            else:
                first["decode"], logits = timer(lambda: decode(prompt["ids"], prompt["positions"]))
            token = logits[:, -1].argmax(-1, keepdim=True)
            tokens = [int(token)]
            position = prompt["next_position"]
            for _ in range(steps - 1):
                at = torch.tensor([position], dtype=prompt["positions"].dtype, device=token.device)
                seconds, logits = timer(lambda at=at, token=token: decode(token, at))
                if "decode" in first:
                    step_s.append(seconds)
                first.setdefault("decode", seconds)
                token = logits[:, -1].argmax(-1, keepdim=True)
                tokens.append(int(token))
                position += 1
    except Exception as exc:
        raise stage_error(exc, "generation (prefill, then decode steps carrying the cache)") from exc
    return tokens, first, step_s


def _carry_cache(source: Any, target: Any) -> None:
    """The KV cache the prefill wrote, into the decode program's buffers of the same name and shape."""
    buffers = dict(target.named_buffers())
    for name, buffer in source.named_buffers():
        if name in buffers and buffers[name].shape == buffer.shape:
            buffers[name].copy_(buffer)


def _phase(
    program: Program | None,
    eager: Program | None,
    inputs: dict,
    positions: Any,
    dev: devices.Device,
    timing: TimingPolicy,
    is_baseline: bool,
) -> dict:
    import torch

    assert program is not None and eager is not None
    fns = {"backend": lambda: program(inputs["ids"], positions)}
    if not is_baseline:
        fns["eager"] = lambda: eager(inputs["ids"], positions)
    with torch.no_grad():
        window = time_side_by_side(fns, (), dev, timing, lambda n: None)
    return {**summaries(window, is_baseline), "timed_s": window.seconds}


def _compile_s(first_call_s: float | None, phase: dict, is_baseline: bool) -> float:
    if is_baseline or first_call_s is None:
        return 0.0
    return max(0.0, first_call_s - phase["latency"]["median_ms"] / 1e3)


def _accuracy(mismatch: int | None, tokens: list, expected: list) -> dict:
    if mismatch is None:
        return {"passed": True, "reason": f"the {len(tokens)} greedy tokens equal eager's"}
    mine = tokens[mismatch] if mismatch < len(tokens) else "-"
    theirs = expected[mismatch] if mismatch < len(expected) else "-"
    return {"passed": False, "reason": f"greedy token {mismatch} differs from eager's ({mine} vs {theirs})"}
