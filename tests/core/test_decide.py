"""Scenario tests: each reproduces one path through the selection tree, from synthetic inspections and runs."""

from __future__ import annotations

from typing import Any

import pytest

from advisor.core.decision.engine import ENGINE_VERSION, decide
from tests.support.fixtures_decide import blog_run, inspection, measurement, npu_op_inspection, op, run


def rules(rec: dict[str, Any]) -> list[str]:
    return [step["rule"] for step in rec["path"]]


SCENARIOS = [
    pytest.param(
        {"stage": "prototype", "model_changes": "frequent"},
        inspection(),
        blog_run(),
        ("inductor", "default"),
        "prototype_prefers_fast_compile",
        id="prototype-frequent-changes-inductor",
    ),
    pytest.param(
        {"stage": "production", "model_changes": "frozen"},
        npu_op_inspection(),
        blog_run(),
        ("torchair", "max-autotune"),
        "npu_custom_ops_favour_torchair",
        id="production-npu-ops-torchair",
    ),
    pytest.param(
        {"stage": "edge"},
        inspection(),
        blog_run(),
        ("torchair", "dynamo_export"),
        "edge_prefers_export_path",
        id="edge-npu-export-path",
    ),
    pytest.param(
        {"stage": "production", "target": "cpu", "needs_offline_export": True},
        inspection(),
        run(
            measurement("eager", median_ms=2.0, device="cpu"),
            measurement("inductor", median_ms=1.5, compile_s=9.0, device="cpu"),
            measurement("onnxruntime", median_ms=1.8, compile_s=2.0, device="cpu"),
            device="cpu",
        ),
        ("onnxruntime", "default"),
        "edge_prefers_export_path",
        id="offline-export-cpu-onnx",
    ),
    pytest.param(
        {"fleet": "mixed", "stage": "production"},
        inspection(),
        blog_run(),
        ("torchair", "max-autotune"),
        "mixed_fleet_layered",
        id="mixed-fleet-layered",
    ),
]


@pytest.mark.parametrize(("context", "insp", "measurements", "expected", "rule"), SCENARIOS)
def test_tree_paths(context: dict, insp: dict, measurements: dict, expected: tuple[str, str], rule: str) -> None:
    rec = decide(context, insp, measurements)
    assert (rec["backend"], rec["mode"]) == expected
    assert rule in rules(rec)
    assert rec["measured"] is True
    assert rec["engine_version"] == ENGINE_VERSION
    assert rec["summary"].startswith("Use ")
    for step in rec["path"]:
        assert step["question"] and step["outcome"] and isinstance(step["evidence"], dict)


def test_mixed_fleet_is_layered_inductor_for_development_torchair_for_production() -> None:
    rec = decide({"fleet": "mixed"}, inspection(), blog_run())
    assert rec["layered"]["development"]["backend"] == "inductor"
    assert rec["layered"]["production"] == {**rec["layered"]["production"], "backend": "torchair", "devices": ["npu"]}
    assert "Development nodes" in rec["snippet"] and "Production nodes" in rec["snippet"]
    assert "torchair.get_npu_backend" in rec["snippet"] and "torch.compile(model" in rec["snippet"]


def test_strong_npu_op_case_is_recorded_with_its_evidence() -> None:
    rec = decide({"stage": "production"}, npu_op_inspection(), blog_run())
    step = next(s for s in rec["path"] if s["rule"] == "npu_custom_ops_favour_torchair")
    assert step["evidence"]["npu_ops"] == ["npu.npu_rms_norm.default"]
    assert step["evidence"]["inductor_cannot_trace"] == ["npu.npu_rms_norm.default"]
    assert "strong case for TorchAir" in step["outcome"]
    assert any("register_fake" in c["fix"] for c in rec["caveats"])


def test_torchair_fail_accuracy_falls_back_to_inductor_with_why_not() -> None:
    measurements = run(
        measurement("eager", median_ms=20.0),
        measurement("inductor", median_ms=12.4, compile_s=3.2),
        measurement("torchair", mode="max-autotune", status="fail_accuracy", reason="max abs err 0.3 > atol 1e-5"),
    )
    rec = decide({"stage": "production"}, inspection(), measurements)
    assert (rec["backend"], rec["mode"]) == ("inductor", "default")
    assert rec["why_not"]["torchair:max-autotune"].startswith("failed the accuracy check: max abs err 0.3")
    assert "torchair:max-autotune" in rec["path"][1]["evidence"]["excluded"]


