"""A data-dependent op that torch.export cannot trace: a branch on a tensor's value read with .item()."""

import torch


class Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        count = int((y > 0).sum().item())
        if count > 4:  # line 14: a guard on a data-dependent value
            return y * 2
        return y


def make():
    torch.manual_seed(0)
    return {"model": Gate().eval(), "args": (torch.randn(2, 8),)}
