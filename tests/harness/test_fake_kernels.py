"""The fake-kernel check says what FakeTensor itself does: no false alarms on stock models, a true positive on a
custom op without a fake kernel, and decomposition failures reported with their real error.

Ground truth: every op of an ExportedProgram ran on FakeTensor when it was exported (export traces with
FakeTensorMode without the fallback kernels), so `coverage.has_fake_kernel` must hold for each of them; the same
ops reached through a TorchScript trace must pass too.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from advisor.harness import coverage  # noqa: E402
from advisor.harness.decomposed_coverage import judge_on_received_ops  # noqa: E402
from advisor.harness.inspection import _is_dispatcher_op, _op_info, inspect_model  # noqa: E402

NO_FAKE = "has no known fake"


class TensorConstant(torch.nn.Module):
    """`torch.tensor(...)` in forward: export records aten.lift_fresh_copy, which FakeTensor special-cases."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.tensor([2.0, 3.0])


class FirstOutput(torch.nn.Module):
    """A stock model returning its first output (for torch.jit.trace, which wants tensors out)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.model(*args, return_dict=False)[0]


@pytest.fixture(scope="module")
def stock() -> dict[str, Any]:
    """Tiny GPT-2 and BERT (2 layers, hidden 32, random init) exported the way their docs show, once per session."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, 8))
    mask = torch.ones(1, 8, dtype=torch.long)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpt2 = GPT2Model(
            GPT2Config(
                n_layer=2,
                n_embd=32,
                n_head=2,
                vocab_size=100,
                n_positions=64,
                use_cache=False,
                bos_token_id=0,
                eos_token_id=0,
            )
        ).eval()
        bert = BertModel(
            BertConfig(
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=64,
                vocab_size=100,
                max_position_embeddings=64,
            )
        ).eval()
        with torch.no_grad():
            programs = {
                "gpt2": torch.export.export(gpt2, (ids,), kwargs={"return_dict": False}),
                "bert": torch.export.export(bert, (ids,), kwargs={"attention_mask": mask, "return_dict": False}),
                "tensor_constant": torch.export.export(TensorConstant(), (torch.randn(4, 2),)),
            }
            scripted = {
                "gpt2": torch.jit.trace(FirstOutput(gpt2), (ids,)),
                "bert": torch.jit.trace(FirstOutput(bert), (ids, mask)),
            }
    return {"programs": programs, "scripted": scripted}


def _exported_ops(program: Any) -> set[Any]:
    return {
        node.target
        for module in program.graph_module.modules()
        if isinstance(module, torch.fx.GraphModule)
        for node in module.graph.nodes
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
    }


def test_every_op_of_stock_exports_has_a_fake_kernel_by_fake_tensors_own_rules(stock: dict[str, Any]) -> None:
    ops = set().union(*(_exported_ops(p) for p in stock["programs"].values()))
    assert torch.ops.aten.lift_fresh_copy.default in ops  # the op the old check flagged
    assert len(ops) > 20
    false_alarms = sorted(str(op) for op in ops if not coverage.has_fake_kernel(op))
    assert false_alarms == []


def test_every_op_of_stock_torchscript_traces_has_a_fake_kernel(stock: dict[str, Any]) -> None:
    names = set()
    for module in stock["scripted"].values():
        for node in module.inlined_graph.nodes():
            if not node.kind().startswith("prim::"):
                names.add(str(node.schema()).split("(", 1)[0].replace("::", "."))
    ops = {name: coverage.resolve_op(name) for name in names}
    ops = {name: op for name, op in ops.items() if op is not None and _is_dispatcher_op(op)}  # as inspect lists them
    assert len(ops) > 15
    assert sorted(name for name, op in ops.items() if not coverage.has_fake_kernel(op)) == []


def test_stock_exports_get_no_fake_kernel_warning_and_decompose(stock: dict[str, Any]) -> None:
    for name, program in stock["programs"].items():
        ops = [_op_info(str(op), op, 1, [], exported=True) for op in _exported_ops(program)]
        assert all(op["has_fake_kernel"] and op["coverage"]["inductor"] != "untraceable" for op in ops), name
        if name == "gpt2":  # both decompositions (TorchAir's and Inductor's) of a stock model go through
            assert not [w for w in judge_on_received_ops(program, ops) if "decomposing the graph failed" in w]


def test_inspecting_an_export_with_lift_fresh_copy_warns_nothing(stock: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "tensor_constant.pt2"
    torch.export.save(stock["programs"]["tensor_constant"], str(path))
    result = inspect_model(str(path))
    assert "aten.lift_fresh_copy.default" in {op["name"] for op in result["ops"]}
    assert not [w for w in result["warnings"] if NO_FAKE in w or "decomposing the graph failed" in w]


def test_a_custom_op_without_a_fake_kernel_is_flagged_and_fake_tensor_agrees() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode, UnsupportedOperatorException

    @torch.library.custom_op("advisor_test::no_fake_scale", mutates_args=())
    def no_fake_scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    op = torch.ops.advisor_test.no_fake_scale.default
    assert not coverage.has_fake_kernel(op)
    with FakeTensorMode() as mode, pytest.raises((UnsupportedOperatorException, NotImplementedError, RuntimeError)):
        op(mode.from_tensor(torch.randn(3)))
    no_fake_scale.register_fake(lambda x: torch.empty_like(x))
    assert coverage.has_fake_kernel(op)
    with FakeTensorMode() as mode:
        assert op(mode.from_tensor(torch.randn(3))).shape == (3,)