def test_nothing_usable_says_no_backend_qualifies_with_reasons() -> None:
    measurements = run(
        measurement("eager", median_ms=20.0, memory_mb=900),
        measurement("inductor", status="compile_error", reason="InvalidCxxCompiler: No working C++ compiler"),
        measurement("torchair", mode="max-autotune", median_ms=8.0, memory_mb=2000),
    )
    rec = decide({"memory_budget_mb": 512}, inspection(), measurements)
    assert rec["backend"] is None and rec["mode"] is None
    assert rec["summary"].startswith("No backend qualifies")
    assert "over the memory budget: peak 900 MiB > 512 MiB" in rec["why_not"]["eager:default"]
    assert "No working C++ compiler" in rec["why_not"]["inductor:default"]
    assert "over the memory budget" in rec["why_not"]["torchair:max-autotune"]
    assert "No backend qualifies" in rec["snippet"]


def test_latency_target_is_checked_against_p99() -> None:
    # torchair's median (8.2) is under 8.5 ms but its p99 (9.02) is not
    rec = decide({"latency_target_ms": 8.5}, inspection(), blog_run())
    assert rec["backend"] is None
    assert "p99 9.02 ms > 8.5 ms" in rec["why_not"]["torchair:max-autotune"]
    rec = decide({"latency_target_ms": 10.0}, inspection(), blog_run())
    assert rec["backend"] == "torchair"


def test_overlapping_confidence_intervals_are_a_tie_won_by_the_faster_compiling_option() -> None:
    measurements = run(
        measurement("eager", median_ms=20.0),
        measurement("inductor", median_ms=10.0, compile_s=3.0, spread=0.1),
        measurement("torchair", mode="max-autotune", median_ms=9.8, compile_s=30.0, spread=0.1),
    )
    rec = decide({"stage": "production", "expected_calls_per_compile": 10**7}, inspection(), measurements)
    assert rec["backend"] == "inductor" and rec["tie"] is True
    assert "noise_is_a_tie" in rules(rec)
    assert "as fast within the measured noise" in rec["why_not"]["torchair:max-autotune"]
    assert "tied" in rec["summary"]


def test_compiling_that_does_not_beat_eager_recommends_eager() -> None:
    measurements = run(
        measurement("eager", median_ms=0.15, device="cpu"),
        measurement("inductor", median_ms=0.25, compile_s=9.0, device="cpu"),
        device="cpu",
    )
    rec = decide({"stage": "production", "target": "cpu"}, inspection(), measurements)
    assert rec["backend"] == "eager"
    assert rec["why_not"]["inductor:default"].startswith("slower than eager:default")


def test_inspection_only_gives_an_unmeasured_lower_confidence_recommendation() -> None:
    rec = decide({"stage": "production"}, npu_op_inspection(), None)
    assert rec["measured"] is False
    assert (rec["backend"], rec["mode"]) == ("torchair", "max-autotune")
    assert rec["confidence"] == "medium"  # strong coverage case, but no numbers
    assert "unmeasured" in rec["summary"]
    plain = decide({"stage": "prototype"}, inspection(), None)
    assert plain["backend"] == "inductor" and plain["confidence"] == "low" and plain["measured"] is False


def test_measurements_from_another_device_are_not_used_for_the_target() -> None:
    cpu_run = run(measurement("eager", median_ms=1.0), measurement("inductor", median_ms=0.5), device="cpu")
    rec = decide({"target": "npu"}, inspection(), cpu_run)
    assert rec["measured"] is False
    assert any("taken on cpu, not on the target (npu)" in c["issue"] for c in rec["caveats"])


def test_uncovered_ops_exclude_torchair_ge_when_unmeasured() -> None:
    insp = inspection(ops=[op("aten.linear.default"), op("aten.amax.default", torchair="stub")])
    rec = decide({"stage": "production"}, insp, None)
    assert rec["backend"] == "inductor"
    assert "aten.amax.default" in rec["why_not"]["torchair:max-autotune"]


def test_test_double_numbers_are_never_presented_as_npu_measured() -> None:
    rec = decide({"stage": "production"}, inspection(), blog_run(measured_on="test-double"))
    assert rec["backend"] == "torchair" and rec["confidence"] == "low"
    assert "test double" in rec["summary"] and "measured on a real NPU" not in rec["summary"]
    real = decide({"stage": "production"}, inspection(), blog_run())
    assert "measured on a real NPU" in real["summary"]


