"""Models whose forward takes tensors nested in a dict or list, as Hugging Face style models do: the recompile check
must resize the nested tensors too (issue 43)."""

import torch


class DictEncoder(torch.nn.Module):
    """forward(batch) with batch = {"input_ids": [B, S] ids, "mask": [B, S]}: a tiny text encoder."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)

    def forward(self, batch: dict) -> torch.Tensor:
        hidden = self.layer(self.embed(batch["input_ids"]))
        return (hidden * batch["mask"].unsqueeze(-1)).sum(1)


class TensorAndDict(torch.nn.Module):
    """forward(x, extra) with extra = {"scale": [B, 8], "parts": [[B, 8]]}: each must match x's batch."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, extra: dict) -> torch.Tensor:
        return self.linear(x) * extra["scale"] + extra["parts"][0]


def make_dict():
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 6))
    return DictEncoder().eval(), ({"input_ids": ids, "mask": torch.ones(2, 6)},)


def make_tensor_and_dict():
    torch.manual_seed(0)
    x = torch.randn(2, 8)
    return TensorAndDict().eval(), (x, {"scale": torch.randn(2, 8), "parts": [torch.randn(2, 8)]})
