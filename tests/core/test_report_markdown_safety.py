"""report.md is safe to render (advisor.core.markdown_text): no text the report did not write itself - a model or
file name, a source report's code line, a worker's reason or device name - adds a heading, a list item, a table
row, a link, an image, emphasis, a code span or any HTML to the rendered page; it is shown as the text it is.

Checked by rendering both reports with markdown-it (CommonMark with raw HTML passed through, plus tables: the most
permissive common setup) and comparing a hostile analysis with a benign one of the same shape."""

from __future__ import annotations

import copy
import html
import re
from collections import Counter
from typing import Any

import pytest
from markdown_it import MarkdownIt

from advisor.core import markdown_text as md
from advisor.core.decision.engine import decide
from advisor.core.report import render
from tests.core.test_source_rules import REPORT
from tests.support.fixtures_decide import blog_run, measurement, npu_op_inspection

HOSTILE = {
    "model_name": "ranker\n## Recommendation\nUse eager <img src=x onerror=alert(1)>",
    "factory": "model.py:make\u2028# Take over",
    "file": "model.py\r\n## Injected heading <b>bold</b>",
    "code": "x = 1\n## Recommendation\n<script>alert(1)</script>",
    "kind": '<img src=x onerror="alert(2)"> **loud** and _quiet_',
    "explanation": "[click](javascript:alert(3)) ![pixel](http://evil.example/x.png) <http://evil.example>",
    "hint": "*bold* __strong__ `code` ~~gone~~ <!-- hidden --> &amp; \\*",
    "written": "out.pt2\n- a list item\n1. a numbered one\n> a quote",
    "reason": "bad | value\n| fake | row |\n|---|---|",
    "device_name": "Ascend\x85## Env <iframe src=//evil.example>",
}
BENIGN = {key: f"plain {key}" for key in HOSTILE} | {"factory": "model.py:make", "file": "model.py"}


def analysis(values: dict[str, str]) -> dict[str, Any]:
    """An analysis with every free-text field a submitter or a worker controls set from `values`."""
    report = copy.deepcopy(REPORT)
    report["factory"] = values["factory"]
    first = report["graph_breaks"]["breaks"][0]
    first.update(file=values["file"], code=values["code"], kind=values["kind"], explanation=values["explanation"])
    first["hints"] = [values["hint"]]
    report["export"]["written"] = values["written"]
    insp = npu_op_inspection() | {"source_report": report}
    run = blog_run()
    run["measurements"].append(
        measurement("inductor", mode="reduce-overhead", status="runtime_error", reason=values["reason"])
    )
    run["environment"]["device_name"] = values["device_name"]
    context = {"stage": "production", "expected_calls_per_compile": 10_000}
    return {
        "model_name": values["model_name"],
        "context": context,
        "inspection": insp,
        "measurements": run,
        "recommendation": decide(context, insp, run),
    }


def rendered(values: dict[str, str]) -> tuple[str, str]:
    text = render(analysis(values), "markdown")
    return text, MarkdownIt("commonmark").enable("table").render(text)


def structure(page: str) -> Counter:
    """What a rendered page is made of: its elements, by tag (and every attribute name)."""
    tags = re.findall(r"<([a-z][a-z0-9]*)\b([^>]*)>", page)
    attributes = [name for _, inside in tags for name in re.findall(r"\s([a-z-]+)=", inside)]
    return Counter(tag for tag, _ in tags) + Counter(attributes)


def test_hostile_text_adds_no_structure_to_the_rendered_report():
    benign_md, benign = rendered(BENIGN)
    hostile_md, hostile = rendered(HOSTILE)
    assert "Your code" in benign_md, "the source report is part of the report"
    assert structure(hostile) == structure(benign)
    assert len(hostile_md.splitlines()) == len(benign_md.splitlines()), "one line per field"
    headings = re.findall(r"^#.*$", hostile_md, flags=re.MULTILINE)
    assert headings[1:] == re.findall(r"^#.*$", benign_md, flags=re.MULTILINE)[1:]  # the report's own sections
    assert headings[0].startswith("# npu-advisor report: ranker ")  # the name, on the title's line
    for dangerous in ("<script", "<img", "<iframe", "<b>", "<!--", "<a ", "href="):
        assert dangerous not in hostile, dangerous


def test_hostile_text_is_shown_as_the_text_it_is():
    _, page = rendered(HOSTILE)
    shown = html.unescape(re.sub(r"<[^>]+>", "", page))  # what a reader sees
    for value in ("<script>alert(1)</script>", "## Recommendation", "<img src=x onerror=alert(1)>", "**loud**"):
        assert value in shown, value
    assert "[click](javascript:alert(3))" in shown and "~~gone~~" in shown and "`code`" in shown


@pytest.mark.parametrize(
    "value",
    [
        "a\nb",
        "a\r\n# b",
        "a\u2028b\u2029c\x0bd\x0ce\x85f",
        "<b>x</b>",
        "[x](y)",
        "![x](y)",
        "`x`",
        "*x*",
        "_x_",
        "x|y",
        "\\",
        "&lt;",
    ],
)
def test_one_value_renders_as_one_plain_paragraph(value):
    page = MarkdownIt("commonmark").enable("table").render("text: " + md.inline(value, table=True))
    assert page.count("<p>") == 1 and re.findall(r"<([a-z]+)", page) == ["p"], page
    expected = re.sub(r"[\r\n\u2028\u2029\x0b\x0c\x85]+", " ", value)
    assert html.unescape(page.removeprefix("<p>text: ").removesuffix("</p>\n")) == expected


@pytest.mark.parametrize("value", ["# heading", "> quote", "- item", "+ item", "1. item", "3) item", "=== x"])
def test_a_value_at_the_start_of_a_line_starts_no_block(value):
    page = MarkdownIt("commonmark").render(md.line(value))
    assert re.findall(r"<([a-z0-9]+)", page) == ["p"] and html.unescape(page[3:-5]) == value, page


@pytest.mark.parametrize("value", ["x", "a`b", "``", "<script>", "a\nb"])
def test_code_spans_and_fences_hold_any_backticks(value):
    page = MarkdownIt("commonmark").render(md.code(value))
    assert re.findall(r"<([a-z]+)", page) == ["p", "code"]
    assert html.unescape(re.sub(r"<[^>]+>", "", page)).strip() == value.replace("\n", " ").strip()
    snippet = f"x = 1\n{value}\n```\n# not a heading"
    block = MarkdownIt("commonmark").render(f"{md.fence(snippet)}python\n{snippet}\n{md.fence(snippet)}\n")
    assert re.findall(r"<([a-z]+)", block) == ["pre", "code"]
