"""What `inspect_model` tells a user about each test model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from advisor.core.decision.engine import decide
from advisor.harness import coverage
from advisor.harness.graph_breaks import find_graph_breaks
from advisor.harness.inspection import inspect_model
from tests.support import models
from tests.support.forked_script import run_script

TESTS = Path(__file__).resolve().parents[1]
SUPPORT = TESTS / "support"  # where the subprocess scripts `import models`
TOP_LEVEL_KEYS = {"format", "saved_with_torch", "parameters", "flops", "inputs", "ops", "custom_ops", "graph_breaks"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inspect")


def _ops(result: dict) -> dict[str, int]:
    return {op["name"]: op["count"] for op in result["ops"]}


def _op(result: dict, name: str) -> dict:
    return next(op for op in result["ops"] if op["name"] == name)


def assert_judged_on_received_ops(op: dict) -> None:
    """A decomposed op's TorchAir status is the worst of the table's statuses of the ops TorchAir receives."""
    via = op["coverage"]["torchair_via"]
    assert via and op["name"] not in via
    assert op["coverage"]["torchair"] == coverage.worst_torchair_status(map(coverage.torchair_status, via))


def _own_counts(module: torch.nn.Module, inputs: tuple) -> tuple[int, int]:
    """(parameter count, forward FLOPs) measured on the original module, for comparison."""
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        module(*inputs)
    return sum(p.numel() for p in module.parameters()), counter.get_total_flops()


def test_mlp(folder: Path) -> None:
    module, inputs = models.mlp()
    result = inspect_model(models.export_to(folder / "mlp.pt2", module, inputs))
    assert TOP_LEVEL_KEYS | {"dynamic_dims", "runnable", "warnings"} <= result.keys()
    assert _ops(result) == {"aten.linear.default": 3, "aten.relu.default": 2}
    params, flops = _own_counts(module, inputs)
    assert result["parameters"] == {"count": params, "bytes": params * 4}
    assert result["flops"] == flops
    assert result["graph_breaks"] == {"analysed": True, "count": 0, "graph_count": 1, "reasons": []}
    assert result["custom_ops"] == []
    linear = _op(result, "aten.linear.default")
    assert_judged_on_received_ops(linear)
    assert {"aten.addmm.default", "aten.mm.default"} & set(linear["coverage"]["torchair_via"])
    assert linear["coverage"]["torchair"] in ("supported", "partial")
    assert {"aten.addmm.default", "aten.mm.default"} & set(linear["coverage"]["inductor_via"])
    assert "torchair_via" not in _op(result, "aten.relu.default")["coverage"]  # not decomposed: the table answers
    json.dumps(result)  # one JSON-serializable result


def test_decide_does_not_count_decomposed_ops_as_uncovered(folder: Path) -> None:
    assert coverage.torchair_status("aten.linear.default") in ("none", "stub")  # the exported op itself has none
    result = inspect_model(models.export_to(folder / "mlp_decide.pt2", *models.mlp()))
    recommendation = decide({"target": "npu"}, result, None)
    assert "linear" not in recommendation["why_not"].get("torchair:max-autotune", "")
    assert not [c for c in recommendation["caveats"] if "linear" in c["issue"]]


def test_cnn(folder: Path) -> None:
    module, inputs = models.cnn()
    result = inspect_model(models.export_to(folder / "cnn.pt2", module, inputs))
    ops = _ops(result)
    assert ops["aten.conv2d.default"] == 2
    assert ops["aten.batch_norm.default"] == 2
    params, flops = _own_counts(module, inputs)
    assert result["parameters"]["count"] == params
    assert result["flops"] == flops
    linear = _op(result, "aten.linear.default")
    assert linear["coverage"]["inductor"] == coverage.inductor_status(torch.ops.aten.linear.default)
    for name in ("aten.conv2d.default", "aten.batch_norm.default", "aten.linear.default"):
        assert_judged_on_received_ops(_op(result, name))
    assert "aten.convolution.default" in _op(result, "aten.conv2d.default")["coverage"]["torchair_via"]


def test_bert_dynamic_batch(folder: Path) -> None:
    module, inputs = models.tiny_bert()
    result = inspect_model(models.export_dynamic_batch(folder / "bert.pt2", module, inputs, max_batch=8))
    assert result["parameters"]["count"] == sum(p.numel() for p in module.parameters())
    assert [spec["dtype"] for spec in result["inputs"]] == ["int64", "int64"]
    assert {(d["input"], d["dim"], d["min"], d["max"]) for d in result["dynamic_dims"]} == {
        ("input_ids", 0, 1, 8),
        ("attention_mask", 0, 1, 8),
    }
    assert result["flops"] and result["flops"] > 0
    assert result["graph_breaks"]["count"] == 0
    assert_judged_on_received_ops(_op(result, "aten.layer_norm.default"))
    check = _op(result, "aten._assert_tensor_metadata.default")["coverage"]  # export-only: nothing to convert
    assert check["torchair_via"] == [] and check["torchair"] == "supported" and "export" in check["torchair_note"]
    for op in result["ops"]:
        assert ("inductor_via" in op["coverage"]) == (op["coverage"]["inductor"] == "decomposed")
    sdpa_name = "aten.scaled_dot_product_attention.default"
    sdpa = _op(result, sdpa_name)["coverage"]
    cpu_kernels = [name for name in sdpa["inductor_via"] if "_for_cpu" in name]
    assert cpu_kernels  # sdpa's decomposition picks a kernel for the device it is traced on: not judged on it
    assert "torchair_via" not in sdpa and sdpa["torchair"] == coverage.torchair_status(sdpa_name)
    assert cpu_kernels[0] in sdpa["torchair_note"] and "NPU" in sdpa["torchair_note"]
    fallbacks = [name for name in sdpa["inductor_via"] if coverage.inductor_status(name) == "fallback"]
    for name in fallbacks:  # visible although the op itself is only "decomposed"
        assert any(name in warning and "fallback" in warning for warning in result["warnings"])


def test_registered_npu_op_is_listed_with_coverage(folder: Path) -> None:
    module, inputs = models.npu_op_model(with_fake=True)
    result = inspect_model(models.export_to(folder / "npu.pt2", module, inputs))
    (custom,) = result["custom_ops"]
    assert custom["name"] == "npu.test_rms_norm.default" and custom["namespace"] == "npu"
    assert custom["has_fake_kernel"] is True
    assert custom["coverage"]["inductor"] == "fallback"  # no lowering: Inductor calls the op's own kernel
    assert custom["coverage"]["torchair"] == coverage.torchair_status("npu.test_rms_norm.default")
    assert "torchair_via" not in custom["coverage"] and "inductor_via" not in custom["coverage"]  # not decomposed
    assert custom["coverage"].get("torchair_note") == coverage.torchair_note("npu.test_rms_norm.default")
    assert_judged_on_received_ops(_op(result, "aten.linear.default"))
    assert result["runnable"] == {"ok": True, "reason": None}
    assert result["graph_breaks"]["count"] == 0


def test_npu_op_without_fake_kernel_is_untraceable(folder: Path) -> None:
    module, inputs = models.npu_op_model(with_fake=False)
    with torch.no_grad():
        program = torch.export.draft_export(module, inputs)  # plain export refuses an op without a fake kernel
    path = folder / "nofake.pt2"
    torch.export.save(program, str(path))
    result = inspect_model(str(path))
    (custom,) = result["custom_ops"]
    assert custom["has_fake_kernel"] is False
    assert custom["coverage"]["inductor"] == "untraceable"
    assert any("npu.test_rms_norm_nofake.default has no known fake" in warning for warning in result["warnings"])
    # torch.compile breaks the graph around the op and still decomposes the linear layers in the graphs on either
    # side: each call is decomposed on its own, so the op without a fake kernel does not hide what linear becomes
    assert not any("decomposing the graph failed" in warning for warning in result["warnings"])
    assert_judged_on_received_ops(_op(result, "aten.linear.default"))
    breaks = result["graph_breaks"]
    if breaks["analysed"]:  # this torch breaks the graph around the op; older ones fail the compile outright
        assert breaks["count"] >= 1 and "fake" in breaks["reasons"][0]["reason"]
    else:
        assert "fake" in breaks["note"]


def test_npu_op_unknown_here_is_inspected_from_stubs(folder: Path) -> None:
    path = folder / "npu_sub.pt2"
    script = (
        "import sys, torch, models\n"
        "models.register_npu_rms_norm('inspect_rms_norm')\n"
        "models.export_to(sys.argv[1], models.NpuOpModel('inspect_rms_norm').eval(), (torch.randn(4, 32),))\n"
    )
    run_script(script, cwd=SUPPORT, argv=[str(path)])
    result = inspect_model(str(path))
    assert [op["name"] for op in result["custom_ops"]] == ["npu.inspect_rms_norm.default"]
    assert result["runnable"]["ok"] is False
    assert "npu.inspect_rms_norm.default" in result["runnable"]["reason"]
    assert result["graph_breaks"]["analysed"] is False
    assert "not possible here" in result["graph_breaks"]["note"]
    assert result["flops"] and result["flops"] > 0  # counted on fake tensors through the stub
    assert_judged_on_received_ops(_op(result, "aten.linear.default"))  # decomposed through the stub too


def test_graph_break_reason_and_location() -> None:
    module, inputs = models.graph_break()
    breaks = find_graph_breaks(module, inputs)
    assert breaks["count"] == 1 and breaks["graph_count"] == 2
    (item,) = breaks["reasons"]
    assert "item()" in item["reason"]
    source = Path(models.__file__).read_text().splitlines()
    line = next(number for number, text in enumerate(source, 1) if "if y.sum().item()" in text)
    assert item["location"] == f"models.py:{line} in forward"


def test_torchscript_that_cannot_be_converted_lists_its_graph_ops(folder: Path) -> None:
    module, inputs = models.graph_break()
    path = folder / "scripted.pt"
    torch.jit.save(torch.jit.script(module), str(path))  # .item() control flow: TS2EPConverter fails on it
    result = inspect_model(str(path), input_shapes=["x=4x16"])
    assert result["format"] == "torchscript"
    assert _ops(result)["aten.linear.default"] == 2
    assert "aten.item.default" in _ops(result)
    linear = _op(result, "aten.linear.default")["coverage"]  # no exported graph to decompose: the table answers
    assert "torchair_via" not in linear and linear["torchair"] == coverage.torchair_status("aten.linear.default")
    assert linear.get("torchair_note") == coverage.torchair_note("aten.linear.default")
    breaks = result["graph_breaks"]
    assert breaks["analysed"] is False and "could not be converted" in breaks["note"]
    assert result["parameters"]["count"] == sum(p.numel() for p in module.parameters())


def test_no_exporter_paths_leak(folder: Path) -> None:
    module, inputs = models.npu_op_model()
    result = inspect_model(models.export_to(folder / "leak.pt2", module, inputs))
    text = json.dumps(result)
    assert str(TESTS) not in text and "stack_trace" not in text
