"""Issue 31 item 4: the edge branch ships the export float or int8, by measured latency, size and drift against the
context's limits (advisor/core/decision/edge_rules.py), on recorded measurements. Torch-free.
"""

from __future__ import annotations

from typing import Any

from advisor.core.decision.engine import decide
from tests.support.fixtures_decide import inspection, measurement, op, run

MIB = 2**20
DRIFT = {"cosine": 0.995, "max_abs_err": 0.02, "mean_abs_err": 0.004, "top1_agreement": 1.0, "top1_rows": 8}


def _rows(
    *, float_ms: float = 8.0, int8_ms: float = 4.0, float_mib: float = 40, int8_mib: float = 11, drift: dict = DRIFT
) -> dict[str, Any]:
    """eager, Inductor, the float ONNX export and its int8 export, timed side by side with eager (10 ms)."""
    eager = measurement("eager", median_ms=10.0, device="cpu")
    inductor = measurement("inductor", median_ms=7.0, eager_ms=10.0, device="cpu")
    onnx = measurement("onnxruntime", median_ms=float_ms, eager_ms=10.0, compile_s=5.0, device="cpu")
    int8 = measurement("onnxruntime", mode="int8", median_ms=int8_ms, eager_ms=10.0, compile_s=8.0, device="cpu")
    int8["accuracy"] = {**int8["accuracy"], "max_abs_err": 0.02, "quantized": {**drift, "allclose": False}}
    for row, mib in ((eager, 40), (inductor, 40), (onnx, float_mib), (int8, int8_mib)):
        row["serialized_bytes"], row["peak_memory_mb"] = int(mib * MIB), 2.0  # RSS growth above the loaded model
    return run(eager, inductor, onnx, int8, device="cpu")


EDGE = {"target": "cpu", "stage": "edge"}


def _edge_step(rec: dict) -> dict:
    return next(step for step in rec["path"] if step["rule"] == "edge_quantization")


def _chosen(rec: dict) -> str:
    return f"{rec['backend']}:{rec['mode']}"


def test_a_faster_smaller_int8_export_within_the_drift_is_shipped_with_reasons_break_even_and_snippet() -> None:
    rec = decide(EDGE, None, _rows())
    assert _chosen(rec) == "onnxruntime:int8"
    outcome = _edge_step(rec)["outcome"]
    assert outcome.startswith("Ship the int8 export onnxruntime:int8: it runs faster beyond the noise")
    assert "deployed size 11 MiB int8 vs 40 MiB float, 0.28x" in outcome
    assert "cosine 0.9950 >= min_cosine 0.99" in outcome and "top-1 agreement 100% of 8 rows >= 0.9" in outcome
    # the float export's why-not says why its int8 twin won (not "an online (JIT) compile")
    assert rec["why_not"]["onnxruntime:default"].startswith("not shipped: the int8 export onnxruntime:int8 wins")
    assert "JIT" not in rec["why_not"]["onnxruntime:default"]
    assert "is an online (JIT) compile, not an export" in rec["why_not"]["inductor:default"]
    # break-even: 3 s more of export + quantization, paid back by 2 ms per call (eager 10 ms / 1.25x vs / 2.5x)
    be = rec["break_even"]
    assert (be["fast_compile"], be["fast_run"]) == ("onnxruntime:default", "onnxruntime:int8")
    assert abs(be["n_star"] - 3000.0 / 4.0) < 1e-6 and be["decided"] is False
    # the snippet reproduces the int8 model: export, calibration reader, quantize_static / quantize_dynamic
    assert "torch.onnx.export(" in rec["snippet"] and "class Calibration(CalibrationDataReader)" in rec["snippet"]
    assert "quantize_static(" in rec["snippet"] and "quantize_dynamic(" in rec["snippet"]
    assert "Ship the int8 export" in rec["summary"]


