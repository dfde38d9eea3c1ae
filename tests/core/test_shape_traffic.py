"""Traffic in (issue 43): JSON Lines of observed calls aggregated into the context's shape_traffic; hostile lines
refused with the line named; the context field and its validator; traffic checked against a model's inputs."""

from __future__ import annotations

import json

import pytest

from advisor.core import context as ctx
from advisor.core.context import ContextError, parse_context
from advisor.core.shape_traffic import TrafficError, parse_traffic_text, traffic_problems


def lines(*calls: object) -> str:
    return "\n".join(call if isinstance(call, str) else json.dumps(call) for call in calls) + "\n"


def test_calls_are_aggregated_by_shape_with_counts_most_frequent_first() -> None:
    text = lines({"ids": [1, 61]}, {"ids": [1, 9], "count": 5}, "", {"ids": [1, 61], "count": 2}, {"ids": [1, 61]})
    assert parse_traffic_text(text) == [
        {"shapes": {"ids": [1, 9]}, "weight": 5},
        {"shapes": {"ids": [1, 61]}, "weight": 4},
    ]


def test_nested_paths_name_inputs_in_dicts_and_lists() -> None:
    traffic = parse_traffic_text(lines({"batch.input_ids": [2, 7], "batch.mask": [2, 7], "extra.0": [3]}))
    assert traffic[0]["shapes"] == {"batch.input_ids": [2, 7], "batch.mask": [2, 7], "extra.0": [3]}
    parse_context({"shape_traffic": traffic})  # the API takes the aggregate as it is


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (lines({"ids": [1, 4]}, "{not json"), 2, "not valid JSON"),
        (lines({"ids": [1, 4]}, [1, 2]), 2, "expected a JSON object"),
        (lines({"ids": [1, 4], "count": 0}), 1, "count must be a positive integer"),
        (lines({"ids": [1, 4], "count": -3}), 1, "count must be a positive integer"),
        (lines({"ids": [1, 4], "count": 2.5}), 1, "count must be a positive integer"),
        (lines({"ids": [1, 4], "count": True}), 1, "count must be a positive integer"),
        (lines({"ids": [1, 4]}, {"ids": [1, 0]}), 2, "every size must be an integer from 1"),
        (lines({"ids": [1, "4"]}), 1, "every size must be an integer from 1"),
        (lines({"ids": [1, 4]}, {"ids": [1, 4, 1]}), 2, "has rank 3, earlier lines 2"),
        (lines({"ids": [1, 4]}, {"mask": [1, 4]}), 2, "every line names the same inputs"),
        (lines({"ids": 4}), 1, "the shape must be a list"),
        (lines({"../etc": [1]}), 1, "not an input name or path"),
        (lines({"count": 3}), 1, "names no input"),
        (lines({"ids": [1, 4]}, '{"ids": [1, ' + "9" * 50 + "]}"), 2, "out of range"),
        (lines({"ids": [1, 4]}, '{"ids": [NaN]}'), 2, "not a number"),
        (lines({"ids": [1, 4]}, '{"ids": ' + "[" * 20 + "]" * 20 + "}"), 2, "nested too deeply"),
    ],
)
def test_bad_traffic_is_refused_naming_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(TrafficError) as info:
        parse_traffic_text(text)
    assert f"line {line}" in str(info.value)
    assert words in str(info.value)


def test_more_distinct_shapes_than_the_bound_is_refused_at_the_line_that_passes_it() -> None:
    text = lines(*({"ids": [1, n]} for n in range(1, ctx.MAX_TRAFFIC_SHAPES + 2)))
    with pytest.raises(TrafficError, match=f"line {ctx.MAX_TRAFFIC_SHAPES + 1}: more than"):
        parse_traffic_text(text)


