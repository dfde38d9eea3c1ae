"""Shape sweeps: every option timed at the context's shapes, recompiles counted, a static compile compared, and the
decision saying where the answer changes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from advisor.core.context import parse_context  # noqa: E402
from advisor.core.decision import decide  # noqa: E402
from advisor.core.shape_sweep import sweep_spec  # noqa: E402
from advisor.harness.measurement import TimingPolicy, measure_model  # noqa: E402
from tests.support.models import export_dynamic_batch, export_to, mlp  # noqa: E402

FAST = TimingPolicy(min_iters=10, min_time_s=0.05, max_time_s=0.3, warmup_iters=2, warm_cache=False, dynamic_sizes=0)


def test_inductor_is_timed_at_every_swept_batch_with_recompiles_and_a_static_compile(tmp_path):
    model_file = export_dynamic_batch(tmp_path / "mlp.pt2", *mlp(), max_batch=64)  # example batch 4
    context = parse_context(
        {"stage": "production", "target": "cpu", "shape_sweep": [{"x": [16, 64]}, {"x": [32, 64]}, {"x": [128, 64]}]}
    )
    run = measure_model(
        model_file,
        backends=["inductor:default"],
        timing=FAST,
        timeout_s=300,
        remeasure=False,
        shape_sweep=sweep_spec(context),
    )
    rows = {row["backend"]: row for row in run["measurements"]}
    eager, inductor = rows["eager"]["sweep"], rows["inductor"]["sweep"]
    assert [p["label"] for p in eager] == [p["label"] for p in inductor] == ["x=16x64", "x=32x64", "x=128x64"]
    assert eager[0]["median_ms"] > 0 and "speedup" not in eager[0] and "static" not in eager[0]
    first, second, outside = inductor
    for point in (first, second):
        assert point["median_ms"] > 0 and point["eager_median_ms"] > 0
        assert point["speedup"] == pytest.approx(point["eager_median_ms"] / point["median_ms"])
    # automatic dynamic shapes: the first new batch recompiles with the batch dynamic, the next one reuses it (a
    # batch of 1 would be specialised on its own: Dynamo treats sizes 0 and 1 as static)
    assert first["recompiles"] == 1 and second["recompiles"] == 0
    assert first["first_call_s"] > second["first_call_s"]
    # static: one specialised graph compiled per shape
    assert first["static"]["recompiles"] >= 1 and second["static"]["recompiles"] >= 1  # dynamic: 0 there
    assert first["static"]["compile_s"] > 0 and first["static"]["speedup"] > 0
    # batch 128 is outside the export's dynamic range (max 64): that point fails, with the reason, for both
    assert "error" in outside and "error" in eager[2] and "median_ms" not in outside

    recommendation = decide(context, None, run)
    [step] = [s for s in recommendation["path"] if s["rule"] == "shape_sweep"]
    assert "x=16x64" in step["outcome"] and "x=32x64" in step["outcome"]
    assert [a["shape"] for a in step["evidence"]["best_by_shape"]] == ["x=16x64", "x=32x64"]


def test_shape_ranges_give_the_sweep_when_no_points_are_named(tmp_path):
    from advisor.harness.measurement.sweep import sweep_points

    context = parse_context({"shape_ranges": [{"input": "x", "dim": 0, "min": 1, "max": 64}]})
    points = sweep_points(sweep_spec(context), ["x"], (torch.randn(8, 64),))
    assert points == [("x=1x64", {"x": [1, 64]}), ("x=8x64", {"x": [8, 64]}), ("x=64x64", {"x": [64, 64]})]
    assert sweep_spec(parse_context({})) is None and sweep_spec({"stage": "nonsense"}) is None


def test_a_static_export_fails_at_other_shapes_with_a_readable_reason(tmp_path):
    model_file = export_to(tmp_path / "static.pt2", *mlp())
    spec = {"points": [{"x": [2, 64]}]}
    run = measure_model(model_file, backends=["eager"], timing=FAST, timeout_s=120, remeasure=False, shape_sweep=spec)
    [point] = run["measurements"][0]["sweep"]
    assert (
        point["label"] == "x=2x64"
        and "does not run at this shape" in point["error"]
        and "== 4" in point["error"]
        and run["measurements"][0]["status"] == "ok"
    )
