"""The options of every command that loads a model (`analyze`, `inspect`, `measure`), each declared once as an
`Annotated` type, so the same flag means and says the same in each command's --help. Torch-free."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Inputs = Annotated[
    Path | None,
    typer.Option("--inputs", help="example inputs: a torch.save'd tensor, tuple or dict name->tensor"),
]
InputShape = Annotated[
    list[str] | None,
    typer.Option("--input-shape", help="NAME=1x3x224x224:float32, once per input (TorchScript needs inputs)"),
]
StrictExport = Annotated[
    bool,
    typer.Option(
        "--strict-export",
        help="for a file.py:factory model, torch.export strict too when non-strict succeeds (default: strict "
        "only where non-strict fails)",
    ),
]
