"""A shape plan in words and as the config to paste for each target's graph mode (advisor.core.decision.shape_rules
makes the plan). Only real API names: torch.compile / torch._dynamo.mark_dynamic, TorchAir's
`torchair.inference.set_dim_gears` with `inference_config.dynamic_gears_merge_policy`, npugraph_ex's
`capture_limit` (checked against ../shared/reference/torchair.md). Torch-free."""

from __future__ import annotations

from typing import Any

GEARS_MIN, GEARS_MAX = 2, 100  # set_dim_gears: each dim takes 2..100 gears
NOT_ON_NPU = "# Not measured on an NPU: the plan's timings come from this analysis' device."


def plan_lines(plan: dict[str, Any] | None) -> list[str]:
    """The plan and each alternative, one line each, then the reasons."""
    if not plan:
        return []
    lines = [_line(plan, chosen=True)]
    lines += [_line(option, chosen=False) for option in plan.get("alternatives") or []]
    lines += [f"why: {reason}" for reason in plan.get("reasons") or []]
    if plan.get("interpolated"):
        lines.append(f"interpolated (not timed) at sizes {plan['interpolated']}")
    if plan.get("memory_mb") is not None:
        lines.append(MEMORY_NOTE[plan.get("memory_kind") == "rss"])
    return lines + _swept_lines(plan)


def _swept_lines(plan: dict[str, Any]) -> list[str]:
    """Which options were timed at the plan's sizes, and why the others were not (shape_rules.swept_at_plan_sizes)."""
    lines = [f"timed at the plan's sizes: {', '.join(plan['swept'])}"] if plan.get("swept") else []
    others = plan.get("not_swept") or {}
    if others.get("options"):
        lines.append(f"not timed at the plan's sizes: {', '.join(others['options'])} ({others.get('why')})")
    return lines


MEMORY_NOTE = {
    False: "memory: the most one graph's first call (its compile and the call) took on the device above what was "
    "resident; what each graph keeps after (a CUDA-graph pool per capture) is not counted",
    True: "memory: host memory (the process's RSS high-water mark) the most one graph's first call (its compile and "
    "the call) took above what was resident; what each graph keeps after is not counted",
}


def _line(option: dict[str, Any], *, chosen: bool) -> str:
    sizes = _sizes(option)
    where = f" at {sizes}" if sizes and option["kind"] != "dynamic" else ""
    budget = "" if option.get("within_budget", True) else ", over the budget"
    return (
        f"{'chosen' if chosen else 'alternative'}: {option.get('option', '?')} {option['kind']}{where}: "
        f"{option['expected_latency_ms']:.3f} ms per call (spread {option['latency_spread_ms']:.3f}, worst "
        f"{option['worst_latency_ms']:.3f}), {option['graphs']} graph(s){budget}, {option['compile_s']:.1f} s "
        f"compile, {option['padding_waste']:.0%} padding{_memory(option)}"
    )


def _memory(option: dict[str, Any]) -> str:
    """The plan's memory (advisor.core.shape_plan.plan_memory_mb): the most one graph needed above what was resident."""
    memory = option.get("memory_mb")
    return "" if memory is None else f", {memory:.1f} MB peak per graph"


def _sizes(option: dict[str, Any]) -> list[int]:
    for dims in (option.get("buckets") or {}).values():
        for sizes in dims.values():
            return list(sizes)
    return []


def plan_config(plan: dict[str, Any], target: str) -> str:
    """The code that serves the plan on `target` (npu: TorchAir GE gears and npugraph_ex; cpu/cuda: Inductor)."""
    axis = [(a["input"], int(a["dim"])) for a in plan.get("axis") or []]
    sizes = _sizes(plan)
    if target == "npu":
        return _npu_config(plan["kind"], axis, sizes, plan["graphs"])
    return _inductor_config(plan["kind"], axis, sizes, cuda=target == "cuda")


PAD_HELPER = '''import torch.nn.functional as F

BUCKETS = {sizes}


def pad_to_bucket(t: torch.Tensor, dim: int, value: float = 0) -> torch.Tensor:
    """Pad `t` along `dim` up to the smallest bucket that holds it (pad attention masks with 0 and slice the
    outputs back to the real length)."""
    bucket = next(b for b in BUCKETS if b >= t.shape[dim])
    return F.pad(t, [0, 0] * (t.dim() - dim - 1) + [0, bucket - t.shape[dim]], value=value)
'''


def _pad_calls(axis: list[tuple[str, int]]) -> str:
    return "\n".join(f"# {name} = pad_to_bucket({_var(name)}, {dim})" for name, dim in axis)


def _var(name: str) -> str:
    return name.replace(".", "_")


def _inductor_config(kind: str, axis: list[tuple[str, int]], sizes: list[int], *, cuda: bool) -> str:
    lines = ["import torch", ""]
    if kind == "dynamic":
        lines += [f"torch._dynamo.mark_dynamic({_var(name)}, {dim})  # before the first call" for name, dim in axis]
        lines.append("compiled = torch.compile(model, dynamic=True)")
        return "\n".join(lines) + "\n"
    lines.append(PAD_HELPER.format(sizes=sizes))
    lines.append(_pad_calls(axis))
    mode = ', mode="reduce-overhead"' if cuda else ""
    lines.append(f"compiled = torch.compile(model, dynamic=False{mode})  # one graph per bucket")
    lines.append(f"torch._dynamo.config.recompile_limit = max(8, {len(sizes)})  # one compile per bucket")
    if cuda:
        lines.append("# reduce-overhead: one CUDA graph capture per bucket; call each bucket once at start-up")
    return "\n".join(lines) + "\n"


def _npu_config(kind: str, axis: list[tuple[str, int]], sizes: list[int], graphs: int) -> str:
    lines = [NOT_ON_NPU, "import torch", "import torch_npu", "import torchair", ""]
    config = ["config = torchair.CompilerConfig()"]
    if kind == "dynamic":
        lines += config + [f"torch._dynamo.mark_dynamic({_var(name)}, {dim})" for name, dim in axis]
        lines.append(
            "compiled = torch.compile(model, backend=torchair.get_npu_backend(compiler_config=config), dynamic=True)"
        )
        return "\n".join(lines) + "\n"
    lines.append("# TorchAir GE graph: one static sub-graph per gear")
    if GEARS_MIN <= len(sizes) <= GEARS_MAX:
        lines += config
        lines.append('config.inference_config.dynamic_gears_merge_policy = "zip"  # the inputs vary together')
        lines += [f"torchair.inference.set_dim_gears({_var(name)}, dim_gears={{{dim}: {sizes}}})" for name, dim in axis]
        lines.append(
            "compiled = torch.compile(model, backend=torchair.get_npu_backend(compiler_config=config), dynamic=True)"
        )
    else:
        lines.append(f"# set_dim_gears takes {GEARS_MIN} to {GEARS_MAX} gears per dim; this plan has {len(sizes)}")
    lines += ["", "# or npugraph_ex (ACL graph capture/replay): pad each call to its bucket, one capture per bucket"]
    lines.append(PAD_HELPER.format(sizes=sizes))
    lines.append(_pad_calls(axis))
    lines.append(
        f'captured = torch.compile(model, backend="npugraph_ex", options={{"capture_limit": {max(graphs, 1)}}})'
    )
    return "\n".join(lines) + "\n"