def test_export_blocked_by_graph_breaks_falls_back_with_caveat() -> None:
    insp = inspection(graph_breaks=[{"reason": "Tensor.item() call", "location": "model.py:12 in forward"}])
    rec = decide({"stage": "edge"}, insp, blog_run())
    assert rec["mode"] != "dynamo_export"
    assert "blocked" in rec["path"][2]["outcome"]
    issues = " ".join(c["issue"] for c in rec["caveats"])
    assert "Graph break at model.py:12 in forward: Tensor.item() call" in issues
    assert "offline export path is blocked" in issues


def test_dynamic_shapes_and_cache_caveats_name_the_real_fixes() -> None:
    insp = inspection(dynamic_dims=[{"input": "x", "dim": 0, "symbol": "s0", "min": 1, "max": 64}])
    rec = decide({"stage": "production"}, insp, blog_run())
    fixes = " ".join(c["fix"] for c in rec["caveats"])
    assert "torchair.inference.set_dim_gears" in fixes and "torch._dynamo.mark_dynamic" in fixes
    assert "torchair.inference.cache_compile" in fixes
    proto = decide({"stage": "prototype", "target": "cpu"}, insp, None)
    assert "torch._dynamo.mark_dynamic" in " ".join(c["fix"] for c in proto["caveats"])


def test_accepts_a_context_dict_or_model_and_rejects_bad_context() -> None:
    from advisor.core.context import ContextError, parse_context

    assert decide(parse_context({}), inspection(), blog_run()) == decide({}, inspection(), blog_run())
    with pytest.raises(ContextError):
        decide({"stage": "nope"}, inspection(), blog_run())


# The note advisor/harness/decomposed_coverage.py writes for sdpa inspected on a CPU host (inspections stored before the
# torchair_unknown marker carry only this note).
SDPA_PER_DEVICE_NOTE = (
    "decomposes per device: on this CPU into aten._scaled_dot_product_flash_attention_for_cpu.default, which "
    "TorchAir never sees; on an NPU torch_npu picks the kernel when the graph is traced, so GE coverage of this op "
    "is only known there (measure it on an NPU node)"
)


@pytest.mark.parametrize(
    "sdpa",
    [
        pytest.param(op("aten.scaled_dot_product_attention.default", torchair="none", unknown=True), id="marker"),
        pytest.param(
            op("aten.scaled_dot_product_attention.default", torchair="none", note=SDPA_PER_DEVICE_NOTE), id="note"
        ),
    ],
)
def test_device_dependent_coverage_is_unknown_not_uncovered(sdpa: dict) -> None:
    rec = decide({"stage": "production"}, inspection(ops=[op("aten.linear.default"), sdpa]), None)
    assert (rec["backend"], rec["mode"]) == ("torchair", "max-autotune")  # GE mode is not excluded
    assert "torchair:max-autotune" not in rec["path"][1]["evidence"]["excluded"]
    caveat = next(c for c in rec["caveats"] if "scaled_dot_product_attention" in c["issue"])
    assert "unknown until measured on an NPU" in caveat["issue"] and "Measure on an NPU node" in caveat["fix"]
    assert not any("compile fails" in c["issue"] for c in rec["caveats"])
    edge = decide({"stage": "edge"}, inspection(ops=[op("aten.linear.default"), sdpa]), None)
    assert edge["mode"] == "dynamo_export"  # unknown coverage does not block the export path either


def test_unknown_op_next_to_an_uncovered_one_excludes_ge_for_the_uncovered_one_only() -> None:
    ops = [
        op("aten.scaled_dot_product_attention.default", torchair="none", unknown=True),
        op("aten.amax.default", torchair="stub"),
    ]
    rec = decide({"stage": "production"}, inspection(ops=ops), None)
    reason = rec["why_not"]["torchair:max-autotune"]
    assert "aten.amax.default" in reason and "scaled_dot_product_attention" not in reason


def test_unknown_coverage_caveat_is_dropped_once_measured_on_a_real_npu() -> None:
    insp = inspection(ops=[op("aten.scaled_dot_product_attention.default", torchair="none", unknown=True)])
    rec = decide({"stage": "production"}, insp, blog_run())
    assert rec["backend"] == "torchair"
    assert not any("unknown until measured" in c["issue"] for c in rec["caveats"])
