"""`analyze --shape-traffic FILE --max-graphs N` (issue 43): the traffic reaches the context (local and --server),
bad traffic is an error naming the line with nothing submitted, and traffic the model cannot take is refused
after inspection, before anything is measured."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from tests.support.cli_server_call import server_call

runner = CliRunner()


def test_the_traffic_is_aggregated_into_the_submitted_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traffic = tmp_path / "calls.jsonl"
    traffic.write_text('{"ids": [1, 61]}\n{"ids": [1, 9], "count": 4}\n{"ids": [1, 61]}\n')
    result, seen = server_call(tmp_path, monkeypatch, "--shape-traffic", str(traffic), "--max-graphs", "3")
    assert result.exit_code == 0, result.output
    assert seen["context"]["shape_traffic"] == [
        {"shapes": {"ids": [1, 9]}, "weight": 4},
        {"shapes": {"ids": [1, 61]}, "weight": 2},
    ]
    assert seen["context"]["max_graphs"] == 3


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('{"ids": [1, 61]}\n{"ids": [1, 0]}\n', "line 2: ids: every size must be an integer from 1"),
        ('{"ids": [1, 61], "count": -1}\n', "line 1: count must be a positive integer"),
        ('{"ids": [1, 61]}\n\n{"ids": [1, 61, 3]}\n', "line 3: ids has rank 3, earlier lines 2"),
        ("garbage\n", "line 1: not valid JSON"),
    ],
)
def test_bad_traffic_is_an_error_naming_the_line_and_nothing_is_submitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str, words: str
) -> None:
    traffic = tmp_path / "calls.jsonl"
    traffic.write_text(content)
    result, seen = server_call(tmp_path, monkeypatch, "--shape-traffic", str(traffic))
    assert result.exit_code == 2
    assert words in result.output and "Traceback" not in result.output
    assert seen == {}


def test_a_missing_traffic_file_and_a_bad_budget_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, seen = server_call(tmp_path, monkeypatch, "--shape-traffic", str(tmp_path / "absent.jsonl"))
    assert result.exit_code == 2 and "cannot read the shape traffic" in result.output and seen == {}
    result, seen = server_call(tmp_path, monkeypatch, "--max-graphs", "0")
    assert result.exit_code == 2 and "max_graphs" in result.output and seen == {}


def test_traffic_the_model_cannot_take_is_refused_before_measuring(example_mlp_file: Path, tmp_path: Path) -> None:
    traffic = tmp_path / "calls.jsonl"
    traffic.write_text('{"pixels": [1, 784]}\n')
    result = runner.invoke(
        app,
        ["analyze", str(example_mlp_file), "--target", "cpu", "--shape-traffic", str(traffic), "--format", "json"],
    )
    assert "the shape traffic does not fit the model: shape_traffic entry 1: pixels: the model has no input" in (
        result.output
    )
    assert "Traceback" not in result.output


def test_inspect_takes_traffic_only_for_the_users_code(tmp_path: Path) -> None:
    traffic = tmp_path / "calls.jsonl"
    traffic.write_text('{"x": [1, 8]}\n')
    model = tmp_path / "m.pt2"
    model.write_bytes(b"x")
    result = runner.invoke(app, ["inspect", str(model), "--shape-traffic", str(traffic)])
    assert result.exit_code == 2 and "applies to path/to/file.py:factory only" in result.output