def test_within_the_noise_the_float_export_is_shipped_unless_the_device_is_resource_constrained() -> None:
    close = _rows(float_ms=8.0, int8_ms=7.9)  # 1.3 % apart, +-2 % intervals: not ranked
    rec = decide(EDGE, None, close)
    assert _chosen(rec) == "onnxruntime:default"
    outcome = _edge_step(rec)["outcome"]
    assert "the int8 export runs no faster beyond the noise" in outcome
    assert "not resource_constrained, so size alone does not buy the drift" in outcome
    assert rec["why_not"]["onnxruntime:int8"].startswith("not shipped: the float export onnxruntime:default wins")

    rec = decide({**EDGE, "resource_constrained": True}, None, close)
    assert _chosen(rec) == "onnxruntime:int8"
    outcome = _edge_step(rec)["outcome"]
    assert "resource_constrained: the smaller deployed model wins (deployed size 11 MiB int8 vs 40 MiB" in outcome
    assert "their latencies are within the noise" in outcome

    # an int8 export that is not smaller (a tiny model: the quantization parameters outweigh its weights)
    rec = decide({**EDGE, "resource_constrained": True}, None, _rows(float_ms=8.0, int8_ms=7.9, int8_mib=41))
    assert _chosen(rec) == "onnxruntime:default"
    assert "and is not the smaller one" in _edge_step(rec)["outcome"]


def test_a_slower_int8_export_is_shipped_only_on_a_resource_constrained_device_saying_what_it_costs() -> None:
    slow = _rows(float_ms=5.0, int8_ms=8.0)
    rec = decide(EDGE, None, slow)
    assert _chosen(rec) == "onnxruntime:default"
    assert "the float export runs faster beyond the noise" in _edge_step(rec)["outcome"]
    assert rec["break_even"]["n_star"] is None  # int8 never pays its quantization back

    rec = decide({**EDGE, "resource_constrained": True}, None, slow)
    assert _chosen(rec) == "onnxruntime:int8"
    assert "it runs slower (" in _edge_step(rec)["outcome"]
    # ... but not past the context's latency target: the hard filter removes it first
    rec = decide({**EDGE, "resource_constrained": True, "latency_target_ms": 8.5}, None, slow)
    assert _chosen(rec) == "onnxruntime:default"
    assert rec["why_not"]["onnxruntime:int8"].startswith("over the latency target: p99 8.8 ms > 8.5 ms")
    assert _edge_step(rec)["outcome"].startswith("The int8 export is out (over the latency target")


def test_an_int8_export_beyond_the_tolerated_drift_leaves_the_float_export_with_that_reason() -> None:
    strict = {**EDGE, "resource_constrained": True, "accuracy_tolerance": {"quantized": {"min_cosine": 0.999}}}
    rec = decide(strict, None, _rows())
    assert _chosen(rec) == "onnxruntime:default"
    assert _edge_step(rec)["outcome"] == (
        "The int8 export is out (failed the accuracy check: int8 drift beyond accuracy_tolerance.quantized: cosine "
        "similarity to the float model 0.9950 < min_cosine 0.999): ship the float export onnxruntime:default."
    )
    flipped = {**DRIFT, "top1_agreement": 0.75}
    rec = decide(EDGE, None, _rows(drift=flipped))
    assert _chosen(rec) == "onnxruntime:default"
    assert (
        "top-1 agreement with the float model 75% of 8 rows < min_top1_agreement 0.9"
        in rec["why_not"]["onnxruntime:int8"]
    )


def test_a_float_export_over_the_memory_budget_leaves_the_int8_export_as_the_export_path() -> None:
    rec = decide({**EDGE, "memory_budget_mb": 32}, None, _rows(float_ms=5.0, int8_ms=8.0))
    assert _chosen(rec) == "onnxruntime:int8"  # slower, but the only export that fits
    export = next(step for step in rec["path"] if step["rule"] == "edge_prefers_export_path")
    assert export["evidence"]["blockers"] == []
    assert _edge_step(rec)["outcome"].startswith(
        "Ship the int8 export onnxruntime:int8: the float export is out (over the memory budget: the deployed "
        "model alone is 40 MiB > 32 MiB)"
    )
    # neither fits: the export path is blocked, and it says why
    rec = decide({**EDGE, "memory_budget_mb": 8}, None, _rows())
    export = next(step for step in rec["path"] if step["rule"] == "edge_prefers_export_path")
    assert "the ONNX Runtime run is out: over the memory budget" in export["outcome"]
    assert rec["backend"] is None


