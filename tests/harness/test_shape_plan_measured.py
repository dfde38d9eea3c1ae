"""A shape plan measured on small real models (issue 43): a tiny text encoder with a dynamic sequence dim is timed at
the sizes its traffic's plan needs (static and dynamic, side by side with eager) and the plan is chosen from those
timings; a small CNN with a dynamic batch has traffic its export forbids refused before anything is measured."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from advisor.core.context import parse_context  # noqa: E402
from advisor.core.decision.engine import decide  # noqa: E402
from advisor.core.decision.shape_rules import shape_plan  # noqa: E402
from advisor.core.shape_plan_text import plan_lines  # noqa: E402
from advisor.core.shape_sweep import sweep_spec  # noqa: E402
from advisor.harness.inspection import inspect_model  # noqa: E402
from advisor.harness.measurement import TimingPolicy, measure_model  # noqa: E402
from advisor.harness.pipeline import _traffic_refused  # noqa: E402
from tests.support.models import cnn, export_dynamic_batch, export_to  # noqa: E402

FAST = TimingPolicy(
    min_iters=10, min_time_s=0.05, max_time_s=0.3, warmup_iters=2, warm_cache=False, dynamic_sizes=0, profile=False
)


class TextEncoder(torch.nn.Module):
    """Token ids [1, S] -> a pooled embedding: an embedding and one transformer layer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(64, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.layer(self.embed(ids)).mean(1)


@pytest.fixture(scope="module")
def encoder_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (1, 8))
    seq = torch.export.Dim("seq", min=2, max=64)
    path = tmp_path_factory.mktemp("encoder") / "encoder.pt2"
    return export_to(path, TextEncoder().eval(), (ids,), dynamic_shapes={"ids": {1: seq}})


# three sizes, each its own point of the sweep (a wider spread adds power-of-two points between them, and a static
# compile each: this test's time)
TRAFFIC = [{"shapes": {"ids": [1, n]}, "weight": w} for n, w in [(4, 50), (8, 10), (16, 2)]]


@pytest.mark.slow
def test_the_text_encoders_plan_is_chosen_from_its_own_timings(encoder_file: str) -> None:
    context = parse_context({"target": "cpu", "max_graphs": 2, "shape_traffic": TRAFFIC})
    spec = sweep_spec(context)
    sizes = [point["ids"][1] for point in spec["points"]]
    assert {4, 16} <= set(sizes) and len(sizes) <= 8  # the ends, bounded
    run = measure_model(
        encoder_file, backends=["eager", "inductor:default"], timing=FAST, shape_sweep=spec, remeasure=False
    )
    row = next(r for r in run["measurements"] if r["backend"] == "inductor")
    assert row["status"] == "ok", row.get("reason")
    swept = {p["shape"]["ids"][1]: p for p in row["sweep"]}
    assert set(swept) == set(sizes)
    for point in swept.values():  # dynamic and static, each side by side with eager, with the static compile time
        assert point.get("error") is None and point["median_ms"] > 0 and point["eager_median_ms"] > 0
        assert point["static"]["median_ms"] > 0 and point["static"]["compile_s"] >= 0
        assert point["memory_kind"] == "rss" and point["peak_memory_mb"] >= 0  # host memory on the CPU
    # each static point compiled a graph of its own in its first call: the memory it took above what was resident
    assert max(point["static"]["peak_memory_mb"] for point in swept.values()) > 0
    rec = decide(context, inspect_model(encoder_file), run)
    assert rec["shape_plan"]["option"] == f"{rec['backend']}:{rec['mode']}"  # the plan is the recommendation's
    plan = shape_plan(context, run, "inductor:default", [])  # inductor's, whichever option won on this machine
    assert plan["within_budget"] and plan["graphs"] <= 2
    kinds = {plan["kind"], *(o["kind"] for o in plan["alternatives"] if o["option"] == plan["option"])}
    assert kinds == {"dynamic", "static", "buckets"}
    static = next(o for o in [plan, *plan["alternatives"]] if o["kind"] == "static")
    assert static["graphs"] == 3 and static["within_budget"] is False  # three sizes, a budget of two
    assert [r["size"] for r in plan["sizes"]] == sorted(set(sizes) | {4, 8, 16})
    assert static["memory_mb"] == max(swept[n]["static"]["peak_memory_mb"] for n in (4, 8, 16))


