"""Where the CLI takes a token from: $ADVISOR_TOKEN or a file only its owner can read, never the command line
(every process on the machine can read a command line through /proc)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import typer

from advisor.cli.client import TOKEN_ENV


def read_token(token_file: Path | None) -> str | None:
    """The token in `token_file` (refused when group/others may read it), else $ADVISOR_TOKEN, else None."""
    if token_file is None:
        return os.environ.get(TOKEN_ENV)
    try:
        mode = token_file.stat().st_mode
        token = token_file.read_text().strip()
    except OSError as exc:
        typer.echo(f"error: cannot read the token file {token_file}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        typer.echo(f"error: {token_file} is readable by others (mode {stat.S_IMODE(mode):o}); chmod 600 it", err=True)
        raise typer.Exit(2)
    if not token:
        typer.echo(f"error: the token file {token_file} is empty", err=True)
        raise typer.Exit(2)
    return token
