"""A shape sweep as the decision, the reports and the dashboard read it (synthetic rows: made-up numbers)."""

from __future__ import annotations

import copy

from fastapi.testclient import TestClient
from sqlalchemy import select

from advisor.core.decision import decide
from advisor.core.report import render_markdown
from advisor.core.shape_sweep import where_the_answer_changes
from app.models import Analysis
from tests.support import synthetic_analyses as synthetic
from tests.support.web_app import Db

HOSTILE_INPUT = "<script>alert(5)</script>"
CONTEXT = {"stage": "production", "target": "cpu", "expected_calls_per_compile": 10**9}


def point(label: str, median_ms: float, eager_ms: float | None = None, static_ms: float | None = None) -> dict:
    row = {"label": label, "shape": {"x": [1, 64]}, "median_ms": median_ms, "recompiles": 0, "first_call_s": 0.1}
    if eager_ms is not None:
        row |= {"eager_median_ms": eager_ms, "speedup": eager_ms / median_ms}
    if static_ms is not None and eager_ms is not None:
        row["static"] = {"median_ms": static_ms, "speedup": eager_ms / static_ms, "compile_s": 2.0, "recompiles": 1}
    return row


def swept_run(static_ms: tuple[float, float] | None = None, small: str = "x=1x64") -> dict:
    """Eager is fastest at batch 1 (inductor 0.8x), inductor at batch 64 (2x)."""
    run = synthetic.run((("eager", "default"), ("inductor", "default")))
    eager, inductor = run["measurements"]
    eager["sweep"] = [point(small, 1.0), point("x=64x64", 8.0)]
    statics = static_ms or (None, None)
    inductor["sweep"] = [point(small, 1.25, 1.0, statics[0]), point("x=64x64", 4.0, 8.0, statics[1])]
    return run


def test_the_decision_says_where_the_answer_changes_and_what_a_static_compile_gives():
    text = where_the_answer_changes(swept_run(), "inductor:default", {"inductor:default"})
    # a swept point has no interval, so the sentence names the highest estimate and calls no order (claims)
    assert text == (
        "The highest estimate changes with the shape: x=1x64: eager:default (1.00x); x=64x64: inductor:default "
        "(2.00x) - single estimates without an interval, so no order beyond the noise."
    )
    static = where_the_answer_changes(swept_run(static_ms=(0.5, 3.0)), "inductor:default", {"inductor:default"})
    assert static.startswith(text)  # the answer compares the options as measured (automatic dynamic shapes) ...
    assert "A static compile of inductor:default" in static and "1.33x to 2.50x" in static  # ... then says this
    assert "faster" not in static and "ran 1.33x to 2.50x as fast as automatic dynamic shapes (single" in static
    assert where_the_answer_changes(synthetic.run(), "inductor:default", {"inductor:default"}) is None
    recommendation = decide(CONTEXT, None, swept_run())
    [step] = [s for s in recommendation["path"] if s["rule"] == "shape_sweep"]
    assert step["evidence"]["best_by_shape"][1] == {"shape": "x=64x64", "best": "inductor:default", "speedup": 2.0}
    markdown = render_markdown(
        {"model_name": "m", "context": CONTEXT, "measurements": swept_run(), "recommendation": recommendation}
    )
    assert "## Speedup by input shape" in markdown and "- inductor:default: 0.80x, 2.00x" in markdown


def test_speedups_by_shape_lines_up_every_option_at_every_swept_shape():
    from advisor.core.shape_sweep import speedups_by_shape

    run = swept_run(static_ms=(None, 3.0))
    eager, inductor = run["measurements"]
    eager["sweep"].append(point("x=256x64", 30.0))  # a shape only eager reached: a gap (None) in the others' series
    failed = copy.deepcopy(inductor) | {"backend": "onnxruntime", "status": "fail_accuracy"}  # not drawn
    run["measurements"].append(failed)
    labels, series = speedups_by_shape(run)
    assert labels == ["x=1x64", "x=64x64", "x=256x64"]
    assert series == {"inductor:default": [0.8, 2.0, None], "inductor:default (static)": [None, 8.0 / 3.0, None]}
    assert speedups_by_shape(swept_run())[1] == {"inductor:default": [0.8, 2.0]}  # no static compile: no series
    assert speedups_by_shape(synthetic.run()) == ([], {}) and speedups_by_shape(None) == ([], {})


def test_detail_page_draws_speedup_by_shape_with_input_names_as_text(client: TestClient, seeded: Db):
    done = seeded.first(select(Analysis).where(Analysis.recommended_backend == "inductor"))
    run = copy.deepcopy(swept_run(static_ms=(0.5, 3.0), small=f"{HOSTILE_INPUT}=1x64"))
    seeded.update(Analysis, done.id, measurements=run)
    html = client.get(f"/analyses/{done.id}").text
    section = html[html.index('id="shape-sweep"') :]
    assert 'class="chart series-chart"' in section and "inductor:default (static)" in section
    assert "<script>alert(5)" not in html and "&lt;script&gt;alert(5)&lt;/script&gt;=1x64" in section


def test_an_analysis_without_a_sweep_has_no_sweep_section(client: TestClient, seeded: Db):
    done = seeded.first(select(Analysis).where(Analysis.recommended_backend == "inductor"))
    assert 'id="shape-sweep"' not in client.get(f"/analyses/{done.id}").text


def test_the_text_report_prints_input_names_as_they_are_never_as_markup():
    from advisor.core.report import render_text

    run = swept_run(small="x[/b][red]=1x64")  # rich markup in a user's input name: no crash, nothing eaten
    text = render_text(
        {"model_name": "m", "context": CONTEXT, "measurements": run, "recommendation": decide(CONTEXT, None, run)}
    )
    assert "Speedup vs eager by input shape (x[/b][red]=1x64; x=64x64):" in text
    markdown = render_markdown({"model_name": "m", "context": CONTEXT, "measurements": run, "recommendation": None})
    assert "Speedup vs eager by input shape (x[/b][red]=1x64; x=64x64):" in markdown