def test_without_an_int8_row_the_float_export_ships_and_the_step_says_how_to_measure_int8() -> None:
    rows = _rows()
    rows["measurements"] = [r for r in rows["measurements"] if r["mode"] != "int8"]
    rec = decide(EDGE, None, rows)
    assert _chosen(rec) == "onnxruntime:default"
    assert "Measure onnxruntime:int8 too (`-b onnxruntime:int8`)" in _edge_step(rec)["outcome"]
    assert rec["break_even"] is None
    # a production deployment without an offline export does not weigh quantization at all
    rec = decide({"target": "cpu"}, None, _rows())
    assert not any(step["rule"] == "edge_quantization" for step in rec["path"])


def test_on_an_npu_the_float_dynamo_export_ships_and_the_int8_path_is_said_unmeasured() -> None:
    ge = measurement("torchair", mode="max-autotune", median_ms=4.0, device="npu")
    eager = measurement("eager", median_ms=10.0, device="npu")
    insp = inspection(ops=[op("aten.linear.default")])
    rec = decide({"stage": "edge", "resource_constrained": True}, insp, run(eager, ge))
    assert rec["mode"] == "dynamo_export"
    outcome = _edge_step(rec)["outcome"]
    assert "TorchAir has no quantization entry point" in outcome and "unknown" in outcome
    assert "npu_weight_quant_batchmatmul" in outcome
    assert any("int8 on the NPU is unmeasured" in c["issue"] for c in rec["caveats"])


# ------------------------------------------------------------------ on the rows benchmarks/RESULTS.md recorded
def _recorded(median_ms: float, speedup: float, ci: list[float], mib: float, peak: float, cold: float, **kw) -> dict:
    """A row with the figures of benchmarks/quantized.py's first run (RESULTS.md), eager's median the reference."""
    eager_ms = median_ms * speedup
    row = measurement(kw.pop("backend", "onnxruntime"), median_ms=median_ms, eager_ms=eager_ms, compile_s=cold, **kw)
    row.update(speedup_vs_eager=speedup, speedup_ci=ci, serialized_bytes=int(mib * MIB), peak_memory_mb=peak)
    return row


def _benchmark(model: str) -> dict[str, Any]:
    if model == "resnet18":
        eager = measurement("eager", median_ms=26.84, device="cpu")
        rows = [
            _recorded(17.68, 1.54, [1.49, 1.59], 44.7, 314, 3.3, device="cpu"),
            _recorded(5.62, 4.65, [4.54, 4.74], 11.3, 339, 3.8, mode="int8", device="cpu"),
        ]
        drift = {"cosine": 0.9998, "top1_agreement": 1.0, "top1_rows": 1, "max_abs_err": 0.0597}
    else:
        eager = measurement("eager", median_ms=94.38, device="cpu")
        rows = [
            _recorded(69.14, 1.14, [1.09, 1.20], 255.8, 885, 4.6, device="cpu"),
            _recorded(25.34, 3.03, [2.84, 3.17], 64.4, 1073, 7.1, mode="int8", device="cpu"),
        ]
        drift = {"cosine": 0.9980, "top1_agreement": 1.0, "top1_rows": 1, "max_abs_err": 0.00844}
    eager.update(serialized_bytes=int((44.6 if model == "resnet18" else 255.4) * MIB), peak_memory_mb=4)
    rows[1]["accuracy"] = {**rows[1]["accuracy"], "quantized": {**drift, "allclose": False}}
    return run(eager, *rows, device="cpu")


