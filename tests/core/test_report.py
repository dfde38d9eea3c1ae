"""Reports of one analysis: text (terminal), Markdown (served as report.md) and JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from advisor.core.context import parse_context
from advisor.core.decision.engine import decide
from advisor.core.report import render
from tests.support.fixtures_decide import blog_run, inspection, measurement, npu_op_inspection, run


def analysis(context: dict, insp: dict | None, measurements: dict | None) -> dict[str, Any]:
    return {
        "model_name": "ranker.pt2",
        "context": context,
        "inspection": insp,
        "measurements": measurements,
        "recommendation": decide(context, insp, measurements),
    }


@pytest.fixture
def production() -> dict[str, Any]:
    return analysis({"stage": "production", "expected_calls_per_compile": 10_000}, npu_op_inspection(), blog_run())


def test_text_report_reads_top_down_for_a_newcomer(production: dict[str, Any]) -> None:
    text = render(production, "text")
    lines = text.splitlines()
    assert "npu-advisor: ranker.pt2" in lines[0]
    assert lines[1] == "Use TorchAir, mode max-autotune on NPU"
    assert "measured on npu" in lines[2] and "confidence medium" in lines[2]
    for expected in (
        "Break-even:",
        "N* = 6,071 calls per compile; you expect 10,000.",
        "inductor:default: slower than torchair:max-autotune",
        "Is this a fixed production model?",
        "fix: Register a fake kernel",
        "npu.npu_rms_norm.default (Inductor: untraceable, TorchAir: supported)",
        "config = CompilerConfig()",
    ):
        assert expected in text, expected
    assert "\x1b[" not in text  # plain text, no terminal escape codes
    assert text.rstrip().endswith("output = model(*inputs)  # first call compiles")  # snippet last, unbroken


def test_markdown_report_has_sections_table_and_code_block(production: dict[str, Any]) -> None:
    md = render(production, "markdown")
    assert md.startswith("# npu-advisor report: ranker.pt2\n")
    assert "**Use TorchAir, mode max-autotune on NPU**" in md
    for heading in (
        "## Measurements",
        "## Break-even",
        "## Why not the others",
        "## How it was decided",
        "## Caveats and fixes",
        "## Model",
        "## Environment",
        "## Deployment context",
        "## Config to paste",
    ):
        assert f"\n{heading}\n" in md, heading
    assert "| torchair:max-autotune | ok | 28.7 s / - | 8.2 ms [8.04-8.36] | 9.02 ms |" in md
    assert "```python\nimport torch\n" in md and md.rstrip().endswith("```")


def test_markdown_escapes_pipes_in_table_cells() -> None:
    measurements = run(
        measurement("eager", median_ms=5.0),
        measurement("inductor", status="runtime_error", reason="bad | value"),
    )
    md = render(analysis({}, inspection(), measurements), "markdown")
    assert "runtime_error: bad \\| value" in md


def test_json_report_round_trips_every_part(production: dict[str, Any]) -> None:
    data = json.loads(render(production, "json"))
    assert set(data) == {"model_name", "context", "inspection", "measurements", "recommendation"}
    assert data["recommendation"] == json.loads(json.dumps(production["recommendation"]))
    assert data["context"]["target"] == "npu"  # defaults filled in


def test_context_model_is_accepted_too() -> None:
    context = parse_context({"target": "cpu", "stage": "prototype"})
    report = analysis({"target": "cpu", "stage": "prototype"}, inspection(), None)
    report["context"] = context
    assert json.loads(render(report, "json"))["context"]["stage"] == "prototype"
    assert "on CPU" in render(report, "text")


def test_unmeasured_and_test_double_reports_say_so() -> None:
    unmeasured = render(analysis({"stage": "production"}, npu_op_inspection(), None), "text")
    assert "UNMEASURED" in unmeasured and "Measurements" not in unmeasured
    double = render(analysis({}, inspection(), blog_run(measured_on="test-double")), "markdown")
    assert "measured on the TorchAir test double (not a real NPU)" in double
    assert "measured on npu" not in double


def test_no_backend_report_lists_the_reasons() -> None:
    measurements = run(measurement("eager", status="crashed", reason="SIGSEGV in the child"))
    text = render(analysis({"target": "npu"}, inspection(), measurements), "text")
    assert "No backend qualifies on NPU" in text
    assert "eager:default: crashed: SIGSEGV in the child" in text


def test_unknown_format_is_a_clear_error(production: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="unknown report format 'html'"):
        render(production, "html")  # type: ignore[arg-type]


def test_report_shows_side_by_side_speedups_with_their_ci_and_the_break_even_basis() -> None:
    measurements = run(
        measurement("eager", median_ms=10.0),
        measurement("inductor", median_ms=4.0, compile_s=3.0, eager_ms=8.0),
        measurement("torchair", mode="max-autotune", median_ms=3.9, compile_s=28.0, eager_ms=15.6),
    )
    md = render(analysis({"expected_calls_per_compile": 11_000}, inspection(), measurements), "markdown")
    for row in measurements["measurements"][1:]:
        low, high = row["speedup_ci"]
        assert f"| {row['speedup_vs_eager']:.2f}x [{low:.2f}-{high:.2f}] faster |" in md  # its CI's verdict beside it
    assert "saves" in md and "eager's median divided by each option's side-by-side speedup" in md


def test_an_export_backends_compile_time_is_broken_down_into_export_and_session() -> None:
    ort = measurement("onnxruntime", median_ms=4.0, compile_s=5.41, warm_s=0.35, device="cpu")
    ort["compile_breakdown"] = {"export_s": 5.1, "session_s": 0.31, "first_call_s": 0.0}
    measured = run(measurement("eager", median_ms=10.0, compile_s=None, device="cpu"), ort, device="cpu")
    report = analysis({"stage": "production", "target": "cpu"}, inspection(), measured)
    expected = "onnxruntime:default: cold 5.41 s = export 5.1 s + session creation 0.31 s + first call 0 s; warm 0.35 s"
    assert f"Compile time of {expected}" in render(report, "text").replace("\n", " ")
    assert f"Compile time of {expected}" in render(report, "markdown")
    no_breakdown = analysis(
        {"stage": "production", "target": "cpu"},
        inspection(),
        run(measurement("eager", median_ms=10.0, compile_s=None, device="cpu"), device="cpu"),
    )
    assert "Compile time of" not in render(no_breakdown, "text")


def test_an_eliminated_row_keeps_its_numbers_and_says_why_in_every_format() -> None:
    why = "clearly behind inductor:default: its window stopped once its speedup lay wholly below the leader's"
    measurements = blog_run()
    slower = next(row for row in measurements["measurements"] if row["backend"] != "eager" and row.get("latency"))
    slower["eliminated"] = why
    report = analysis({"stage": "production", "expected_calls_per_compile": 10_000}, npu_op_inspection(), measurements)
    for fmt in ("text", "markdown"):
        flat = " ".join(render(report, fmt).split())
        assert f"eliminated: {why}" in flat, fmt
    assert json.loads(render(report, "json"))["measurements"]["measurements"][1]["eliminated"] == why
