"""Test models, built at test time (no downloads). Each returns (module in eval mode, example inputs).

The custom `npu::` ops here are registered with torch.library by the tests themselves; they are
stand-ins for torch_npu's ops (same namespace, same kind of schema), not the real kernels.
"""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


class GraphBreakModel(nn.Module):
    """Data-dependent Python control flow: Dynamo must break the graph at `.item()`."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        if y.sum().item() > 0:
            return self.b(y)
        return y


class PairwiseDistance(nn.Module):
    """A linear layer, `torch.cdist` (which Inductor runs as a fallback kernel: aten._cdist_forward has no
    lowering) and a relu + sum Inductor fuses into one generated kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.cdist(self.proj(x), x)).sum(-1)


class TinyBert(nn.Module):
    """A `transformers` BERT with a tiny random config; forward returns plain tensors."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import BertConfig, BertModel

        config = BertConfig(
            vocab_size=256,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
        self.bert = BertModel(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def mlp() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(4, 64),)


def cnn() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return SmallCNN().eval(), (torch.randn(2, 3, 16, 16),)


def pairwise_distance() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return PairwiseDistance().eval(), (torch.randn(16, 32),)


def tiny_bert() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    ids = torch.randint(0, 256, (2, 16))
    return TinyBert().eval(), (ids, torch.ones(2, 16, dtype=torch.int64))


def graph_break() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return GraphBreakModel().eval(), (torch.randn(4, 16),)


# ------------------------------------------------------------------ custom npu:: ops
_LIBS: dict[str, torch.library.Library] = {}


def register_npu_rms_norm(name: str = "test_rms_norm", *, with_fake: bool = True) -> str:
    """Register `npu::<name>(Tensor x, Tensor weight, float eps) -> Tensor` with a CPU kernel.

    Returns the qualified name. Idempotent within one process.
    """
    qualname = f"npu::{name}"
    if name in _LIBS:
        return qualname
    lib = torch.library.Library("npu", "FRAGMENT")  # noqa: TOR901 - test-only registration
    lib.define(f"{name}(Tensor x, Tensor weight, float eps) -> Tensor")

    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    lib.impl(name, rms_norm, "CPU")
    if with_fake:
        torch.library.register_fake(qualname, lambda x, weight, eps: torch.empty_like(x), lib=lib)
    _LIBS[name] = lib
    return qualname


class NpuOpModel(nn.Module):
    def __init__(self, op_name: str) -> None:
        super().__init__()
        self.op_name = op_name
        self.proj = nn.Linear(32, 32)
        self.weight = nn.Parameter(torch.ones(32))
        self.out = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        op = getattr(torch.ops.npu, self.op_name)
        return self.out(op(torch.relu(self.proj(x)), self.weight, 1e-6))


def npu_op_model(*, with_fake: bool = True) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    name = "test_rms_norm" if with_fake else "test_rms_norm_nofake"
    register_npu_rms_norm(name, with_fake=with_fake)
    torch.manual_seed(0)
    return NpuOpModel(name).eval(), (torch.randn(4, 32),)


# ------------------------------------------------------------------ saving helpers
def export_to(path, model: nn.Module, inputs, dynamic_shapes=None) -> str:
    with torch.no_grad():
        ep = torch.export.export(model, inputs, dynamic_shapes=dynamic_shapes)
    torch.export.save(ep, str(path))
    return str(path)


def export_dynamic_batch(path, model: nn.Module, inputs, max_batch: int = 64) -> str:
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    return export_to(path, model, inputs, dynamic_shapes={name: {0: batch} for name in _arg_names(model, inputs)})


def trace_to(path, model: nn.Module, inputs) -> str:
    with torch.no_grad():
        torch.jit.save(torch.jit.trace(model, inputs), str(path))
    return str(path)


def _arg_names(model: nn.Module, inputs) -> list[str]:
    import inspect

    return list(inspect.signature(model.forward).parameters)[: len(inputs)]