@pytest.mark.slow
def test_only_the_recommendation_and_its_closest_rival_are_timed_at_the_plans_sizes(encoder_file: str) -> None:
    # two sizes (two plan points, not the five of TRAFFIC): which options are swept does not depend on how many sizes
    traffic = [{"shapes": {"ids": [1, n]}, "weight": w} for n, w in [(4, 50), (8, 10)]]
    context = parse_context({"target": "cpu", "max_graphs": 2, "shape_traffic": traffic})
    inspection = inspect_model(encoder_file)
    options = ["eager", "inductor:default", "onnxruntime:default"]
    run = measure_model(
        encoder_file,
        backends=options,
        timing=FAST,
        shape_sweep=sweep_spec(context),
        plan_context=context,
        inspection=inspection,
        remeasure=False,
    )
    rows = {f"{r['backend']}:{r['mode']}": r for r in run["measurements"]}
    assert sorted(rows) == sorted(["eager:default", "inductor:default", "onnxruntime:default"])
    assert all(row["status"] == "ok" for row in rows.values()), [row.get("reason") for row in rows.values()]
    swept = sorted(label for label, row in rows.items() if row.get("sweep"))
    assert len(swept) == 2  # of three measured options
    assert sorted(run["quality"]["details"]["swept"]) == swept and run["quality"]["details"]["not_swept"]
    rec = decide(context, inspection, run)
    plan = rec["shape_plan"]
    assert plan["option"] == f"{rec['backend']}:{rec['mode']}" and plan["option"] in swept
    rival = next(label for label in swept if label != plan["option"])
    timed = [p for p in rows[rival]["sweep"] if p.get("median_ms") is not None]
    assert timed, rows[rival]["sweep"]  # the rival was timed at the plan's sizes, and its best plan is an alternative
    # the rival's best plan is an alternative (the chosen option's own other plans too, when it has any: a Dynamo one)
    assert rival in {o["option"] for o in plan["alternatives"]} <= set(swept), rows[rival]["sweep"]
    assert sorted(plan["swept"]) == swept and plan["not_swept"]["options"] == [o for o in rows if o not in swept]
    lines = plan_lines(plan)
    assert f"timed at the plan's sizes: {', '.join(plan['swept'])}" in lines
    assert any(line.startswith(f"not timed at the plan's sizes: {plan['not_swept']['options'][0]} (") for line in lines)


def test_the_cnns_traffic_past_its_dynamic_batch_is_refused(tmp_path: Path) -> None:
    model, inputs = cnn()
    path = export_dynamic_batch(tmp_path / "cnn.pt2", model, inputs, max_batch=32)
    inspection = inspect_model(path)
    fits = {"shape_traffic": [{"shapes": {"x": [b, 3, 16, 16]}, "weight": 1} for b in (1, 8, 32)]}
    assert _traffic_refused(fits, inspection) is None
    too_big = {"shape_traffic": [{"shapes": {"x": [8, 3, 16, 16]}}, {"shapes": {"x": [33, 3, 16, 16]}}]}
    refused = _traffic_refused(too_big, inspection)
    assert refused is not None and "shape_traffic entry 2: x: dim 0 is 33, outside the range" in refused
    wrong_rank = {"shape_traffic": [{"shapes": {"x": [8, 3, 16]}}]}
    assert "rank 3, the model's input has rank 4" in _traffic_refused(wrong_rank, inspection)
    static_dim = {"shape_traffic": [{"shapes": {"x": [8, 3, 32, 32]}}]}
    assert "dim 2 is 32, but the model's input is static there (16)" in _traffic_refused(static_dim, inspection)
