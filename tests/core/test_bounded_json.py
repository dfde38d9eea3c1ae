"""advisor.core.bounded_json: what the parent parses from a child is measured for depth first, in linear time."""

from __future__ import annotations

import json
import time

import pytest

from advisor.core.bounded_json import MAX_DEPTH, TooDeep, loads, nesting_depth


def _nested(shape: str, levels: int) -> str:
    """`levels` of one container shape, closed, holding a string with brackets and escapes in it."""
    inner = json.dumps('a "[{" string \\ with ]] brackets')
    opening, closing = {"array": ("[", "]"), "object": ('{"k": ', "}"), "mixed": ('[{"k": ', "}]")}[shape]
    per_level = 2 if shape == "mixed" else 1
    count = levels // per_level
    return opening * count + inner + closing * count


@pytest.mark.parametrize("shape", ["array", "object", "mixed"])
@pytest.mark.parametrize("levels", [0, 1, 2, 10, MAX_DEPTH])
def test_depth_is_exact_up_to_the_limit_and_strings_do_not_count(shape: str, levels: int) -> None:
    text = _nested(shape, levels)
    assert nesting_depth(text) == (levels - levels % 2 if shape == "mixed" else levels)
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize("shape", ["array", "object", "mixed"])
@pytest.mark.parametrize("levels", [MAX_DEPTH + 2, 60_000, 1_000_000])
def test_deeper_than_the_limit_is_refused_before_parsing(shape: str, levels: int) -> None:
    text = _nested(shape, levels)
    started = time.monotonic()
    assert nesting_depth(text) > MAX_DEPTH
    with pytest.raises(TooDeep, match=f"deeper than {MAX_DEPTH} levels"):
        loads(text.encode(), "a progress line")
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "text",
    [
        "[" * 60_000,  # never closed: json.loads would recurse before it saw the end
        "[" * 60_000 + "]",
        '{"a": ' * 60_000,
        "[]" + "[" * 100 + '"unterminated',
        '"\\\\"' + "[" * 100,  # an escaped backslash ends the string: the brackets after it count
    ],
)
def test_unclosed_or_truncated_documents_cannot_hide_their_depth(text: str) -> None:
    assert nesting_depth(text) > MAX_DEPTH
    with pytest.raises(TooDeep):
        loads(text)


def test_brackets_inside_strings_and_escaped_quotes_are_not_nesting() -> None:
    text = json.dumps({"line": "[" * 10_000 + '\\"' + "{" * 10_000, "list": [[1]]})
    assert nesting_depth(text) == 3
    assert loads(text)["list"] == [[1]]


def test_wide_documents_are_measured_quickly() -> None:
    text = "[" + ",".join(['[[1], {"a": [2]}]'] * 1_000_000) + "]"  # 17 MB
    started = time.monotonic()
    assert nesting_depth(text) == 4
    assert time.monotonic() - started < 5


def test_not_json_stays_a_plain_value_error() -> None:
    with pytest.raises(ValueError) as caught:
        loads("[1, 2")
    assert not isinstance(caught.value, TooDeep)
