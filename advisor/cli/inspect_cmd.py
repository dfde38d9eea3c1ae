"""`npu-advisor inspect MODEL`: what is inside a model, before any device time is spent."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Filled in by the introspection work (issue 2)."""
