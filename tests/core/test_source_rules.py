"""The source-side report in the decision (advisor.core.decision.source_rules) and its schema's bounds
(advisor.core.source_report). Torch-free and fast: reports are written by hand as the child writes them."""

from __future__ import annotations

import copy
import html
import re

import pytest
from markdown_it import MarkdownIt
from pydantic import ValidationError

from advisor.core.decision.engine import decide
from advisor.core.source_report import MAX_TEXT, SOURCE_LABEL, parse_source_report

REPORT = {
    "version": 1,
    "factory": "model.py:make",
    "torch_version": "2.13.0",
    "graph_breaks": {
        "analysed": True,
        "graph_count": 4,
        "break_count": 3,
        "breaks": [
            {
                "kind": "Data-dependent branching",
                "reason": "Data-dependent branching\nDeveloper debug context: attempted to jump with TensorVariable()",
                "file": "model.py",
                "line": 41,
                "function": "forward",
                "code": "if x.sum() > 0:",
                "explanation": "Detected data-dependent branching.",
                "hints": ["Use `torch.cond` to express dynamic control flow."],
                "count": 2,
            },
            {
                "kind": "Unsupported Tensor.item() call with capture_scalar_outputs=False",
                "reason": "Unsupported Tensor.item() call",
                "file": "model.py",
                "line": 57,
                "function": "forward",
                "code": "n = x.max().item()",
                "hints": ["Set `torch._dynamo.config.capture_scalar_outputs = True`"],
            },
        ],
    },
    "recompiles": {
        "analysed": True,
        "base_shapes": {"x": [2, 8]},
        "points": [
            {
                "shapes": {"x": [4, 8]},
                "recompiled": True,
                "graphs_compiled": 1,
                "guard_failures": ["0/0: tensor 'x' size mismatch at index 0. expected 2, actual 4"],
            }
        ],
        "marked_dynamic": {"dims": [{"input": "x", "dim": 0}], "recompiles": 0},
    },
    "export": {
        "attempts": [
            {"strict": False, "ok": False, "error": "GuardOnDataDependentSymNode: Could not guard on u0 > 4"},
            {"strict": True, "ok": False, "error": "UserError: data-dependent"},
        ],
        "draft": {
            "ran": True,
            "ok": True,
            "problems": [{"kind": "data_dependent_error", "message": "u0 > 4", "location": "model.py:57 in forward"}],
        },
    },
}


def _decide(report: dict | None, **context: object) -> dict:
    inspection = {"source_report": report} if report is not None else None
    return dict(decide({"target": "npu", **context}, inspection, None))


def _issues(rec: dict) -> list[str]:
    return [c["issue"] for c in rec["caveats"]]


def test_graph_breaks_become_a_caveat_naming_the_lines_to_fix_first() -> None:
    rec = _decide(REPORT)
    (breaks,) = [c for c in rec["caveats"] if "graph break" in c["issue"]]
    assert breaks["issue"].startswith("3 graph break(s) in model.py")
    assert "TorchAir (GE) compiles each graph separately" in breaks["issue"]
    assert "Fix lines 41 and 57 first" in breaks["issue"]
    assert "model.py:41 `if x.sum() > 0:`" in breaks["issue"]
    assert SOURCE_LABEL in breaks["issue"]
    assert "torch.cond" in breaks["fix"] and "capture_scalar_outputs" in breaks["fix"]  # Dynamo's own hints


def test_recompiles_become_a_caveat_with_the_failed_guard_and_the_fix_that_worked() -> None:
    rec = _decide(REPORT)
    (recompile,) = [c for c in rec["caveats"] if "compiled again" in c["issue"]]
    assert "x=4x8" in recompile["issue"] and "size mismatch at index 0" in recompile["issue"]
    assert "torch._dynamo.mark_dynamic(x, 0)" in recompile["fix"]
    assert "did not recompile" in recompile["fix"]


