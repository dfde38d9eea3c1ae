"""One number per option per report (issue 27 item 4): the summary, the table, the chart and the JSON quote the same
latency for an option and name the window it came from; the environment says how many threads, which CPU and how
loaded the node was, and a run on a shared node says so in a caveat."""

from __future__ import annotations

import json
from typing import Any

from advisor.core import noise
from advisor.core.decision.engine import decide
from advisor.core.report import environment_line, render
from advisor.core.results import MeasurementRun, read
from app.web.charts import format_quantity
from app.web.detail_view import detail_view
from tests.support.fixtures_decide import inspection, measurement, run

PRODUCTION = {"stage": "production", "expected_calls_per_compile": 10**6, "target": "cpu"}


def resnet18_on_a_busy_node() -> dict[str, Any]:
    """ResNet-18 as reported: eager's own (re-measured) window at 956 ms, the eager timed beside each compiled option
    at 340-347 ms (the reference of the side-by-side scale), both compiled options slower than eager beside them."""
    eager = measurement("eager", median_ms=956.0, device="cpu")
    eager["latency_window"] = noise.REMEASURED_WINDOW
    return run(
        eager,
        measurement("inductor", median_ms=400.0, eager_ms=347.0, device="cpu"),
        measurement("onnxruntime", median_ms=360.0, eager_ms=340.0, device="cpu"),
        device="cpu",
    )


def analysis_of(rows: dict[str, Any]) -> dict[str, Any]:
    insp = inspection()
    return {
        "model_name": "resnet18",
        "status": "done",
        "context": PRODUCTION,
        "inspection": insp,
        "measurements": rows,
        "recommendation": decide(PRODUCTION, insp, rows),
    }


def test_summary_table_chart_and_json_quote_the_same_eager_latency_and_its_window() -> None:
    analysis = analysis_of(resnet18_on_a_busy_node())
    rec = analysis["recommendation"]
    assert rec["backend"] == "eager"
    row = analysis["measurements"]["measurements"][0]
    quoted = row["latency"]["median_ms"]

    # issue 44: the one latency is on the reference eager's scale everywhere, the summary included
    scaled = sorted(r["eager_latency"]["median_ms"] for r in analysis["measurements"]["measurements"])[1]
    said = f"Eager ran at {scaled:.3g} ms per call on the reference eager's scale (median of its re-measured window"
    assert said in rec["summary"]
    text = render(analysis, "text")
    table_line = next(line for line in text.splitlines() if line.lstrip("│| ").startswith("eager:default"))
    # issue 44: the tables quote the time on the reference eager's scale (the chart's), the window still named; the
    # own window's median is the JSON's, never a second latency in a table
    assert f"{scaled:.3g} ms" in table_line and f"{quoted:.3g}" not in table_line and "re-measured" in text
    markdown_row = next(
        line for line in render(analysis, "markdown").splitlines() if line.startswith("| eager:default")
    )
    assert f"{scaled:.3g} ms [" in markdown_row and "(re-measured window)" in markdown_row
    view = detail_view(analysis)
    # the chart draws eager on the reference eager's scale and names the median its own window measured
    label = next(r.label for r in view.rows if r.backend == "eager")
    assert f"{label}: " in view.charts["latency"]
    assert f"(median {format_quantity(quoted)} ms of its re-measured window)" in view.charts["latency"]
    assert next(r for r in view.rows if r.backend == "eager").median_ms == quoted
    stored = json.loads(render(analysis, "json"))["measurements"]["measurements"][0]
    assert stored["latency"]["median_ms"] == quoted and stored["latency_window"] == "re-measured window"
    # no other latency is quoted for eager anywhere in the answer (its own window's median is the JSON's)
    assert f"{quoted:.3g} ms" not in rec["summary"]


def test_a_first_window_is_named_as_such() -> None:
    rows = run(
        measurement("eager", median_ms=10.0, device="cpu"),
        measurement("inductor", median_ms=5.0, eager_ms=10.0, device="cpu"),
        device="cpu",
    )
    rec = decide(PRODUCTION, inspection(), rows)
    assert "5 ms per call (median of its first window)" in rec["summary"]


