"""`npu-advisor measure`: results table, JSON output and clear errors (never a traceback)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from advisor.cli import app

torch = pytest.importorskip("torch")


runner = CliRunner()


def test_table_shows_each_row_with_status_and_the_failure_reason(mlp_file):
    result = runner.invoke(
        app,
        [
            "measure",
            mlp_file,
            "-b",
            "tests.support.backends_for_tests:WrongNumbersBackend",
            "--max-time",
            "0.2",
            "--timeout",
            "120",
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Measured on cpu" in out
    assert "eager:default" in out and "test-wrong:default" in out
    assert "fail_accuracy" in out and "FAIL" in out and "pass" in out
    assert "float64 reference" in out  # the reason line under the table
    assert "Traceback" not in out


def test_atol_on_the_command_line_replaces_the_default_tolerance(mlp_file):
    result = runner.invoke(
        app,
        [
            "measure",
            mlp_file,
            "-b",
            "tests.support.backends_for_tests:WrongNumbersBackend",
            "--atol",
            "1.5",
            "--json",
            "--max-time",
            "0.2",
            "--timeout",
            "120",
        ],
    )
    assert result.exit_code == 0, result.output
    wrong = next(row for row in json.loads(result.stdout)["measurements"] if row["backend"] == "test-wrong")
    assert wrong["status"] == "ok" and wrong["accuracy"]["atol"] == 1.5  # its +1.0 error is within 1.5


def test_json_output_is_a_measurement_run(mlp_file):
    result = runner.invoke(
        app,
        ["measure", mlp_file, "--backends", "torchair:max-autotune", "--json", "--max-time", "0.2", "--timeout", "120"],
    )
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert run["workload"] == "inference" and run["environment"]["measured_on"] == "cpu"
    statuses = {(row["backend"], row["status"]) for row in run["measurements"]}
    assert statuses == {("eager", "ok"), ("torchair", "unavailable")}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["measure", "/nonexistent/model.pt2"], "model file not found"),
        (["measure", "{junk}"], "zip"),
        (["measure", "{model}", "--backends", "warp-drive"], "unknown backend 'warp-drive'"),
        (["measure", "{model}", "--device", "tpu"], "unknown device 'tpu'"),
    ],
)
def test_bad_arguments_give_the_specific_message_and_a_non_zero_exit(tmp_path, mlp_file, args, message):
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"certainly not a model")
    args = [a.format(junk=junk, model=mlp_file) for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code != 0
    assert message in result.output.lower() or message in result.output
    assert "Traceback" not in result.output


def test_drift_during_timing_gets_a_line_under_the_table():
    from rich.console import Console

    from advisor.cli.measure_cmd import print_run
    from tests.support import synthetic_analyses as synthetic

    run = synthetic.run()
    rows = run["measurements"]
    rows[0]["latency"]["drift"] = 0.12
    for row in rows[1:]:
        row["latency"]["drift"] = 0.01
    console = Console(record=True, width=250)
    print_run(run, console)
    out = console.export_text()
    label = f"{rows[0]['backend']}:{rows[0]['mode']}"
    assert f"the machine's speed moved during timing (p10-p90 of the ~50 ms blocks' medians): {label} 12%;" in out
    for row in rows:  # a steady machine: no line
        row["latency"]["drift"] = 0.01
    console = Console(record=True, width=250)
    print_run(run, console)
    assert "speed moved" not in console.export_text()
