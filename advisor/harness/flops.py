"""Forward FLOPs of a model for its example inputs, counted by `FlopCounterMode` on fake tensors.

Fake tensors carry only shapes and dtypes, so nothing is computed and models whose ops are stubbed here
(no real kernel) are still counted. CPU SDPA has no FLOP formula in torch; one is registered on first use.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map

_sdpa_formula_registered = False


def count_flops(module: Any, args: tuple, kwargs: dict | None = None, *, allow_real_run: bool = False) -> int | None:
    """Total forward FLOPs, or None when neither a fake-tensor nor (if allowed) a real run works."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    _register_cpu_sdpa_formula()
    kwargs = kwargs or {}
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as fake_mode:
            fake_args, fake_kwargs = tree_map(lambda x: _to_fake(fake_mode, x), (args, kwargs))
            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                module(*fake_args, **fake_kwargs)
        return int(counter.get_total_flops())
    except Exception:  # noqa: BLE001 - fake tracing fails for some ops; fall back to a real run below
        if not allow_real_run:
            return None
    try:
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            module(*args, **kwargs)
        return int(counter.get_total_flops())
    except Exception:  # noqa: BLE001
        return None


def _to_fake(fake_mode: Any, value: Any) -> Any:
    return fake_mode.from_tensor(value) if isinstance(value, torch.Tensor) else value


def _register_cpu_sdpa_formula() -> None:
    global _sdpa_formula_registered
    if _sdpa_formula_registered:
        return
    from torch.utils.flop_counter import register_flop_formula, sdpa_flop_count

    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    try:

        @register_flop_formula(op)
        def _cpu_sdpa_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
            return sdpa_flop_count(query, key, value)  # shapes: the registry passes tensor shapes

    except Exception:  # noqa: BLE001 - already registered (e.g. a newer torch ships its own formula)
        pass
    _sdpa_formula_registered = True
