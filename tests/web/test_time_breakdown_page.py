"""Where the time goes, as the dashboard, the Markdown report and the API show a stored analysis's breakdowns."""

from __future__ import annotations

import copy

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.models import Analysis
from tests.support.web_app import Db

HOSTILE_OP = "npu::<script>alert(7)</script>"


def breakdown(first: str, kind: str, *, fused: int | None = None, fallbacks: list[str] | None = None) -> dict:
    return {
        "source": "torch.profiler, host self time",
        "calls": 25,
        "total_ms_per_call": 2.0,
        "entries": [
            {"name": first, "kind": kind, "ms_per_call": 1.2, "share": 0.6, "count_per_call": 1.0},
            {"name": "aten::addmm", "kind": "op", "ms_per_call": 0.6, "share": 0.3, "count_per_call": 2.0},
        ],
        "other_share": 0.1,
        "fused_kernels": fused,
        "fallback_ops": fallbacks or [],
        "note": None,
    }


def with_breakdowns(db: Db) -> Analysis:
    """The seeded analysis that recommends inductor:max-autotune, with a breakdown on every measured row."""
    done = db.first(select(Analysis).where(Analysis.recommended_backend == "inductor"))
    run = copy.deepcopy(done.measurements)
    for row in run["measurements"]:
        if row["backend"] == "eager":
            row["time_breakdown"] = breakdown(HOSTILE_OP, "op")
        elif row["mode"] == "max-autotune":
            row["time_breakdown"] = breakdown("graph_0_cpp_fused_relu_0", "kernel", fused=3, fallbacks=[HOSTILE_OP])
        else:
            row["time_breakdown"] = breakdown("aten::never_shown", "aten call", fused=1)
    db.update(Analysis, done.id, measurements=run)
    return done


def test_detail_page_charts_eager_and_the_recommended_option_with_op_names_as_text(client: TestClient, seeded: Db):
    done = with_breakdowns(seeded)
    html = client.get(f"/analyses/{done.id}").text
    section = html[html.index('id="time-breakdown"') : html.index('id="measurements"')]
    panels = section.split('<div class="breakdown"')[1:]
    assert [p[: p.index(">")] for p in panels] == [
        ' data-backend="eager:default"',
        ' data-backend="inductor:max-autotune"',
    ]
    assert section.count('class="chart breakdown-chart"') == 2 and "never_shown" not in section
    assert "<script>alert(7)" not in html and "npu::&lt;script&gt;alert(7)&lt;/script&gt;" in section
    assert (
        'class="bar share-kernel"' in panels[1] and "60% kernel" in panels[1]
    )  # the kind is written, not only coloured
    assert "3 generated kernels" in panels[1] and "fell back to eager kernels: npu::&lt;script&gt;" in panels[1]
    assert "25 calls after the timed window" in section


def test_markdown_report_and_api_carry_the_breakdowns(client: TestClient, seeded: Db):
    done = with_breakdowns(seeded)
    markdown = client.get(f"/api/v1/analyses/{done.id}/report.md").text
    where = markdown[markdown.index("## Where the time goes") :]
    assert "- `eager:default`: npu::&lt;script&gt;alert(7)&lt;/script&gt; 60%, aten::addmm 30%, other 10%" in where
    assert "- `inductor:max-autotune`: graph_0_cpp_fused_relu_0 60% (kernel)" in where and "never_shown" not in where
    rows = client.get(f"/api/v1/analyses/{done.id}").json()["measurements"]["measurements"]
    assert {
        row["mode"]: row["time_breakdown"]["entries"][0]["name"] for row in rows if row["backend"] == "inductor"
    } == {
        "default": "aten::never_shown",  # the JSON keeps every row's breakdown
        "max-autotune": "graph_0_cpp_fused_relu_0",
    }
    assert "TimeBreakdown" in client.get("/openapi.json").json()["components"]["schemas"]


def test_an_analysis_without_breakdowns_has_no_section(client: TestClient, seeded: Db):
    done = seeded.first(select(Analysis).where(Analysis.recommended_backend == "inductor"))
    assert 'id="time-breakdown"' not in client.get(f"/analyses/{done.id}").text
