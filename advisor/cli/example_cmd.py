"""`npu-advisor example NAME OUT`: export a small example model to try the other commands on."""

from __future__ import annotations

from pathlib import Path

import typer

from advisor.harness.examples import EXAMPLES


def example(
    name: str = typer.Argument("mlp", help=f"one of: {', '.join(EXAMPLES)}"),
    out: Path = typer.Argument(Path("example.pt2"), help="where to write the file"),
    torchscript: bool = typer.Option(False, "--torchscript", help="save with torch.jit instead of torch.export"),
) -> None:
    """Export an example model (ExportedProgram by default)."""
    from advisor.harness.examples import export_example

    if name not in EXAMPLES:
        typer.echo(f"error: unknown example {name!r}; choose one of {', '.join(EXAMPLES)}", err=True)
        raise typer.Exit(2)
    try:
        path = export_example(name, out, "torchscript" if torchscript else "exported_program")
    except ValueError as exc:  # e.g. gpt2-decode --torchscript, or transformers not installed
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.command("example")(example)
