"""A model whose batch size changes between calls: it recompiles until the batch dim is marked dynamic."""

import torch


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def make():
    torch.manual_seed(0)
    return Mlp().eval(), (torch.randn(2, 8),)
