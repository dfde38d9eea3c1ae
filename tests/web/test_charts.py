"""SVG charts: well-formed, escaped, and drawn to scale."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from app.web.charts import (
    CompileBar,
    CostLine,
    LatencyBar,
    break_even_chart,
    compile_chart,
    crossings,
    integer_ticks,
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


# ------------------------------------------------------------------ readable at a glance (issue 13)
FONT_PX, CHAR_EM = 12.0, 0.6  # the dashboard's chart font; tick labels are smaller, so these boxes are generous


def label_boxes(root: ET.Element) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Every visible text of a chart as (text, box): width = characters x font size x 0.6, height = font size."""
    boxes = []
    for e in root.iter(f"{SVG}text"):
        text = e.text or ""
        x, y = float(e.get("x")), float(e.get("y"))
        width = len(text) * FONT_PX * CHAR_EM
        anchor = e.get("text-anchor", "start")
        x0 = x if anchor == "start" else x - width if anchor == "end" else x - width / 2
        boxes.append((text, (x0, y - FONT_PX, x0 + width, y + FONT_PX * 0.25)))
    return boxes


def overlaps(root: ET.Element) -> list[tuple[str, str]]:
    found = []
    boxes = label_boxes(root)
    for i, (a, (ax0, ay0, ax1, ay1)) in enumerate(boxes):
        for b, (bx0, by0, bx1, by1) in boxes[i + 1 :]:
            if ax0 < bx1 and bx0 < ax1 and ay0 < by1 and by0 < ay1:
                found.append((a, b))
    return found


BREAK_EVEN_CASES = {
    "one crossing": ([CostLine("eager", 0.0, 2.0), CostLine("inductor", 10.0, 1.0, True)], None),
    "close crossings": (  # three lines crossing eager within a few percent of each other
        [
            CostLine("eager", 0.0, 2.0),
            CostLine("inductor", 1.0, 1.0, True),
            CostLine("inductor:max-autotune", 1.05, 0.99, True),
            CostLine("onnxruntime", 1.1, 0.98, True),
        ],
        1_000,
    ),
    "same end point": ([CostLine("eager", 0.0, 1.0), CostLine("a", 5.0, 0.5), CostLine("b", 5.0, 0.5)], None),
    "fractional crossing": ([CostLine("eager", 0.0, 3.0), CostLine("inductor", 0.0123, 1.0, True)], 7),
    "orders of magnitude apart": (
        [CostLine("eager", 0.0, 20.0), CostLine("onnxruntime", 0.1, 2.0, True), CostLine("inductor", 60.0, 1.0)],
        100_000,
    ),
    "expected next to the crossing": ([CostLine("eager", 0.0, 2.0), CostLine("inductor", 10.0, 1.0, True)], 10_500),
    "six long names": (
        [CostLine("eager", 0.0, 5.0)]
        + [CostLine(f"{HOSTILE}-backend-{i}:reduce-overhead", 2.0 + i, 4.0 - 0.5 * i, i == 3) for i in range(5)],
        20_000,
    ),
    "huge counts": ([CostLine("eager", 0.0, 0.01), CostLine("inductor", 300.0, 0.005, True)], 5e7),
}


@pytest.mark.parametrize("case", BREAK_EVEN_CASES)
def test_break_even_labels_never_overlap_and_call_ticks_are_whole_numbers(case):
    lines, expected = BREAK_EVEN_CASES[case]
    root = parse(break_even_chart(lines, expected_calls=expected))
    assert overlaps(root) == [], case
    ticks = [e for e in root.iter(f"{SVG}text") if "x-tick" in e.get("class", "")]
    assert len(ticks) >= 3
    for tick in ticks:
        value = float(tick.get("data-value"))
        assert value == int(value) and value >= 0, (case, tick.text)
        assert "." not in tick.text or tick.text.endswith(("k", "M", "G")), (case, tick.text)
    crossing_labels = [e.text for e in root.iter(f"{SVG}text") if e.get("class") == "crossing-label"]
    assert all(re.fullmatch(r"[\d,]+ calls", text) for text in crossing_labels), crossing_labels
    assert crossing_labels or not crossings(lines), case  # at least the first crossing that matters is labelled


