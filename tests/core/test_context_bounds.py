"""Bounded context fields (issue 12): every field has a range, JSON decoding is safe, no message echoes a huge
value, and the decision engine and reports handle the largest accepted values. Torch-free and fast."""

from __future__ import annotations

import json

import pytest

from advisor.core import context as ctx
from advisor.core.context import ContextError, parse_context, parse_context_json
from advisor.core.decision.engine import decide
from advisor.core.report import render
from tests.support.fixtures_decide import inspection, measurement, run

LARGEST = {
    "stage": "production",
    "target": "npu",
    "workload": "training",
    "optimizer": "adamw",
    "decode_tokens": ctx.MAX_DECODE_TOKENS,
    "fleet": "mixed",
    "expected_calls_per_compile": ctx.MAX_CALLS_PER_COMPILE,
    "latency_target_ms": ctx.MAX_LATENCY_TARGET_MS,
    "memory_budget_mb": ctx.MAX_MEMORY_BUDGET_MB,
    "shape_ranges": [{"input": "x" * ctx.MAX_INPUT_NAME, "dim": ctx.MAX_DIM_INDEX, "min": 1, "max": ctx.MAX_DIM_SIZE}]
    * ctx.MAX_SHAPE_RANGES,
    "accuracy_tolerance": {"atol": ctx.MAX_TOLERANCE, "rtol": ctx.MAX_TOLERANCE},
    "shape_sweep": [{"x" * ctx.MAX_INPUT_NAME: [ctx.MAX_DIM_SIZE] * (ctx.MAX_DIM_INDEX + 1)}] * ctx.MAX_SWEEP_POINTS,
}


def errors_of(data) -> dict[str, str]:  # noqa: ANN001
    with pytest.raises(ContextError) as info:
        parse_context(data)
    return {error["field"]: error["message"] for error in info.value.errors}


def json_errors_of(raw: str) -> dict[str, str]:
    with pytest.raises(ContextError) as info:
        parse_context_json(raw)
    return {error["field"]: error["message"] for error in info.value.errors}


def test_the_largest_values_are_accepted():
    assert parse_context(LARGEST).expected_calls_per_compile == 10**15


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("expected_calls_per_compile", ctx.MAX_CALLS_PER_COMPILE + 1),
        ("expected_calls_per_compile", 10**400),
        ("latency_target_ms", ctx.MAX_LATENCY_TARGET_MS * 1.01),
        ("latency_target_ms", float("inf")),
        ("latency_target_ms", float("nan")),
        ("memory_budget_mb", ctx.MAX_MEMORY_BUDGET_MB + 1),
        ("memory_budget_mb", float("inf")),
        ("decode_tokens", ctx.MAX_DECODE_TOKENS + 1),
        ("decode_tokens", 0),
    ],
)
def test_numbers_past_their_maximum_are_refused_naming_the_field(field, value):
    errors = errors_of({field: value})
    assert list(errors) == [field]
    assert len(errors[field]) < 120


@pytest.mark.parametrize(
    ("shape_range", "field"),
    [
        ({"input": "x", "dim": ctx.MAX_DIM_INDEX + 1, "min": 1, "max": 2}, "shape_ranges.0.dim"),
        ({"input": "x", "dim": 0, "min": 1, "max": ctx.MAX_DIM_SIZE + 1}, "shape_ranges.0.max"),
        ({"input": "x" * (ctx.MAX_INPUT_NAME + 1), "dim": 0, "min": 1, "max": 2}, "shape_ranges.0.input"),
        ({"input": "", "dim": 0, "min": 1, "max": 2}, "shape_ranges.0.input"),
    ],
)
def test_shape_ranges_are_bounded(shape_range, field):
    assert field in errors_of({"shape_ranges": [shape_range]})


@pytest.mark.parametrize(
    ("point", "field"),
    [
        ({"x": [0, 64]}, "shape_sweep.0.x.0"),
        ({"x": [ctx.MAX_DIM_SIZE + 1]}, "shape_sweep.0.x.0"),
        ({"x": [1] * (ctx.MAX_DIM_INDEX + 2)}, "shape_sweep.0.x"),
        ({"x": "1x64"}, "shape_sweep.0.x"),
        ({}, "shape_sweep.0"),
        ({f"x{i}": [1] for i in range(ctx.MAX_SWEEP_INPUTS + 1)}, "shape_sweep.0"),
        ({"x" * (ctx.MAX_INPUT_NAME + 1): [1]}, "shape_sweep.0"),
    ],
)
def test_sweep_points_are_bounded(point, field):
    errors = errors_of({"shape_sweep": [point]})
    assert any(name.startswith(field) for name in errors), errors
    assert all(len(message) < 200 for message in errors.values())


