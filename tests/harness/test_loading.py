"""Loading model files: input specs, dynamic dims, TorchScript inputs, custom ops unknown to this process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from advisor.harness.loading import LoadError, load_model
from tests.support import models
from tests.support.forked_script import run_script

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = TESTS / "support"  # where the subprocess scripts `import models`


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
    run_script(script, cwd=SUPPORT, argv=[str(path)])
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


# ---------------------------------------------------------------- output containers unknown where the file loads
def _export_with_uploader_containers(path: Path) -> str:
    """A model returning a registered dataclass (one field None) and a namedtuple, both named after a library the
    loading process does not have; deregistered again after saving, as if loaded elsewhere."""
    import collections
    import dataclasses

    import torch.utils._pytree as pytree

    @dataclasses.dataclass
    class Pair:
        a: torch.Tensor
        b: torch.Tensor | None

    Two = collections.namedtuple("Two", ["x", "y"])
    torch.export.register_dataclass(Pair, serialized_type_name="uploaders_lib.outputs.Pair")
    pytree._register_namedtuple(Two, serialized_type_name="uploaders_lib.outputs.Two")

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple:
            return Pair(x + 1, None), Two(x * 2, x - 1)

    try:
        return models.export_to(path, Model(), (torch.arange(4.0),))
    finally:
        pytree._deregister_pytree_node(Pair)
        pytree._deregister_pytree_node(Two)


def test_output_containers_unknown_here_are_rebuilt_and_other_load_failures_name_their_cause(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from advisor.harness import pytree_outputs

    path = _export_with_uploader_containers(folder / "containers.pt2")
    # without the stand-ins torch only logs the cause and raises "check the warnings above": the message names it
    with monkeypatch.context() as patched:
        patched.setattr(pytree_outputs, "register_stand_ins", lambda programs: [])
        with pytest.raises(LoadError) as failure:
            load_model(path)
    message = str(failure.value)
    assert "uploaders_lib.outputs.Pair in pytree is not registered" in message
    assert "warnings above" not in message
    loaded = load_model(path)
    pair, two = loaded.module(*loaded.example_inputs)
    x = torch.arange(4.0)
    assert torch.equal(pair.a, x + 1) and pair["b"] is None and pair[0] is pair.a
    assert two._fields == ("x", "y") and torch.equal(two.x, x * 2) and torch.equal(two.y, x - 1)
    assert type(pair).serialized_type_name == "uploaders_lib.outputs.Pair"
    assert loaded.stand_in_types == ["uploaders_lib.outputs.Pair", "uploaders_lib.outputs.Two"]
    assert "uploaders_lib" not in sys.modules  # the type names are data: nothing was imported


def test_a_spec_that_would_import_a_module_is_refused() -> None:
    """torch reads an enum dict key by importing the module it names; an upload must not import anything."""
    import json

    from advisor.harness import pytree_outputs

    leaf = {"type": None, "context": None, "children_spec": []}
    key = {"__enum__": True, "fqn": "uploaders_enum_module:Color", "name": "RED"}
    spec = [1, {"type": "builtins.dict", "context": json.dumps([key]), "children_spec": [leaf]}]
    program = {"graph_module": {"module_call_graph": [{"fqn": "", "signature": {"in_spec": json.dumps(spec)}}]}}
    with pytest.raises(pytree_outputs.SpecError, match="uploaders_enum_module"):
        pytree_outputs.register_stand_ins([program])
    assert "uploaders_enum_module" not in sys.modules


def test_keyword_and_nested_inputs_are_flat_example_inputs_the_module_passes_on_as_exported(folder: Path) -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, pair: tuple, *, scale: torch.Tensor) -> torch.Tensor:
            return (x + pair[0] * pair[1]) * scale

    x, a, b, scale = (torch.full((2, 3), float(v)) for v in (1, 2, 3, 4))
    with torch.no_grad():
        ep = torch.export.export(Model(), (x, (a, b)), kwargs={"scale": scale})
    path = str(folder / "nested.pt2")
    torch.export.save(ep, path)
    loaded = load_model(path)
    assert [(s["name"], s["keyword"]) for s in loaded.input_specs] == [
        ("x", False),
        ("pair_0", False),
        ("pair_1", False),
        ("scale", True),
    ]
    assert loaded.keyword_inputs == ["scale"] and len(loaded.example_inputs) == 4
    assert any("model(x, pair_0, pair_1, scale=...)" in note for note in loaded.warnings)
    expected = Model()(x, (a, b), scale=scale)
    torch.testing.assert_close(loaded.module(*loaded.example_inputs), expected)
    compiled = torch.compile(loaded.module, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(*loaded.example_inputs), expected)