def test_break_even_without_highlight_labels_the_first_crossing_and_keeps_all_markers():
    lines, expected = BREAK_EVEN_CASES["close crossings"]
    plain = [CostLine(line.label, line.compile_s, line.latency_ms) for line in lines]
    root = parse(break_even_chart(plain, expected_calls=expected))
    assert len([e for e in root.iter(f"{SVG}circle") if e.get("class") == "crossing"]) == len(crossings(plain))
    assert overlaps(root) == []


def test_break_even_goes_logarithmic_when_crossings_are_orders_of_magnitude_apart():
    lines, expected = BREAK_EVEN_CASES["orders of magnitude apart"]
    meets = crossings(lines)
    assert meets[-1].calls / meets[0].calls > 100
    root = parse(break_even_chart(lines, expected_calls=expected))
    assert "log" in root.get("class").split()
    ticks = [int(e.get("data-value")) for e in root.iter(f"{SVG}text") if "x-tick" in e.get("class", "")]
    assert ticks[0] == 1 and all(b == 10 * a for a, b in zip(ticks, ticks[1:], strict=False))
    circles = [float(e.get("cx")) for e in root.iter(f"{SVG}circle") if e.get("class") == "crossing"]
    assert len(circles) == len(meets) and min(b - a for a, b in zip(circles, circles[1:], strict=False)) > 40
    linear = parse(break_even_chart(BREAK_EVEN_CASES["one crossing"][0]))
    assert "log" not in linear.get("class").split()


@pytest.mark.parametrize("top", [3, 7.3, 12, 42.0, 999.0, 12345.0, 2.5e7])
def test_integer_ticks_are_whole_and_cover_the_maximum(top):
    ticks = integer_ticks(top)
    assert ticks[0] == 0 and ticks[-1] >= top and all(isinstance(t, int) for t in ticks)
    assert len({b - a for a, b in zip(ticks, ticks[1:], strict=False)}) == 1


def test_latency_axis_clips_a_p99_outlier_instead_of_squashing_the_medians():
    svg = latency_chart(
        [
            LatencyBar("eager", 4.0, 3.8, 4.2, 400.0),  # one p99 100x the median
            LatencyBar("inductor", 2.0, 1.9, 2.1, 2.6, highlighted=True),
        ]
    )
    root = parse(svg)
    drawn = bars(root, "latency-bar")
    widths = [float(b.get("width")) for b in drawn]
    assert widths[0] == pytest.approx(2 * widths[1], rel=0.01)
    assert widths[0] >= 0.25 * 460, "the largest median must take a visible share of the plot"
    ticks = [float(e.text.replace(",", "")) for e in root.iter(f"{SVG}text") if e.get("class") == "tick"]
    assert max(ticks) <= 15, "the axis follows the medians (3x the largest), not the 400 ms tail"
    clipped = [e for e in root.iter(f"{SVG}path") if e.get("class") == "p99 clipped"]
    assert len(clipped) == 1 and "400" in clipped[0].find(f"{SVG}title").text
    assert [e.text for e in root.iter(f"{SVG}text") if e.get("class") == "clip-label"] == ["p99 400"]
    assert len([e for e in root.iter(f"{SVG}path") if e.get("class") == "p99"]) == 1  # inductor's is in range
    assert "beyond the axis" in svg and overlaps(root) == []


def test_latency_axis_is_not_clipped_when_the_tails_are_moderate():
    root = parse(latency_chart([LatencyBar("eager", 4.0, 3.8, 4.2, 9.0), LatencyBar("b", 1.0, 0.9, 1.2, 11.5)]))
    assert not [e for e in root.iter() if "clipped" in (e.get("class") or "")]
    ticks = [float(e.text) for e in root.iter(f"{SVG}text") if e.get("class") == "tick"]
    assert max(ticks) >= 11.5


def test_latency_whisker_beyond_the_axis_is_an_arrow_not_a_cap():
    root = parse(latency_chart([LatencyBar("noisy", 1.0, 0.5, 30.0, 40.0), LatencyBar("b", 2.0, 1.9, 2.1, 2.2)]))
    whiskers = [e for e in root.iter(f"{SVG}path") if "whisker" in e.get("class", "")]
    assert [w.get("class") for w in whiskers] == ["whisker clipped", "whisker"]
    assert "30.0" in whiskers[0].find(f"{SVG}title").text
