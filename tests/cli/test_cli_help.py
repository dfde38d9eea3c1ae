"""`--help` reads as written (issue 44): rich renders help text, so `file.py:factory: ...` once came out as
`file.py🏭 ...` (`:factory:` is an emoji code), and `analyze --workload` listed inference and training but not
generation. Rendered here as a user sees it, through the real typer app."""

from __future__ import annotations

import re
from typing import get_args

import pytest
from rich._emoji_codes import EMOJI  # rich's own table of the `:name:` codes it replaces
from typer.testing import CliRunner

from advisor.cli import app
from advisor.core.context import Fleet, ModelChanges, Optimizer, Stage, Target, Workload

WIDE = {"COLUMNS": "300", "TERMINAL_WIDTH": "300", "NO_COLOR": "1"}  # no wrapping: one option per line
EMOJI_CHARACTERS = {ch for emoji in EMOJI.values() for ch in emoji if ord(ch) > 0x2FFF}


def render_help(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.output


def option_line(help_text: str, flag: str) -> str:
    """The line of the options panel that documents `flag` (its help text follows the flag on that line)."""
    starts = re.compile(rf"^[\s│|*]*(?:-\w,\s*)?{re.escape(flag)}\b")  # the flag opens its row (rich or plain click)
    lines = [line for line in help_text.splitlines() if starts.search(line)]
    assert lines, f"{flag} is not in the help:\n{help_text}"
    return lines[0]


@pytest.mark.parametrize("command", [("analyze",), ("inspect",), ("measure",)])
def test_help_has_no_emoji_where_the_text_has_a_colon_code(command: tuple[str, ...]):
    text = render_help(*command)
    replaced = sorted({ch for ch in text if ch in EMOJI_CHARACTERS})
    assert not replaced, f"{' '.join(command)} --help shows emoji {replaced} (a `:name:` in its help text):\n{text}"


@pytest.mark.parametrize("command", ["analyze", "inspect"])
def test_the_export_flags_name_the_factory_spec_as_typed(command: str):
    text = render_help(command)
    for flag in ("--export-to", "--strict-export"):
        assert "file.py:factory" in option_line(text, flag), option_line(text, flag)


@pytest.mark.parametrize(
    ("flag", "values"),
    [
        ("--workload", get_args(Workload)),
        ("--stage", get_args(Stage)),
        ("--model-changes", get_args(ModelChanges)),
        ("--optimizer", get_args(Optimizer)),
        ("--target", get_args(Target)),
        ("--fleet", get_args(Fleet)),
    ],
)
def test_analyze_help_lists_every_value_each_context_flag_accepts(flag: str, values: tuple[str, ...]):
    line = option_line(render_help("analyze"), flag)
    missing = [value for value in values if not re.search(rf"\b{value}\b", line)]
    assert not missing, f"analyze --help: {flag} does not list {missing}: {line.strip()}"


def test_the_workload_help_names_generation():
    assert "generation" in get_args(Workload)  # the context accepts it, so the flag's help must say so
    assert "generation" in option_line(render_help("analyze"), "--workload")


def test_the_cli_starts_without_torch_or_the_servers_database_layer() -> None:
    """Every `npu-advisor` command imports the whole CLI first: the client commands (`analyze --server`, `worker`)
    must not pay for torch or the server's database layer (sqlmodel, ~0.2 s) to start."""
    import subprocess
    import sys

    code = "import sys; from advisor.cli import app; print(sorted({'torch', 'sqlmodel'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]", result.stdout
