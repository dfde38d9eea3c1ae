"""The ops the compilers really receive: decomposition tables, provenance back to the exported nodes, and the check
that the emulation matches what AOTAutograd hands a torch.compile backend."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.backends.common import aot_autograd

from advisor.harness import decomposed_coverage
from advisor.harness.decomposed_coverage import inductor_table, received_ops, torchair_table
from tests.support import models


class Upsample(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2, mode="nearest").to(torch.float64)


def _export(module: nn.Module, inputs: tuple) -> torch.export.ExportedProgram:
    with torch.no_grad():
        return torch.export.export(module, inputs)


def _op_names(graph: torch.fx.Graph) -> list[str]:
    return [str(node.target) for node in graph.nodes if isinstance(node.target, torch._ops.OpOverload)]


def _aot_forward_ops(module: nn.Module, inputs: tuple) -> Counter[str]:
    """The ops AOTAutograd hands a backend that passes no decompositions of its own (as TorchAir does for aten)."""
    seen: Counter[str] = Counter()

    def capture(graph_module: torch.fx.GraphModule, _inputs: list) -> torch.fx.GraphModule:
        seen.update(_op_names(graph_module.graph))
        return graph_module

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(module, backend=aot_autograd(fw_compiler=capture, decompositions={}))(*inputs)
    torch._dynamo.reset()
    return seen


def test_each_exported_op_is_traced_to_what_it_becomes() -> None:
    ep = _export(*models.mlp())
    received = received_ops(ep, ["aten.linear.default", "aten.relu.default"], torchair_table())
    assert received["aten.relu.default"] == ["aten.relu.default"]  # not decomposed: itself
    assert "aten.linear.default" not in received["aten.linear.default"]
    assert {"aten.addmm.default", "aten.mm.default"} & set(received["aten.linear.default"])


def test_torchair_emulation_matches_the_graph_aot_autograd_hands_the_backend() -> None:
    module, inputs = models.cnn()
    ep = _export(module, inputs)
    exported = set(_op_names(ep.graph)) - decomposed_coverage.EXPORT_ONLY_OPS
    received = received_ops(ep, exported, torchair_table())
    assert set().union(*map(set, received.values())) == set(_aot_forward_ops(module, inputs))


def test_export_only_checks_never_reach_torch_compile_backends() -> None:
    module, inputs = Upsample(), (torch.randn(1, 2, 4, 4),)
    exported = _op_names(_export(module, inputs).graph)
    assert set(exported) & decomposed_coverage.EXPORT_ONLY_OPS  # `.to()` makes export insert the check
    assert not set(_aot_forward_ops(module, inputs)) & decomposed_coverage.EXPORT_ONLY_OPS


def test_torchair_keeps_nearest_upsampling_whole_where_torch_would_decompose_it() -> None:
    """torchair._utils.adjust_implicit_decomposition re-points upsample_nearest2d.vec at the .default kernel."""
    ep = _export(Upsample(), (torch.randn(1, 2, 4, 4),))
    name = "aten.upsample_nearest2d.vec"
    assert received_ops(ep, [name], torchair_table())[name] == ["aten.upsample_nearest2d.default"]
    assert "aten.upsample_nearest2d.default" not in received_ops(ep, [name], inductor_table())[name]


def test_ops_inside_control_flow_branches_are_traced_too() -> None:
    class Branches(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda x: self.linear(x), lambda x: F.layer_norm(x, (4,)), (x,))

    ep = _export(Branches(), (torch.randn(2, 4),))
    received = received_ops(ep, ["aten.linear.default", "aten.layer_norm.default"], torchair_table())
    assert {"aten.addmm.default", "aten.mm.default"} & set(received["aten.linear.default"])
    assert received["aten.layer_norm.default"] and "aten.layer_norm.default" not in received["aten.layer_norm.default"]


@pytest.mark.parametrize("table", [torchair_table, inductor_table], ids=["torchair", "inductor"])
def test_custom_ops_are_not_decomposed(table) -> None:
    ep = _export(*models.npu_op_model())
    name = "npu.test_rms_norm.default"
    assert received_ops(ep, [name], table())[name] == [name]


class Mixed(nn.Module):
    """The calls whose decompositions need care: inference dropout (-> clone), in-place ops (functionalized; on a
    view: the view replayed), batch norm (unused statistics), sdpa (a device kernel), reshape (a view),
    upsampling, a cast and a dead call."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.drop = nn.BatchNorm2d(2), nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        F.layer_norm(x, (4,))  # dead code: decomposed into nothing
        y = self.drop(self.norm(x)).relu_()
        y = F.interpolate(y, scale_factor=2, mode="nearest")
        q = y.reshape(y.shape[0], 2, -1, 4)
        F.hardtanh(q, inplace=True)  # in place on a view, an op Inductor decomposes
        y = F.scaled_dot_product_attention(q, q, q).reshape(y.shape)
        return y.add_(1).to(torch.float64)


