"""A model with a graph break that torch.export does not mind: printing in forward. Dynamo breaks the graph at line
16; torch.export (non-strict) runs the print as Python and exports one graph. For the server round trip
(tests/service/test_source_report_upload.py): the program is uploaded, the break comes with it in the report."""

import torch


class Logged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 8)
        self.second = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.first(x))
        print("activations", y.shape)  # line 16: printing breaks the graph
        return self.second(y)


def make():
    torch.manual_seed(0)
    return Logged().eval(), (torch.randn(2, 8),)