def shared_run(end_load: float) -> dict[str, Any]:
    rows = run(
        measurement("eager", median_ms=10.0, device="cpu"),
        measurement("inductor", median_ms=5.0, eager_ms=10.0, device="cpu"),
        device="cpu",
    )
    rows["environment"].update(
        torch_threads=2,
        cpu_model="Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
        load={"before": {"load": 0.3, "cores": 2}, "during": {"load": end_load, "cores": 2}},
    )
    for row in rows["measurements"]:
        row["timing_load"] = {"start": {"load": 1.0, "cores": 2}, "end": {"load": 1.2, "cores": 2}}
    rows["measurements"][1]["timing_load"]["end"] = {"load": end_load, "cores": 2}
    return rows


def test_a_run_whose_timed_windows_shared_the_node_says_so_in_a_caveat() -> None:
    # 3.6 runnable on 2 cores while the child's own 2 threads ran: 0.8 of another thread per core
    shared = decide(PRODUCTION, inspection(), shared_run(3.6))
    issues = [c["issue"] for c in shared["caveats"] if "shared" in c["issue"]]
    assert len(issues) == 1
    assert "3.60 on 2 core(s) at the end of inductor:default's timed window" in issues[0]
    assert f"{noise.SHARED_LOAD_PER_CORE:g}" in json.dumps(noise.assess(shared_run(3.6))["thresholds"])
    # its own two threads alone (2.4 on 2 cores: 0.2 per core besides them) is not a shared node
    quiet = decide(PRODUCTION, inspection(), shared_run(2.4))
    assert not [c for c in quiet["caveats"] if "shared" in c["issue"]]


def test_the_environment_line_names_threads_cpu_model_and_load() -> None:
    line = environment_line(read(MeasurementRun, shared_run(3.6)))
    assert "torch_threads=2" in line and "cpu_model=Intel(R) Xeon(R) Platinum 8375C" in line
    assert "load before timing=0.30 on 2 cores" in line and "load during timing=3.60 on 2 cores" in line


def test_the_measuring_device_records_its_threads_and_cpu_model() -> None:
    import torch

    from advisor.harness.devices import open_device

    env = open_device("cpu").describe()
    assert env["torch_threads"] == torch.get_num_threads()
    with open("/proc/cpuinfo") as fh:
        model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), None)
    assert env.get("cpu_model") == model


def test_latency_helper_reads_typed_and_plain_rows() -> None:
    rows = resnet18_on_a_busy_node()
    typed = read(MeasurementRun, rows).measurements
    assert [noise.latency_window(r) for r in typed] == [noise.latency_window(r) for r in rows["measurements"]]
    assert noise.latency_window(typed[0]) == "re-measured window" and noise.latency_window(typed[1]) == "first window"


def test_why_not_and_break_even_quote_no_second_latency_for_an_option() -> None:
    # raw medians 4.0 and 4.2 ms (the table's); side by side 2x and 3x eager's 10 ms: 5 and 3.33 ms on that scale
    rows = run(
        measurement("eager", median_ms=10.0),
        measurement("inductor", median_ms=4.0, compile_s=3.0, eager_ms=8.0),
        measurement("torchair", mode="max-autotune", median_ms=4.2, compile_s=30.0, eager_ms=12.6),
    )
    context = {"stage": "production", "expected_calls_per_compile": 10**5}
    insp = inspection()
    rec = decide(context, insp, rows)
    assert (rec["backend"], rec["mode"]) == ("torchair", "max-autotune") and rec["break_even"]["decided"]
    analysis = {"model_name": "m", "context": context, "inspection": insp, "measurements": rows, "recommendation": rec}
    normalised = {label: rec["break_even"][key] for label, key in (("a", "latency_a_ms"), ("b", "latency_b_ms"))}
    for fmt in ("text", "markdown"):
        report = render(analysis, fmt)
        # issue 44: the table's one latency per option is on eager's scale - the side-by-side scale the break-even
        # ranks on - so an option's table row and the break-even agree, and no row shows its own median beside it
        table = [
            line
            for line in report.splitlines()
            if line.startswith(("│", "|")) and line.lstrip("│| ").startswith(("inductor:", "torchair:"))
        ]
        for value, line in zip(normalised.values(), table, strict=True):
            assert f"{value:.3g} ms" in line
        for row, line in zip(rows["measurements"][1:], table, strict=True):
            assert f"{row['latency']['median_ms']:.3g} ms" not in line
    saving = normalised["a"] - normalised["b"]
    assert f"saves {saving:.3g} ms per call over inductor:default" in render(analysis, "text")
    assert "ran 1.50x as fast as inductor:default" in rec["why_not"]["inductor:default"]
