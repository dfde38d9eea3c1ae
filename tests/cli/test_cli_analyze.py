"""`npu-advisor analyze`: context flags, errors as messages, the --server seam, and one real local run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from tests.support.cli_server_call import server_call

runner = CliRunner()


@pytest.fixture(scope="module")
def mlp_file(example_mlp_file: Path) -> Path:
    """The example MLP (`npu-advisor example mlp`), exported once per test worker (tests/conftest.py)."""
    return example_mlp_file


def test_invalid_context_flags_are_reported_field_by_field(tmp_path: Path) -> None:
    model = tmp_path / "m.pt2"
    model.write_bytes(b"not used: the context is checked first")
    result = runner.invoke(app, ["analyze", str(model), "--stage", "staging", "--expected-calls", "0"])
    assert result.exit_code == 2
    assert "invalid deployment context" in result.output
    assert "stage:" in result.output and "expected_calls_per_compile:" in result.output
    assert "Traceback" not in result.output


def test_context_file_is_overridden_by_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    context_file = tmp_path / "context.json"
    context_file.write_text(json.dumps({"stage": "edge", "target": "cpu", "memory_budget_mb": 256}))
    result, seen = server_call(
        tmp_path,
        monkeypatch,
        *["--context", str(context_file), "--stage", "production", "--format", "markdown"],
        *["--backends", "eager,inductor", "--force", "--tag", "nightly-cv", "--out", str(tmp_path / "r.md")],
    )
    model = tmp_path / "m.pt2"
    assert result.exit_code == 0, result.output
    assert seen["backends"] == ["eager", "inductor"] and seen["force"] is True and seen["out"] == tmp_path / "r.md"
    assert seen["context"]["stage"] == "production"  # the flag wins
    assert seen["context"]["target"] == "cpu" and seen["context"]["memory_budget_mb"] == 256  # the file's
    assert seen["server"] == "http://advisor.example:8000" and seen["token"] == "t0k" and seen["fmt"] == "markdown"
    assert seen["model"] == model and seen["wait"] is True and seen["tag"] == "nightly-cv"


def test_flags_that_only_mean_something_in_one_mode_are_refused_in_the_other(tmp_path: Path) -> None:
    model = tmp_path / "m.pt2"
    model.write_bytes(b"x")
    on_server = runner.invoke(
        app, ["analyze", str(model), "--server", "http://advisor.example:8000", "--device", "cpu", "--skip-measure"]
    )
    assert on_server.exit_code == 2 and "--device, --skip-measure apply to --local only" in on_server.output
    local = runner.invoke(app, ["analyze", str(model), "--force"])
    assert local.exit_code == 2 and "--force applies to --server only" in local.output
    tagged = runner.invoke(app, ["analyze", str(model), "--tag", "nightly"])
    assert tagged.exit_code == 2 and "--tag applies to --server only" in tagged.output


def test_missing_model_and_bad_format_are_messages(tmp_path: Path) -> None:
    result = runner.invoke(app, ["analyze", str(tmp_path / "absent.pt2")])
    assert result.exit_code == 2 and "does not exist" in result.output
    model = tmp_path / "m.pt2"
    model.write_bytes(b"x")
    result = runner.invoke(app, ["analyze", str(model), "--format", "html"])
    assert result.exit_code == 2 and "unknown --format 'html'" in result.output


def test_a_file_that_is_not_a_model_is_refused_before_loading(tmp_path: Path) -> None:
    model = tmp_path / "notes.pt2"
    model.write_text("just text")
    result = runner.invoke(app, ["analyze", str(model), "--target", "cpu"])
    assert result.exit_code == 2 and result.output.startswith("error: ")
    assert "Traceback" not in result.output


def test_inspection_only_gives_an_unmeasured_report(mlp_file: Path) -> None:
    result = runner.invoke(
        app, ["analyze", str(mlp_file), "--local", "--target", "npu", "--skip-measure", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["recommendation"]["measured"] is False
    assert report["inspection"]["parameters"]["count"] == 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    assert report["measurements"] is None


@pytest.mark.slow
def test_local_analysis_of_the_example_mlp_prints_a_readable_report(mlp_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    result = runner.invoke(
        app,
        [
            "analyze",
            str(mlp_file),
            "--local",
            "--target",
            "cpu",
            "--stage",
            "production",
            "--backends",
            "inductor:default",
            "--format",
            "markdown",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    md = out.read_text()
    assert md.startswith(f"# npu-advisor report: {mlp_file.name}")
    assert "_confidence " in md and "measured on cpu" in md
    rows = [line for line in md.splitlines() if line.startswith("| eager:default") or line.startswith("| inductor")]
    assert len(rows) == 2 and all("| ok |" in row for row in rows)
    assert "## How it was decided" in md and "## Config to paste" in md
    headline = next(line for line in md.splitlines() if line.startswith("**Use "))
    assert headline in ("**Use eager PyTorch (no compilation) on CPU**", "**Use torch.compile with Inductor on CPU**")
    # the answer came first, on stderr, once the options were ranked: the same pick, before the details
    ranked = next(line for line in result.stderr.splitlines() if line.startswith("ranked: "))
    assert ranked.startswith(f"ranked: {headline.strip('*')} (confidence ") and ranked.endswith(" follow")
    assert result.stderr.index(ranked) < result.stderr.index("details: loading")
    assert "Ranked; the details" not in md, "the report is the complete run's"


def test_a_training_analysis_measures_the_optimizer_asked_for(mlp_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = runner.invoke(
        app,
        [
            "analyze",
            str(mlp_file),
            "--target",
            "cpu",
            "--workload",
            "training",
            "--optimizer",
            "adamw",
            "--backends",
            "eager",
            "--format",
            "json",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    analysis = json.loads(out.read_text())
    assert analysis["context"]["optimizer"] == "adamw"
    eager = analysis["measurements"]["measurements"][0]
    assert eager["status"] == "ok" and eager["training"]["optimizer"] == "adamw"
    assert "adamw step" in json.dumps(analysis["recommendation"]["caveats"])
