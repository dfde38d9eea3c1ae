"""`npu-advisor inspect`: the table, the JSON, and clear errors for bad files."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from advisor.cli import app
from advisor.core.decision.engine import decide
from advisor.core.decision.rules import InspectionFacts
from tests.support import models

runner = CliRunner()
WIDE = {"COLUMNS": "250"}  # no wrapping inside table cells
SDPA = "aten.scaled_dot_product_attention.default"


class Attention(torch.nn.Module):
    """One scaled-dot-product attention: its decomposition picks a kernel for the device it is traced on."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = (t.view(batch, seq, 2, 8).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


@pytest.fixture(scope="module")
def npu_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    module, inputs = models.npu_op_model()
    return models.export_to(tmp_path_factory.mktemp("cli") / "npu.pt2", module, inputs)


@pytest.fixture(scope="module")
def attention_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("cli") / "attention.pt2"
    return models.export_to(path, Attention().eval(), (torch.randn(2, 8, 16),))


def inspect_json(path: str) -> dict:
    result = runner.invoke(app, ["inspect", path, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def npu_json(npu_model: str) -> dict:
    """`inspect --json` of the NPU-op model, run once for the tests that read it (each run is a sandboxed child)."""
    return inspect_json(npu_model)


@pytest.fixture(scope="module")
def npu_table(npu_model: str) -> str:
    """The table `inspect` prints for the NPU-op model (wide: no wrapping inside cells), run once for its tests."""
    result = runner.invoke(app, ["inspect", npu_model], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.stdout


def table_row(stdout: str, op_name: str) -> str:
    return next(line for line in stdout.splitlines() if f" {op_name} " in line)


def test_json_output(npu_json: dict) -> None:
    data = npu_json
    assert data["format"] == "exported_program"
    assert [op["name"] for op in data["custom_ops"]] == ["npu.test_rms_norm.default"]


def test_table_shows_custom_ops_coverage_and_graph_breaks(npu_table: str) -> None:
    assert "npu (1)" in npu_table  # namespace with its call count
    lines = npu_table.splitlines()
    row = next(line for line in lines if "test_rms_norm.default" in line and "runs here" not in line)
    # inspect runs in a fresh sandboxed child, where the op (registered only in this test process) does not exist:
    # it is stubbed from its schema, so it cannot run or be traced here, as on any node without its vendor package
    assert "untraceable" in row
    assert "not available on this node" in npu_table
    assert "Graph breaks" in npu_table


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


def test_table_shows_what_a_derived_status_was_judged_on(npu_json: dict, npu_table: str) -> None:
    linear = next(op for op in npu_json["ops"] if op["name"] == "aten.linear.default")["coverage"]
    assert linear["torchair_via"] and linear["inductor_via"]  # decomposed before both compilers see it
    row = table_row(npu_table, "linear.default")
    for status, via in ((linear["torchair"], linear["torchair_via"]), (linear["inductor"], linear["inductor_via"])):
        short = ", ".join(name.split(".")[1] for name in via)  # aten.addmm.default -> addmm
        assert f"{status} (via {short})" in row


def test_table_numbers_torchair_notes_and_lists_warnings(npu_json: dict, npu_table: str) -> None:
    data = npu_json
    coverage = next(op for op in data["ops"] if op["name"] == "npu.test_rms_norm.default")["coverage"]
    note = coverage["torchair_note"]
    assert data["warnings"]
    # a custom op without an explicit converter: TorchAir may auto-generate one on the NPU node
    assert coverage["torchair"] == "none" and coverage["torchair_unknown"] is True
    assert "unknown (known on an NPU) [1]" in table_row(npu_table, "test_rms_norm.default")
    lines = npu_table.splitlines()
    assert "TorchAir notes:" in lines
    assert any(line.strip() == f"[1] {note}" for line in lines)
    assert f"Warnings ({len(data['warnings'])}):" in lines
    for warning in data["warnings"]:
        assert any(line.strip() == f"- {warning}" for line in lines), warning


def test_device_dependent_coverage_is_shown_and_decided_as_unknown(attention_model: str) -> None:
    data = inspect_json(attention_model)
    sdpa = next(op for op in data["ops"] if op["name"] == SDPA)["coverage"]
    assert sdpa["torchair_unknown"] is True and sdpa["torchair"] not in ("supported", "partial")
    without_marker = json.loads(json.dumps(data))  # an inspection stored before the marker: only the note
    for op in without_marker["ops"]:
        op["coverage"].pop("torchair_unknown", None)
    for inspection in (data, without_marker):
        facts = InspectionFacts.of(inspection)
        assert SDPA in facts.torchair_unknown and SDPA not in facts.torchair_uncovered
        rec = decide({"stage": "production"}, inspection, None)
        assert (rec["backend"], rec["mode"]) == ("torchair", "max-autotune")
        assert any(SDPA in c["issue"] and "unknown until measured on an NPU" in c["issue"] for c in rec["caveats"])
    result = runner.invoke(app, ["inspect", attention_model], env=WIDE)
    assert "unknown (known on an NPU)" in table_row(result.stdout, "scaled_dot_product_attention.default")