def test_empty_huge_and_binary_files_are_refused() -> None:
    with pytest.raises(TrafficError, match="no call"):
        parse_traffic_text("\n\n")
    with pytest.raises(TrafficError, match="line 2: not UTF-8"):
        parse_traffic_text(b'{"ids": [1]}\n\xff\xfe\n')
    with pytest.raises(TrafficError, match="longer than"):
        parse_traffic_text('{"ids": [1' + ", 1" * 10000 + "]}")
    with pytest.raises(TrafficError, match="over 64 MiB"):
        parse_traffic_text(b" " * (64 * 1024 * 1024 + 1))


def test_total_calls_are_bounded() -> None:
    big = ctx.MAX_TRAFFIC_WEIGHT
    with pytest.raises(TrafficError, match="line 2: more than"):
        parse_traffic_text(lines({"ids": [1], "count": big}, {"ids": [2], "count": 1}))


@pytest.mark.parametrize(
    ("traffic", "words"),
    [
        ([{"shapes": {"ids": [1, 4]}, "weight": 0}], "greater than or equal to 1"),
        ([{"shapes": {"ids": [1, 4]}}, {"shapes": {"ids": [1, 4]}}], "repeats an earlier entry"),
        ([{"shapes": {"ids": [1, 4]}}, {"shapes": {"ids": [4]}}], "has rank 1, entry 1 2"),
        ([{"shapes": {"ids": [1, 4]}}, {"shapes": {"x": [1, 4]}}], "names inputs x, entry 1 ids"),
        ([{"shapes": {"a b": [1]}}], "not an input name or path"),
        ([{"shapes": {"ids": [1, 4]}}] * 0 + [{"shapes": {"ids": [1, n]}} for n in range(1, 300)], "at most 256"),
    ],
)
def test_the_context_refuses_traffic_that_is_not_one_traffic(traffic: list, words: str) -> None:
    with pytest.raises(ContextError) as info:
        parse_context({"shape_traffic": traffic})
    assert words in str(info.value)


def test_max_graphs_is_bounded() -> None:
    assert parse_context({"max_graphs": 3}).max_graphs == 3
    for bad in (0, -1, ctx.MAX_GRAPHS + 1, "many"):
        with pytest.raises(ContextError, match="max_graphs"):
            parse_context({"max_graphs": bad})


INPUTS = [{"name": "ids", "shape": [1, "s0"]}, {"name": "batch_mask", "shape": [1, "s0"]}]
DYNAMIC = [{"input": "ids", "dim": 1, "min": 2, "max": 128}, {"input": "batch_mask", "dim": 1, "min": 2, "max": 128}]


def test_traffic_that_fits_the_exported_program_has_no_problem() -> None:
    entries = [{"shapes": {"ids": [1, 61], "batch.mask": [1, 61]}, "weight": 3}]
    assert traffic_problems(entries, INPUTS, DYNAMIC, exported=True) == []


@pytest.mark.parametrize(
    ("shapes", "words"),
    [
        ({"idz": [1, 8]}, "no input of this name (its inputs: batch_mask, ids)"),
        ({"ids": [8]}, "rank 1, the model's input has rank 2"),
        ({"ids": [2, 8]}, "dim 0 is 2, but the model's input is static there (1)"),
        ({"ids": [1, 129]}, "outside the range the model's dynamic dim allows (2..128)"),
        ({"ids": [1, 1]}, "outside the range"),
    ],
)
def test_traffic_the_model_cannot_take_is_refused_naming_the_entry(shapes: dict, words: str) -> None:
    entries = [{"shapes": {"ids": [1, 8]}, "weight": 1}, {"shapes": shapes, "weight": 1}]
    problems = traffic_problems(entries, INPUTS, DYNAMIC, exported=True)
    assert problems and problems[0].startswith("shape_traffic entry 2")
    assert words in problems[0]


def test_a_torchscript_models_example_shape_does_not_bind_the_traffic() -> None:
    inputs = [{"name": "x", "shape": [2, 3, 32, 32]}]
    assert traffic_problems([{"shapes": {"x": [16, 3, 32, 32]}}], inputs, [], exported=False) == []
