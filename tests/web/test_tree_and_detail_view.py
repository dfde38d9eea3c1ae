"""The selection-tree drawing and the detail page's view model, from synthetic analyses."""

from __future__ import annotations

import json
import shlex
import xml.etree.ElementTree as ET

from app.web.detail_view import coverage_rows, detail_view, not_npu_note
from app.web.tree import tree_svg
from web import synthetic

SVG = "{http://www.w3.org/2000/svg}"


def nodes(svg: str) -> list[tuple[str, str]]:
    root = ET.fromstring(svg)
    return [(g.get("class"), g.get("data-node")) for g in root.iter(f"{SVG}g") if "node" in g.get("class", "")]


def test_tree_draws_the_rules_in_order_then_the_chosen_and_rejected_backends():
    drawn = nodes(tree_svg(synthetic.recommendation("inductor", "max-autotune")))
    assert drawn == [
        ("node rule", "Which backends ran, were accurate and fit the budgets?"),
        ("node rule", "Is the model a fixed production model?"),
        ("node chosen", "inductor:max-autotune"),
        ("node rejected", "eager"),
        ("node rejected", "torchair"),
    ]


def test_tree_shows_why_not_text_and_escapes_it():
    rec = synthetic.recommendation()
    rec["why_not"] = {"torchair": "<img src=x onerror=alert(1)> failed"}
    svg = tree_svg(rec)
    assert "<img" not in svg
    assert "&lt;img src=x onerror=alert(1)&gt; failed" in svg
    ET.fromstring(svg)


def test_tree_without_a_path_still_shows_the_outcome():
    drawn = nodes(tree_svg({"backend": None, "path": [], "why_not": {"inductor": "crashed"}}))
    assert ("node chosen", "no backend qualifies") in drawn and ("node rejected", "inductor") in drawn


def test_detail_view_marks_the_recommended_row_and_draws_a_bar_per_measured_backend():
    view = detail_view(synthetic.analysis_dict())
    assert [r.label for r in view.rows] == ["eager", "inductor", "inductor:max-autotune"]
    assert [r.recommended for r in view.rows] == [False, False, True]
    assert view.charts["latency"].count('class="bar latency-bar') == 3
    assert view.crossings, "compiled backends are faster but compile longer, so lines must cross"
    assert view.not_npu_note and "Not NPU-measured" in view.not_npu_note


def test_failed_backends_are_listed_but_not_charted():
    analysis = synthetic.analysis_dict()
    analysis["measurements"]["measurements"][1] |= {"status": "compile_error", "reason": "boom", "latency": None}
    view = detail_view(analysis)
    assert view.rows[1].status == "compile_error" and view.rows[1].reason == "boom"
    assert view.charts["latency"].count('class="bar latency-bar') == 2


def test_custom_ops_come_first_in_the_coverage_table():
    rows = coverage_rows(synthetic.inspection(custom_ops=("npu.npu_rms_norm.default", "mylib.fused.default")))
    assert [r.custom for r in rows] == [True, True, False, False]
    assert {r.name for r in rows[:2]} == {"npu.npu_rms_norm.default", "mylib.fused.default"}
    assert rows[0].has_fake_kernel is False and rows[0].inductor == "fallback"


def test_coverage_known_only_on_an_npu_reads_unknown_with_its_note():
    inspection = synthetic.inspection(custom_ops=("npu.npu_moe_token_permute.default",))
    op = inspection["custom_ops"][0]
    op["coverage"].update(torchair="none", torchair_unknown=True, torchair_note="<b>only known there</b>")
    row = next(r for r in coverage_rows(inspection) if r.name == op["name"])
    assert (row.torchair, row.torchair_note) == ("unknown", "<b>only known there</b>")
    aten = next(r for r in coverage_rows(inspection) if r.name == "aten.linear.default")
    assert (aten.torchair, aten.torchair_note) == ("supported", None)


def test_only_real_npu_numbers_go_without_a_warning():
    assert not_npu_note("npu", True) is None
    assert "test double" in not_npu_note("test-double", True)
    assert "not NPU-measured" in not_npu_note("test-double", True)
    assert "Not NPU-measured" in not_npu_note("cpu", True)
    assert "Not measured yet" in not_npu_note(None, False)


def test_reproduce_command_is_shell_safe_for_any_model_name():
    analysis = synthetic.analysis_dict(model_name="my model'; rm -rf ~")
    write_context, run = detail_view(analysis).reproduce_command.splitlines()
    printf = shlex.split(write_context)
    assert printf[:2] == ["printf", "%s"] and json.loads(printf[2]) == analysis["context"]
    assert printf[3:] == [">", "context.json"]
    words = shlex.split(run)
    assert words[:3] == ["npu-advisor", "analyze", "my model'; rm -rf ~.pt2"]
    assert words[words.index("--context") + 1] == "context.json"
    assert words[words.index("--device") + 1] == "cpu"
    assert words[words.index("--backends") + 1] == "eager,inductor"


def test_queued_analysis_has_no_charts_and_no_tree():
    view = detail_view(synthetic.analysis_dict(status="queued"))
    assert view.rows == [] and view.charts == {} and view.tree is None and not view.terminal


def test_reproduce_command_names_the_file_once_when_the_model_name_is_a_file_name():
    run = detail_view(synthetic.analysis_dict(model_name="example-mlp.pt2")).reproduce_command.splitlines()[1]
    assert shlex.split(run)[2] == "example-mlp.pt2"
