"""How commands report failure: one line on stderr and an exit code, never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer


@contextmanager
def one_line_errors(action: str, expected: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """`expected` errors carry a message for the user (exit 2); anything else is "<action> failed" (exit 1)."""
    try:
        yield
    except expected as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except typer.Exit:
        raise
    except Exception as exc:  # noqa: BLE001 - the user gets one line, never a traceback
        text = str(exc).strip().splitlines()
        typer.echo(f"error: {action} failed: {type(exc).__name__}: {text[0] if text else ''}", err=True)
        raise typer.Exit(1) from None
