"""A small model with graph breaks at known lines (tests/cli/test_source_front.py checks file:line and the text)."""

import torch


class Breaks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.first(x))
        if y.sum() > 0:  # line 14: data-dependent branch
            y = y * 2
        print("shape", y.shape)  # line 16: printing
        return self.second(y)


def make():
    torch.manual_seed(0)
    return Breaks().eval(), (torch.randn(2, 8),)
