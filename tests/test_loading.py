"""Loading model files: input specs, dynamic dims, TorchScript inputs, custom ops unknown to this process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import models
import pytest
import torch

from advisor.loading import LoadError, load_model

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("loading")


def test_exported_program_specs_and_stored_inputs(folder: Path) -> None:
    module, inputs = models.mlp()
    loaded = load_model(models.export_to(folder / "mlp.pt2", module, inputs))
    assert loaded.format == "exported_program"
    assert loaded.saved_with_torch == torch.__version__
    assert loaded.input_specs == [{"name": "x", "shape": [4, 64], "dtype": "float32"}]
    assert torch.equal(loaded.example_inputs[0], inputs[0])
    assert loaded.runnable == (True, None)
    assert loaded.dynamic_dims == []
    with torch.no_grad():
        assert torch.allclose(loaded.module(*inputs), module(*inputs))


def test_dynamic_batch_reports_symbol_input_and_range(folder: Path) -> None:
    module, inputs = models.mlp()
    loaded = load_model(models.export_dynamic_batch(folder / "dyn.pt2", module, inputs, max_batch=64))
    (dim,) = loaded.dynamic_dims
    assert (dim["input"], dim["dim"], dim["min"], dim["max"]) == ("x", 0, 1, 64)
    assert loaded.input_specs[0]["shape"] == [dim["symbol"], 64]


def test_bert_inputs_keep_their_names_and_dtypes(folder: Path) -> None:
    module, inputs = models.tiny_bert()
    loaded = load_model(models.export_to(folder / "bert.pt2", module, inputs))
    assert [(s["name"], s["shape"], s["dtype"]) for s in loaded.input_specs] == [
        ("input_ids", [2, 16], "int64"),
        ("attention_mask", [2, 16], "int64"),
    ]


@pytest.fixture(scope="module")
def torchscript_mlp(folder: Path) -> str:
    module, inputs = models.mlp()
    return models.trace_to(folder / "mlp.pt", module, inputs)


def test_torchscript_without_inputs_says_how_to_give_them(torchscript_mlp: str) -> None:
    with pytest.raises(LoadError) as error:
        load_model(torchscript_mlp)
    message = str(error.value)
    assert "carries no input shapes" in message
    assert "--inputs" in message and "--input-shape x=" in message


def test_torchscript_with_input_shape_flag_is_converted(torchscript_mlp: str) -> None:
    loaded = load_model(torchscript_mlp, input_shapes=["x=3x64:float32"])
    assert loaded.format == "torchscript"
    assert loaded.input_specs == [{"name": "x", "shape": [3, 64], "dtype": "float32"}]
    assert loaded.exported_program is not None, loaded.conversion_error
    assert loaded.script_module is not None
    with torch.no_grad():
        assert torch.allclose(loaded.module(*loaded.example_inputs), loaded.script_module(*loaded.example_inputs))


def test_torchscript_with_inputs_file_dict(torchscript_mlp: str, folder: Path) -> None:
    inputs_file = folder / "inputs.pt"
    torch.save({"x": torch.randn(5, 64)}, inputs_file)
    loaded = load_model(torchscript_mlp, inputs_file=str(inputs_file))
    assert loaded.example_inputs[0].shape == (5, 64)


def test_inputs_file_with_python_objects_is_refused(torchscript_mlp: str, folder: Path) -> None:
    inputs_file = folder / "objects.pt"
    torch.save({"x": torch.randn(5, 64), "extra": Path("/tmp")}, inputs_file)  # not a weights-only type
    with pytest.raises(LoadError, match="weights_only=True"):
        load_model(torchscript_mlp, inputs_file=str(inputs_file))


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["x=3by64"], "is not NAME=1x3x224x224"),
        (["x=3x64:floaty"], "unknown dtype 'floaty'"),
        (["y=3x64"], "not inputs of this model"),
        ([], "carries no input shapes"),
    ],
)
def test_bad_input_shape_flags_are_explained(torchscript_mlp: str, flags: list[str], phrase: str) -> None:
    with pytest.raises(LoadError, match=phrase):
        load_model(torchscript_mlp, input_shapes=flags)


def test_registered_custom_op_loads_runnable(folder: Path) -> None:
    module, inputs = models.npu_op_model()
    loaded = load_model(models.export_to(folder / "npu.pt2", module, inputs))
    assert loaded.stubbed_ops == []
    assert loaded.runnable == (True, None)


@pytest.fixture(scope="module")
def npu_file_from_subprocess(folder: Path) -> str:
    """Exported by a process that registered npu::loading_rms_norm; this test process never registers it."""
    path = folder / "npu_sub.pt2"
    script = (
        "import sys, torch, models\n"
        "models.register_npu_rms_norm('loading_rms_norm')\n"
        "models.export_to(sys.argv[1], models.NpuOpModel('loading_rms_norm').eval(), (torch.randn(4, 32),))\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], cwd=TESTS, check=True, capture_output=True)
    return str(path)


def test_unregistered_custom_op_is_stubbed_and_reported_not_runnable(npu_file_from_subprocess: str) -> None:
    loaded = load_model(npu_file_from_subprocess)
    assert loaded.stubbed_ops == ["npu.loading_rms_norm.default"]
    ok, reason = loaded.runnable
    assert not ok and "npu.loading_rms_norm.default" in reason
    targets = {str(node.target) for node in loaded.exported_program.graph.nodes if node.op == "call_function"}
    assert "npu.loading_rms_norm.default" in targets
    with pytest.raises(NotImplementedError), torch.no_grad():  # the runnable=False claim is true
        loaded.module(*loaded.example_inputs)
