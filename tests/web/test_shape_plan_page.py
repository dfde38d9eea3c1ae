"""The shape plan on the analysis page (issue 43): latency by size with the buckets marked, the plan's lines and
its config (synthetic rows: recorded-like numbers)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select

from advisor.core.decision import decide
from app.models import Analysis
from app.web.shape_plan_chart import shape_plan_chart
from tests.core.test_shape_plan import RECORDED_MS, swept_row
from tests.support.fixtures_decide import inspection, measurement, run
from tests.support.web_app import Db

CONTEXT = {
    "target": "cpu",
    "max_graphs": 3,
    "expected_calls_per_compile": 10**7,
    "shape_traffic": [{"shapes": {"ids": [1, s]}, "weight": w} for s, w in [(8, 500), (30, 120), (61, 50), (250, 10)]],
}


def planned() -> tuple[dict, dict]:
    measured = run(
        measurement("eager", median_ms=1.0, device="cpu"), swept_row(RECORDED_MS, 0.7, device="cpu"), device="cpu"
    )
    return measured, decide(CONTEXT, inspection(), measured)


def test_the_chart_marks_each_bucket_and_draws_both_latencies() -> None:
    _, rec = planned()
    plan = rec["shape_plan"]
    svg = shape_plan_chart(plan)
    buckets = plan["buckets"]["ids"]["1"]
    assert svg.count('class="bucket"') == len(buckets)
    assert all(f"<title>bucket {b}</title>" in svg for b in buckets)
    assert "dynamic (one graph) at 64: 0.470 ms" in svg and "static (one graph per size) at 64: 0.329 ms" in svg
    assert "<title>500 calls at size 8</title>" in svg
    assert "No size was measured" in shape_plan_chart({"kind": "dynamic", "sizes": []})


def test_the_detail_page_shows_the_plan_its_reasons_and_config(client: TestClient, seeded: Db) -> None:
    done = seeded.first(select(Analysis).where(Analysis.recommended_backend == "inductor"))
    measured, rec = planned()
    seeded.update(Analysis, done.id, measurements=measured, recommendation=rec, context=CONTEXT)
    html = client.get(f"/analyses/{done.id}").text
    section = html[html.index('id="shape-plan"') :]
    assert 'class="chart shape-plan-chart"' in section
    assert "chosen: inductor:default buckets" in section and "def pad_to_bucket" in section
    assert "over the graph budget: static" in section


def test_an_analysis_without_traffic_has_no_plan_section(client: TestClient, seeded: Db) -> None:
    done = seeded.first(select(Analysis).where(Analysis.recommended_backend == "inductor"))
    assert 'id="shape-plan"' not in client.get(f"/analyses/{done.id}").text
