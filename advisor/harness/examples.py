"""Small example models the CLI can export itself, so a first run needs no model of your own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EXAMPLES = ("mlp", "cnn")


def build_example(name: str) -> tuple[Any, tuple[Any, ...]]:
    """(module in eval mode, example inputs) for one of EXAMPLES."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    if name == "mlp":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
        return model.eval(), (torch.randn(8, 784),)
    if name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(32, 10),
        )
        return model.eval(), (torch.randn(2, 3, 32, 32),)
    raise ValueError(f"unknown example {name!r}; choose one of {', '.join(EXAMPLES)}")


def export_example(name: str, path: str | Path, fmt: str = "exported_program") -> Path:
    """Build an example and save it as an ExportedProgram (.pt2) or TorchScript (.pt) file."""
    import torch

    model, inputs = build_example(name)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        if fmt == "exported_program":
            torch.export.save(torch.export.export(model, inputs), str(path))
        elif fmt == "torchscript":
            torch.jit.save(torch.jit.trace(model, inputs), str(path))
        else:
            raise ValueError(f"unknown format {fmt!r}; choose exported_program or torchscript")
    return path
