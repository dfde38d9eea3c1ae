"""The `npu-advisor` command line. Each command lives in its own module and registers itself here.

Command modules must not import torch at import time: `npu-advisor serve` and `--help` stay light.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="npu-advisor",
    help="Which graph mode should this PyTorch model use on our hardware? Measured, not guessed.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_COMMAND_MODULES = (
    "advisor.cli.example_cmd",
    "advisor.cli.inspect_cmd",
    "advisor.cli.worker_cmd",
    "advisor.cli.dispatch_cmd",
    "advisor.cli.serve_cmd",
    "advisor.cli.db_cmd",
    "advisor.cli.token_cmd",
    "advisor.cli.analyze_cmd",
    "advisor.cli.measure_cmd",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(app)