def test_lists_and_tolerances_are_bounded():
    assert "shape_sweep" in errors_of({"shape_sweep": [{"x": [1]}] * (ctx.MAX_SWEEP_POINTS + 1)})
    too_many = [{"input": "x", "dim": 0, "min": 1, "max": 2}] * (ctx.MAX_SHAPE_RANGES + 1)
    assert "shape_ranges" in errors_of({"shape_ranges": too_many})
    assert "accuracy_tolerance.atol" in errors_of({"accuracy_tolerance": {"atol": ctx.MAX_TOLERANCE * 2}})
    assert "accuracy_tolerance.rtol" in errors_of({"accuracy_tolerance": {"rtol": float("nan")}})


def test_a_5000_digit_integer_is_refused_naming_the_field_without_echoing_it():
    errors = json_errors_of('{"expected_calls_per_compile": ' + "9" * 5000 + "}")
    assert list(errors) == ["expected_calls_per_compile"]
    assert "5000 digits" in errors["expected_calls_per_compile"] and "9999" not in errors["expected_calls_per_compile"]


def test_integers_of_up_to_40_digits_reach_the_range_check():
    data = parse_context_json('{"expected_calls_per_compile": ' + "9" * 40 + "}")
    assert "expected_calls_per_compile" in errors_of(data)


@pytest.mark.parametrize(
    "raw",
    [
        '{"shape_ranges": ' + "[" * 100_000,  # too large
        '{"shape_ranges": ' + "[" * 20_000 + "]" * 20_000 + "}",  # RecursionError inside json.loads
        "[" * 5_000 + "]" * 5_000,
        '{"extra": ' + '{"a": ' * 20 + "1" + "}" * 21,
    ],
)
def test_deep_or_huge_json_is_a_context_error_not_a_crash(raw):
    errors = json_errors_of(raw)
    assert errors and all(len(field) <= ctx.MAX_ECHO and len(message) < 200 for field, message in errors.items())


def test_nesting_is_reported_at_its_field():
    errors = json_errors_of('{"extra": ' + '{"a": ' * 20 + "1" + "}" * 21)
    assert [field.split(".")[0] for field in errors] == ["extra"]
    assert "nested too deeply" in next(iter(errors.values()))


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_json_numbers_are_refused(literal):
    assert json_errors_of(f'{{"latency_target_ms": {literal}}}') == {
        "latency_target_ms": f"{literal} is not a number here (finite numbers only)"
    }


def test_other_json_problems_keep_their_messages():
    assert json_errors_of("{stage:")["context"].startswith("not valid JSON")
    assert json_errors_of('"production"') == {"context": "must be a JSON object"}
    assert parse_context_json("") == {} and parse_context_json(b'{"stage": "edge"}') == {"stage": "edge"}


def test_messages_never_echo_a_huge_value():
    huge = "x" * 100_000
    shape_range = {"input": "x", "dim": 0, "min": 1, "max": 2, huge: 1}
    errors = errors_of({huge: 1, "stage": huge, "shape_ranges": [shape_range]})
    assert all(len(field) <= ctx.MAX_ECHO and len(message) <= 300 for field, message in errors.items())
    assert "unknown field" in errors.values()


def test_the_engine_and_every_report_format_handle_the_largest_values():
    context = parse_context(LARGEST)
    measurements = run(
        measurement("eager", median_ms=1e7, memory_mb=1e7),
        measurement("inductor", median_ms=1e-6, compile_s=1e7, eager_ms=1e7, memory_mb=1e7),
        device="npu",
    )
    for shapes in (inspection(), None):
        recommendation = decide(context, shapes, measurements)
        analysis = {
            "model_name": "m",
            "context": context.model_dump(),
            "inspection": shapes,
            "measurements": measurements,
            "recommendation": recommendation,
        }
        for fmt in ("text", "markdown"):
            assert render(analysis, fmt)
        json.loads(render(analysis, "json"), parse_constant=_refuse)  # no NaN / Infinity in the report


def _refuse(literal: str):  # noqa: ANN202
    raise AssertionError(f"the JSON report contains {literal}")


def test_one_json_valued_field_is_decoded_as_safely():
    from advisor.core.context import decode_json_value

    assert decode_json_value('[{"input": "x", "dim": 0, "min": 1, "max": 8}]', field="shape_ranges")[0]["max"] == 8
    for raw, where in (
        ("[" * 20_000 + "]" * 20_000, "shape_ranges"),
        ('[{"max": ' + "9" * 5000 + "}]", "shape_ranges.0.max"),
        ("[" * 9 + "]" * 9, "shape_ranges.0.0.0.0.0.0.0"),
    ):
        with pytest.raises(ContextError) as info:
            decode_json_value(raw, field="shape_ranges")
        assert info.value.errors[0]["field"] == where
