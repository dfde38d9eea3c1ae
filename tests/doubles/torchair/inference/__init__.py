"""TEST DOUBLE — not torchair.inference. `set_dim_gears` and `cache_compile` with the real rules."""

import inspect
import json
import os

import torch

__all__ = ["cache_compile", "set_dim_gears", "readable_cache"]

_DIM_GEAR_CALLS = []
_CACHE_EVENTS = []


def dim_gear_calls():
    return list(_DIM_GEAR_CALLS)


def cache_events():
    """{"event": "miss" | "hit", "path": ...} per cache_compile'd function's first call."""
    return list(_CACHE_EVENTS)


def set_dim_gears(t, dim_gears):
    """Mark `t`'s dims dynamic with fixed gears; needs torch.compile(dynamic=True); once per tensor."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"set_dim_gears expects a torch.Tensor, got {type(t)}")
    if getattr(t, "dim_gears", None) is not None:
        raise ValueError("dim_gears has already been set for this tensor; it can be set only once")
    if not isinstance(dim_gears, dict):
        raise TypeError(f"dim_gears must be Dict[int, List[int] | Tuple[int, ...]], got {type(dim_gears)}")
    for dim, gears in dim_gears.items():
        if not isinstance(dim, int) or not 0 <= dim < t.dim():
            raise ValueError(f"dim {dim!r} is out of range for a tensor with {t.dim()} dims")
        if not isinstance(gears, (list, tuple)) or not all(isinstance(g, int) for g in gears):
            raise TypeError(f"gears of dim {dim} must be a list or tuple of int, got {gears!r}")
        if not 2 <= len(gears) <= 100:
            raise ValueError(f"dim {dim} must have 2 to 100 gears, got {len(gears)}")
        if 0 in gears:
            raise ValueError(f"gear 0 is not supported (dim {dim})")
    for dim in dim_gears:
        torch._dynamo.mark_dynamic(t, dim)
    t.dim_gears = dim_gears
    _DIM_GEAR_CALLS.append({"shape": list(t.shape), "dim_gears": {d: list(g) for d, g in dim_gears.items()}})


def cache_compile(
    func,
    *,
    config=None,
    dynamic=True,
    cache_dir=None,
    global_rank=None,
    tp_rank=None,
    pp_rank=None,
    backend=None,
    custom_decompositions=None,
    ge_cache=False,
    **kwargs,
):
    """Compile a bound nn.Module method; its first call writes (or finds) an entry under cache_dir."""
    from torchair._npu_backend import get_npu_backend
    from torchair.configs.compiler_config import CompilerConfig

    if not inspect.ismethod(func):
        raise ValueError(f"Only method can be cached now, got {func}")
    if not isinstance(func.__self__, torch.nn.Module):
        raise ValueError("Only torch.nn.Module method can be cached now")
    config = config if config is not None else CompilerConfig()
    if ge_cache and config.mode.value != "max-autotune":
        raise ValueError("ge_cache is supported only in max-autotune mode")
    entry_dir = os.path.join(
        cache_dir or ".torchair_cache", f"{type(func.__self__).__name__}_{func.__name__}", f"rank_{global_rank or 0}"
    )
    npu_backend = backend or get_npu_backend(compiler_config=config)
    compiled = torch.compile(func, backend=npu_backend, dynamic=dynamic)
    state = {"first": True}

    def cached(*args, **kw):
        if state["first"]:
            state["first"] = False
            marker = os.path.join(entry_dir, "compiled_module.json")
            hit = os.path.exists(marker)
            _CACHE_EVENTS.append({"event": "hit" if hit else "miss", "path": marker})
            result = compiled(*args, **kw)
            if not hit:
                os.makedirs(entry_dir, exist_ok=True)
                with open(marker, "w") as f:
                    json.dump(
                        {
                            "module": type(func.__self__).__name__,
                            "method": func.__name__,
                            "options": config.changed_options(),
                            "torch": torch.__version__,
                        },
                        f,
                    )
            return result
        return compiled(*args, **kw)

    return cached


def readable_cache(cache_bin, print_output=True, file=None):
    with open(cache_bin) as f:
        text = f.read()
    if print_output:
        print(text, file=file)
    return text
