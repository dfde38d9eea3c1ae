"""Where the time goes: the profiled pass after each variant's timed window, measured in the real children."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from advisor.harness.measurement import TimingPolicy, measure_model  # noqa: E402
from advisor.harness.measurement.profiler_pass import TOP, profile_calls, summarise  # noqa: E402
from tests.support.models import export_to, pairwise_distance  # noqa: E402

FAST = TimingPolicy(min_iters=10, min_time_s=0.05, max_time_s=0.3, warmup_iters=2, warm_cache=False, dynamic_sizes=0)


def test_eager_shows_its_ops_and_inductor_its_kernels_and_the_op_it_fell_back_to(tmp_path):
    model_file = export_to(tmp_path / "pairwise.pt2", *pairwise_distance())
    run = measure_model(model_file, backends=["inductor:default"], timing=FAST, timeout_s=300, remeasure=False)
    rows = {row["backend"]: row for row in run["measurements"]}
    eager, inductor = rows["eager"]["time_breakdown"], rows["inductor"]["time_breakdown"]
    assert rows["inductor"]["status"] == "ok", rows["inductor"]["reason"]
    for breakdown in (eager, inductor):
        assert breakdown["calls"] >= 3 and breakdown["total_ms_per_call"] > 0
        shares = [entry["share"] for entry in breakdown["entries"]]
        assert shares == sorted(shares, reverse=True) and len(shares) <= TOP
        assert sum(shares) + breakdown["other_share"] == pytest.approx(1.0, abs=1e-6)
    eager_ops = {entry["name"]: entry["kind"] for entry in eager["entries"]}
    assert eager_ops["aten::_cdist_forward"] == "op" and "aten::addmm" in eager_ops
    assert eager["fused_kernels"] is None  # eager generates no kernels
    kinds = {entry["name"]: entry["kind"] for entry in inductor["entries"]}
    # relu + sum become one generated C++ kernel; cdist has no Inductor lowering and runs as its eager kernel
    assert inductor["fused_kernels"] >= 1 and "kernel" in kinds.values()
    assert any("cpp_fused" in name for name, kind in kinds.items() if kind == "kernel")
    assert inductor["fallback_ops"] == ["aten::_cdist_forward"] and kinds["aten::_cdist_forward"] == "fallback"
    assert "aten::relu" not in kinds  # fused away
    assert {"runtime", "aten call"} <= set(kinds.values())


def test_summary_keeps_the_top_entries_and_classifies_them():
    events = [(f"aten::op{i}", 1, float(100 - i)) for i in range(20)]
    events += [("aten::_cdist_forward", 2, 50.0), ("graph_0_cpp_fused_relu_sum_0", 1, 5.0), ("aten::empty", 1, 0.0)]
    events += [("## Call CompiledFxGraph abc123 ##", 1, 99.5), ("Torch-Compiled Region: 0/0", 1, 40.0)]
    summary = summarise(events, calls=2, device="cpu")
    assert len(summary["entries"]) == TOP
    total = sum(us for _, _, us in events)
    top = summary["entries"][0]
    assert top == {
        "name": "aten::op0",
        "kind": "aten call",
        "ms_per_call": 0.05,
        "share": 100 / total,
        "count_per_call": 0.5,
    }
    names = [entry["name"] for entry in summary["entries"]]
    assert "Call CompiledFxGraph" in names  # the per-compile hash is dropped from the name
    assert summary["fused_kernels"] == 1 and summary["fallback_ops"] == ["aten::_cdist_forward"]
    assert summary["other_share"] == pytest.approx(1 - sum(e["share"] for e in summary["entries"]))
    # an op that only ever runs inside another aten op (a convolution's output resize) is not the compiler's fallback
    nested = summarise(events, calls=2, device="cpu", called_directly={"aten::op0"})
    assert nested["fallback_ops"] == [] and {e["kind"] for e in nested["entries"] if "cdist" in e["name"]} <= {
        "aten call"
    }
    eager = summarise([("aten::addmm", 1, 10.0), ("aten::relu", 1, 5.0)], calls=1, device="cpu")
    assert {e["kind"] for e in eager["entries"]} == {"op"} and eager["fused_kernels"] is None
    assert eager["fallback_ops"] == [] and eager["note"] is None


def test_an_eager_profile_is_summarised_without_inductors_fallback_table(monkeypatch):
    """Only a compiled callable's aten calls are told apart as fallbacks: an eager or ONNX Runtime child's summary
    never imports Inductor's lowering table (~0.8 s in a child whose zygote did not import Inductor)."""
    import advisor.harness.measurement.profiler_pass as profiler_pass

    asked: list[bool] = []

    def fallbacks() -> frozenset[str]:
        asked.append(True)
        return frozenset({"_cdist_forward"})

    monkeypatch.setattr(profiler_pass, "_inductor_fallbacks", fallbacks)
    eager = summarise([("aten::_cdist_forward", 1, 10.0)], calls=1, device="cpu")
    assert asked == [] and eager["entries"][0]["kind"] == "op"
    compiled = summarise([("cpp_fused_add_0", 1, 5.0), ("aten::_cdist_forward", 1, 10.0)], calls=1, device="cpu")
    assert asked == [True] and compiled["fallback_ops"] == ["aten::_cdist_forward"]


def test_what_the_profiler_cannot_see_is_said():
    assert "outside PyTorch's profiler" in summarise([], calls=3, device="cpu")["note"]
    only_runtime = summarise([("InferenceSession.run", 3, 30.0)], calls=3, device="cpu")
    assert "its own kernels run outside" in only_runtime["note"]
    assert "torch_npu's profiler" in summarise([("aten::addmm", 1, 1.0)], calls=1, device="npu")["note"]


def test_profiled_calls_last_about_a_quarter_second_within_bounds():
    assert profile_calls(0.05) == 5 and profile_calls(2.0) == 3  # a quarter second, at least 3 calls
    assert profile_calls(1e-6) == profile_calls(0) == 20  # small models: at most 20 (reading events back is costly)


def test_on_cuda_kernels_are_either_generated_or_library_ones():
    summary = summarise([("triton_poi_fused_add_0", 10, 5.0), ("ampere_sgemm_128x64_tn", 10, 15.0)], 10, "cuda")
    assert [(e["name"], e["kind"]) for e in summary["entries"]] == [
        ("ampere_sgemm_128x64_tn", "library kernel"),
        ("triton_poi_fused_add_0", "kernel"),
    ]
    assert summary["fused_kernels"] == 1 and summary["source"] == "torch.profiler, device (kernel) time"
