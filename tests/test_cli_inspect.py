"""`npu-advisor inspect`: the table, the JSON, and clear errors for bad files."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import models
import pytest
import torch
from typer.testing import CliRunner

from advisor.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def npu_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    module, inputs = models.npu_op_model()
    return models.export_to(tmp_path_factory.mktemp("cli") / "npu.pt2", module, inputs)


def test_json_output(npu_model: str) -> None:
    result = runner.invoke(app, ["inspect", npu_model, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["format"] == "exported_program"
    assert [op["name"] for op in data["custom_ops"]] == ["npu.test_rms_norm.default"]


def test_table_shows_custom_ops_coverage_and_graph_breaks(npu_model: str) -> None:
    result = runner.invoke(app, ["inspect", npu_model], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "npu (1)" in result.stdout  # namespace with its call count
    row = next(line for line in result.stdout.splitlines() if "test_rms_norm.default" in line)
    assert "fallback" in row  # its Inductor coverage
    assert "Graph breaks: 0" in result.stdout


def test_torchscript_with_input_shape(tmp_path: Path) -> None:
    module, inputs = models.mlp()
    path = models.trace_to(tmp_path / "mlp.pt", module, inputs)
    result = runner.invoke(app, ["inspect", path, "--input-shape", "x=2x64:float32", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs"] == [{"name": "x", "shape": [2, 64], "dtype": "float32"}]


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        (pickle.dumps({"weights": [1, 2, 3]}), "pickled checkpoint"),
        (b"not a model at all", "not a model archive"),
        (b"", "empty"),
    ],
)
def test_bad_files_exit_2_with_the_reason(tmp_path: Path, content: bytes, phrase: str) -> None:
    path = tmp_path / "bad.pt2"
    path.write_bytes(content)
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2
    assert phrase in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # a clean exit, not an escaped error


def test_torchscript_without_inputs_exits_2(tmp_path: Path) -> None:
    module, inputs = models.mlp()
    path = models.trace_to(tmp_path / "mlp.pt", module, inputs)
    result = runner.invoke(app, ["inspect", path])
    assert result.exit_code == 2
    assert "carries no input shapes" in result.output


def test_missing_file_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["inspect", str(tmp_path / "nope.pt2")])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_state_dict_checkpoint_from_torch_save(tmp_path: Path) -> None:
    module, _ = models.mlp()
    path = tmp_path / "ckpt.pt"
    torch.save(module.state_dict(), path)
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 2
    assert "torch.export.save" in result.output
