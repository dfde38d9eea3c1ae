"""The measurement plan follows the deployment context (issue 15): a real measurement leaves out the variant no
result of which could change the recommendation, says so in its row and in the decision, and the recommendation
stands. The logic itself is tested without torch in tests/test_plan_pruning.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.core.decision.engine import decide
from advisor.harness.measurement import measure_model
from advisor.harness.measurement.timing import TimingPolicy

pytestmark = pytest.mark.slow

FAST = TimingPolicy(min_iters=10, min_time_s=0.05, max_time_s=0.3, warmup_iters=2, warm_cache=False, dynamic_sizes=0)
PROTOTYPE = {"stage": "prototype", "target": "cpu"}


def test_a_prototype_measurement_skips_max_autotune_once_inductor_beats_eager(tmp_path: Path) -> None:
    from models import export_to, pointwise_chain

    path = export_to(tmp_path / "chain.pt2", *pointwise_chain())
    events: list[dict] = []
    run = measure_model(
        path, backends=["inductor"], device="cpu", timing=FAST, plan_context=PROTOTYPE, progress=events.append
    )
    rows = {(r["backend"], r["mode"]): r for r in run["measurements"]}
    default = rows[("inductor", "default")]
    assert default["status"] == "ok" and default["speedup_ci"][0] > 1.0, "16 fused sin passes should beat eager"
    skipped = rows[("inductor", "max-autotune")]
    assert skipped["status"] == "skipped", skipped
    assert skipped["reason"].startswith("not measured: it could not change the recommendation (inductor:default)")
    assert skipped["latency"] is None and skipped["compile_s_cold"] is None, "nothing was run for it"
    assert any(e.get("stage") == "skipped" and e.get("mode") == "max-autotune" for e in events), "a visible step"

    recommendation = decide(PROTOTYPE, None, run)
    assert (recommendation["backend"], recommendation["mode"]) == ("inductor", "default")
    assert (
        "inductor:max-autotune"
        in next(s for s in recommendation["path"] if s["rule"] == "plan_skipped_variants")["evidence"]["skipped"]
    )