def test_on_the_recorded_resnet18_and_distilbert_rows_int8_ships_unless_drift_or_its_peak_rules_it_out() -> None:
    rec = decide(EDGE, None, _benchmark("resnet18"))
    assert _chosen(rec) == "onnxruntime:int8"
    assert "deployed size 11.3 MiB int8 vs 44.7 MiB float, 0.25x" in _edge_step(rec)["outcome"]
    assert rec["break_even"]["n_star"] < 100  # 0.5 s more of quantization, ~11.5 ms saved per call
    strict = {**EDGE, "accuracy_tolerance": {"quantized": {"min_cosine": 0.99999}}}
    assert _chosen(decide(strict, None, _benchmark("resnet18"))) == "onnxruntime:default"

    rec = decide({**EDGE, "resource_constrained": True}, None, _benchmark("distilbert"))
    assert _chosen(rec) == "onnxruntime:int8"
    # int8's session holds more RSS than the float one's (1073 vs 885 MiB): a 1000 MiB budget ships the float export
    rec = decide({**EDGE, "resource_constrained": True, "memory_budget_mb": 1000}, None, _benchmark("distilbert"))
    assert _chosen(rec) == "onnxruntime:default"
    assert rec["why_not"]["onnxruntime:int8"] == "over the memory budget: peak 1073 MiB > 1000 MiB"


# ------------------------------------------------------------------ the export path names what was measured
def _export_step(rec: dict) -> dict:
    return next(step for step in rec["path"] if step["rule"] == "edge_prefers_export_path")


def _openvino_only() -> dict[str, Any]:
    """The CNN of tests/harness/test_openvino_int8.py with the medians RESULTS.md recorded on a quiet node (eager
    0.95 ms, openvino:int8 0.31 ms side by side, 3.17x; its int8 IR 86 KB; the CI is illustrative); no ONNX Runtime
    row (it was not asked for)."""
    eager = measurement("eager", median_ms=0.95, device="cpu")
    ov = _recorded(0.31, 3.17, [3.0, 3.3], 86e3 / MIB, 6, 2.8, backend="openvino", mode="int8", device="cpu")
    ov["accuracy"] = {**ov["accuracy"], "quantized": {**DRIFT, "cosine": 0.99999, "top1_rows": 4, "allclose": False}}
    eager.update(serialized_bytes=240_000, peak_memory_mb=2)
    return run(eager, ov, device="cpu")


def test_the_export_path_names_the_exports_measured_never_onnx_runtime_when_only_openvino_was() -> None:
    rec = decide(EDGE, None, _openvino_only())
    assert _chosen(rec) == "openvino:int8"
    outcome = _export_step(rec)["outcome"]
    assert "use the export path (OpenVINO int8 IR -> OpenVINO runtime: openvino:int8)." in outcome
    assert "ONNX" not in outcome

    both = _export_step(decide(EDGE, None, _benchmark("resnet18")))["outcome"]
    assert (
        "(ONNX export -> ONNX Runtime: onnxruntime:default or int8 ONNX export -> ONNX Runtime: onnxruntime:int8)"
        in both
    )
    # an int8 export beyond the tolerated drift is not named as the path taken
    strict = {**EDGE, "accuracy_tolerance": {"quantized": {"min_cosine": 0.99999}}}
    assert (
        "(ONNX export -> ONNX Runtime: onnxruntime:default)."
        in _export_step(decide(strict, None, _benchmark("resnet18")))["outcome"]
    )
    # every export out: the blocked path names the measured ones; nothing measured: the tree's path, said unmeasured
    blocked = _export_step(decide({**EDGE, "memory_budget_mb": 8}, None, _rows()))["outcome"]
    assert "the export path (ONNX export -> ONNX Runtime: onnxruntime:default or int8 ONNX export" in blocked
    assert "is blocked: the ONNX Runtime run is out" in blocked
    unmeasured = decide(EDGE, inspection(ops=[op("aten.linear.default")]), None)
    assert "(ONNX export -> ONNX Runtime, unmeasured)" in _export_step(unmeasured)["outcome"]