def test_export_failure_is_a_caveat_for_the_edge_path_only() -> None:
    production = _issues(_decide(REPORT, stage="production"))
    assert not any("torch.export failed" in issue for issue in production)
    edge = _decide(REPORT, stage="edge")
    (export,) = [c for c in edge["caveats"] if "torch.export failed" in c["issue"]]
    assert "GuardOnDataDependentSymNode" in export["issue"]
    assert "data_dependent_error at model.py:57 in forward" in export["fix"]
    offline = _issues(_decide(REPORT, needs_offline_export=True))
    assert any("torch.export failed" in issue for issue in offline)


def test_no_report_or_a_clean_one_adds_nothing() -> None:
    clean = copy.deepcopy(REPORT)
    clean["graph_breaks"] = {"analysed": True, "graph_count": 1, "break_count": 0, "breaks": []}
    clean["recompiles"]["points"][0]["recompiled"] = False
    clean["export"] = {"attempts": [{"strict": False, "ok": True}, {"strict": True, "ok": True}]}
    without = dict(decide({"target": "npu", "stage": "edge"}, {"source_report": None}, None))
    assert without["caveats"] == _decide(clean, stage="edge")["caveats"]


def test_an_invalid_report_is_ignored_by_the_engine() -> None:
    bad = copy.deepcopy(REPORT)
    bad["graph_breaks"]["break_count"] = "three"
    assert _decide(bad)["caveats"] == dict(decide({"target": "npu"}, {"source_report": None}, None))["caveats"]


# ------------------------------------------------------------------------------------------ the schema's bounds
def test_schema_accepts_the_report() -> None:
    assert parse_source_report(REPORT).graph_breaks.breaks[0].where == "model.py:41"


@pytest.mark.parametrize(
    "spoil",
    [
        lambda r: r["graph_breaks"]["breaks"][0].update(reason="x" * (MAX_TEXT + 1)),  # oversized text
        lambda r: r["graph_breaks"]["breaks"].extend([r["graph_breaks"]["breaks"][0]] * 200),  # too many items
        lambda r: r["graph_breaks"].update(break_count="3"),  # a string for a number
        lambda r: r["graph_breaks"]["breaks"][0].update(line=-1),
        lambda r: r["recompiles"]["points"][0].update(shapes={"x": [1.5]}),
        lambda r: r["export"].update(written=["a"]),
        lambda r: r.update(extra={"<script>": 1}),  # unknown fields
        lambda r: r.update(version=2),
    ],
)
def test_schema_refuses_hostile_reports(spoil: object) -> None:
    hostile = copy.deepcopy(REPORT)
    spoil(hostile)  # type: ignore[operator]
    with pytest.raises(ValidationError):
        parse_source_report(hostile)


# ------------------------------------------------------------------------------------------ in the reports
@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_the_reports_show_the_source_report_labelled_and_verbatim(fmt: str) -> None:
    from advisor.core.report import render

    report = copy.deepcopy(REPORT)
    report["graph_breaks"]["breaks"][0]["code"] = "if x.sum() > 0:  # [bold]<script>alert(1)</script>"
    inspection = {"source_report": report}
    analysis = {
        "model_name": "model.pt2",
        "context": {"target": "npu"},
        "inspection": inspection,
        "measurements": None,
        "recommendation": dict(decide({"target": "npu"}, inspection, None)),
    }
    text = render(analysis, fmt)  # type: ignore[arg-type]
    if fmt == "markdown":  # what a reader of the rendered Markdown sees (the source escapes the user's text)
        text = html.unescape(re.sub(r"<[^>]+>", "", MarkdownIt("commonmark").render(text)))
    assert f"Your code model.py:make ({SOURCE_LABEL}; torch 2.13.0):" in text
    assert "1. model.py:41 in forward: Data-dependent branching (x2)" in text
    assert "# [bold]<script>alert(1)</script>" in text  # user text as it is: no markup read, nothing dropped
    assert "draft_export: 1 problem(s)" in text


def test_the_reports_without_a_source_report_are_unchanged() -> None:
    from advisor.core.report import inspection_lines
    from advisor.core.results import Inspection

    assert inspection_lines(Inspection.model_validate({"format": "exported_program"}))[-1].startswith("Graph breaks")