def _dynamic_batch(module: nn.Module, inputs: tuple) -> torch.export.ExportedProgram:
    batch = torch.export.Dim("batch", min=2, max=64)
    with torch.no_grad():
        return torch.export.export(module, inputs, dynamic_shapes=({0: batch},))


@pytest.mark.parametrize(
    "program",
    [
        lambda: _export(*models.cnn()),
        lambda: _export(*models.tiny_bert()),
        lambda: _export(*models.pairwise_distance()),
        lambda: _export(Mixed().eval(), (torch.randn(2, 2, 4, 4),)),
        lambda: _dynamic_batch(Mixed().eval(), (torch.randn(3, 2, 4, 4),)),
        lambda: _dynamic_batch(*models.mlp()),
    ],
    ids=["cnn", "tiny-bert", "cdist", "mixed", "mixed-dynamic-batch", "mlp-dynamic-batch"],
)
@pytest.mark.parametrize("table", [torchair_table, inductor_table], ids=["torchair", "inductor"])
def test_tracing_each_distinct_call_alone_gives_what_the_whole_graph_decomposition_gives(program, table) -> None:
    ep, table = program(), table()
    names = {name for name in _op_names(ep.graph) if decomposed_coverage._decomposed(name, table)}
    names -= {"aten.sym_size.int"}  # the whole-graph tracer re-creates shape reads without provenance: no answer
    assert names  # every model here has ops the compilers decompose
    whole = decomposed_coverage.received_ops_whole_program(ep, names, table)
    per_call = decomposed_coverage._received_per_call(ep, names, table)
    assert {name: set(ops) for name, ops in per_call.items()} == {name: set(ops or ()) for name, ops in whole.items()}
    assert all(ops is not None for ops in whole.values())


def test_a_call_that_cannot_be_traced_alone_falls_back_to_the_whole_graph(monkeypatch) -> None:
    def untraceable(calls: list, table: object) -> list:
        raise ValueError("an argument has no recorded value")

    monkeypatch.setattr(decomposed_coverage, "_trace_calls", untraceable)
    ep = _export(*models.mlp())
    received = received_ops(ep, ["aten.linear.default"], torchair_table())
    assert {"aten.addmm.default", "aten.mm.default"} & set(received["aten.linear.default"])


def test_a_failed_decomposition_is_reported_with_its_real_error_not_a_guessed_op(monkeypatch) -> None:
    """Whatever op the graph holds, the warning carries run_decompositions' own exception and its root cause."""

    def fail(program: torch.export.ExportedProgram, ops: list) -> None:
        try:
            raise ValueError("Cannot view a tensor with shape [2, 3] as [4]")
        except ValueError as cause:
            raise RuntimeError("Please check the warnings above") from cause

    monkeypatch.setattr(decomposed_coverage, "_judge_torchair", fail)
    program = _export(*models.mlp())
    ops = [{"name": "aten.linear.default", "coverage": {"inductor": "decomposed", "torchair": "supported"}}]
    (warning,) = decomposed_coverage.judge_on_received_ops(program, ops)  # type: ignore[arg-type]
    assert warning == (
        "coverage is judged on the exported ops themselves: decomposing the graph failed (RuntimeError: Please "
        "check the warnings above; caused by ValueError: Cannot view a tensor with shape [2, 3] as [4])"
    )


def test_an_op_decomposed_into_ops_without_a_working_converter_names_them(monkeypatch) -> None:
    """TorchAir's verdict on a decomposed op is the worst of what it becomes, and the note names the ops that have
    no working GE converter; one that stays whole, or could not be traced back, keeps the table's answer."""
    received = {
        "aten.decomposes.default": ["aten.add.Tensor", "aten.definitely_not_an_op.default", "aten.mm.default"],
        "aten.whole.default": ["aten.whole.default"],
        "aten.untraced.default": None,
    }
    monkeypatch.setattr(decomposed_coverage, "received_ops", lambda program, names, table: received)
    monkeypatch.setattr(decomposed_coverage, "_decomposed", lambda name, table: True)
    ops = [{"name": name, "coverage": {"torchair": "supported"}} for name in received]
    decomposed_coverage._judge_torchair(None, ops)  # type: ignore[arg-type]
    assert ops[0]["coverage"] == {
        "torchair": "none",
        "torchair_via": ["aten.add.Tensor", "aten.definitely_not_an_op.default", "aten.mm.default"],
        "torchair_note": "decomposed before TorchAir: no working GE converter for aten.definitely_not_an_op.default",
    }
    assert ops[1]["coverage"] == ops[2]["coverage"] == {"torchair": "supported"}
