"""SVG charts: well-formed, escaped, and drawn to scale."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from app.web.charts import (
    CompileBar,
    CostLine,
    LatencyBar,
    break_even_chart,
    compile_chart,
    crossings,
    latency_chart,
    nice_ticks,
)

SVG = "{http://www.w3.org/2000/svg}"
HOSTILE = '<script>alert(1)</script>"&'


def parse(svg: str) -> ET.Element:
    """Parsing as XML proves the markup is well formed, i.e. every label was escaped."""
    return ET.fromstring(svg)


def bars(root: ET.Element, css: str) -> list[ET.Element]:
    """The data bars of one kind (legend swatches share the colour class but not `bar`)."""
    return [e for e in root.iter(f"{SVG}rect") if {"bar", css} <= set(e.get("class", "").split())]


def test_latency_chart_draws_one_bar_per_backend_to_scale_with_whiskers_and_p99():
    svg = latency_chart(
        [
            LatencyBar("eager", 4.0, 3.8, 4.2, 5.0),
            LatencyBar("inductor", 2.0, 1.9, 2.1, 2.6, highlighted=True),
        ]
    )
    root = parse(svg)
    drawn = bars(root, "latency-bar")
    assert [b.get("data-backend") for b in drawn] == ["eager", "inductor"]
    widths = [float(b.get("width")) for b in drawn]
    assert widths[0] == pytest.approx(2 * widths[1], rel=0.01)
    assert "highlighted" in drawn[1].get("class")
    assert len([e for e in root.iter(f"{SVG}path") if e.get("class") == "whisker"]) == 2
    assert len([e for e in root.iter(f"{SVG}path") if e.get("class") == "p99"]) == 2
    assert "median 4.00 ms" in root.find(f"{SVG}desc").text


def test_hostile_labels_are_escaped_in_every_chart():
    charts = [
        latency_chart([LatencyBar(HOSTILE, 1.0, 0.9, 1.1, 1.5)]),
        compile_chart([CompileBar(HOSTILE, 3.0, 1.0)]),
        break_even_chart([CostLine("eager", 0.0, 2.0), CostLine(HOSTILE, 5.0, 1.0)]),
    ]
    for svg in charts:
        assert "<script>" not in svg
        root = parse(svg)
        labels = [e.get("data-backend") for e in root.iter() if e.get("data-backend")]
        assert HOSTILE in labels  # the attribute round-trips to the original text


def test_compile_chart_shows_cold_and_warm_and_skips_what_was_not_measured():
    root = parse(compile_chart([CompileBar("inductor", 10.0, 2.0), CompileBar("eager", None, None)]))
    assert len(bars(root, "compile-cold")) == 1 and len(bars(root, "compile-warm")) == 1
    cold, warm = bars(root, "compile-cold")[0], bars(root, "compile-warm")[0]
    assert float(cold.get("width")) == pytest.approx(5 * float(warm.get("width")), rel=0.01)
    assert "eager" not in [e.get("data-backend") for e in root.iter(f"{SVG}rect")]


def test_crossing_is_the_break_even_formula():
    # N* = (compile_B - compile_A) / (latency_A - latency_B) = 10 s / 1 ms = 10,000 calls
    found = crossings([CostLine("eager", 0.0, 2.0), CostLine("inductor", 10.0, 1.0)])
    assert len(found) == 1
    assert found[0].calls == pytest.approx(10_000)
    assert found[0].seconds == pytest.approx(20.0)


def test_no_crossing_when_the_faster_backend_also_compiles_faster():
    assert crossings([CostLine("a", 5.0, 2.0), CostLine("b", 1.0, 1.0)]) == []
    assert crossings([CostLine("a", 0.0, 1.0), CostLine("b", 5.0, 1.0)]) == []


def test_break_even_chart_marks_the_crossing_inside_the_plotted_range():
    root = parse(break_even_chart([CostLine("eager", 0.0, 2.0), CostLine("inductor", 10.0, 1.0, True)]))
    circles = [e for e in root.iter(f"{SVG}circle") if e.get("class") == "crossing"]
    assert len(circles) == 1
    assert "10,000 calls" in circles[0].find(f"{SVG}title").text
    lines = [e for e in root.iter(f"{SVG}path") if "cost-line" in e.get("class", "")]
    assert [e.get("data-backend") for e in lines] == ["eager", "inductor"]
    assert "highlighted" in lines[1].get("class")


def test_break_even_chart_shows_expected_calls_when_given():
    svg = break_even_chart([CostLine("eager", 0.0, 2.0), CostLine("inductor", 1.0, 1.0)], expected_calls=50_000)
    assert any(e.get("class") == "expected" for e in parse(svg).iter(f"{SVG}line"))


def test_empty_inputs_say_why_instead_of_drawing_nothing():
    assert "No backend produced" in latency_chart([])
    assert "No compile times" in compile_chart([CompileBar("eager", None, None)])
    parse(break_even_chart([]))


@pytest.mark.parametrize("top", [0.003, 0.9, 1.0, 7.3, 42.0, 999.0, 12345.0])
def test_ticks_cover_the_maximum_in_round_steps(top):
    ticks = nice_ticks(top)
    assert ticks[0] == 0 and ticks[-1] >= top
    steps = {round(b - a, 12) for a, b in zip(ticks, ticks[1:], strict=False)}
    assert len(steps) == 1
    assert 2 <= len(ticks) <= 7


def test_break_even_chart_labels_training_in_steps():
    lines = [CostLine("eager", 0.0, 2.0), CostLine("inductor", 10.0, 1.0)]
    svg = break_even_chart(lines, expected_calls=5000, unit="step")
    assert "cost the same after 10,000 steps" in svg
    assert ">steps</text>" in svg and ">calls</text>" not in svg
