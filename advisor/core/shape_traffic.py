"""The shapes a deployment serves, as users have them: JSON Lines of observed calls, aggregated into the context's
`shape_traffic` (distinct shapes with weights), and checked against a model's inputs where their spec is known.

One line is one observed call: a JSON object mapping input names to shapes, `{"ids": [1, 61]}`, with an optional
positive integer `"count"` (how many calls had those shapes). Inputs nested in dicts, lists or tuples are named by
their path, `batch.input_ids` or `inputs.0`. Every problem is a TrafficError naming the line (1-based) it is on.
Torch-free: the server validates uploads without loading anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from advisor.core.context import (
    MAX_DIM_INDEX,
    MAX_DIM_SIZE,
    MAX_INPUT_NAME,
    MAX_SWEEP_INPUTS,
    MAX_TRAFFIC_SHAPES,
    MAX_TRAFFIC_WEIGHT,
    ContextError,
    _clip,
    decode_json_value,
)

MAX_TRAFFIC_BYTES = 64 * 1024 * 1024  # a day of calls, one short line each, fits many times over
MAX_LINE_CHARS = 16 * 1024
COUNT_KEY = "count"
# a path of identifiers and list indexes joined by dots: "x", "batch.input_ids", "inputs.0"
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")


class TrafficError(ValueError):
    """Traffic that cannot be used; the message names the line (or the entry) it is about."""


def parse_traffic_lines(lines: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """Aggregate JSON Lines of observed calls into `[{"shapes": {input: shape}, "weight": calls}]`, most frequent
    first. Blank lines are skipped. Refused with a TrafficError naming the line: a malformed line, a name that is
    not an input path, a shape that is not a list of positive integers, a rank that differs from an earlier line's
    for the same input, a different set of inputs than the first line's, a count that is not a positive integer,
    more than MAX_TRAFFIC_SHAPES distinct shapes, a total over MAX_TRAFFIC_WEIGHT calls, or no call at all."""
    weights: dict[tuple, int] = {}
    ranks: dict[str, int] = {}
    names: set[str] | None = None
    total = 0
    for number, raw in enumerate(lines, start=1):
        text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes | bytearray) else raw
        if not text.strip():
            continue
        shapes, count = _parse_line(text, number)
        names = names if names is not None else set(shapes)
        if set(shapes) != names:
            raise TrafficError(
                f"line {number}: names inputs {_names(shapes)}, but the first call named {_names(names)} "
                "(every line names the same inputs)"
            )
        for name, shape in shapes.items():
            if ranks.setdefault(name, len(shape)) != len(shape):
                raise TrafficError(f"line {number}: {_clip(name)} has rank {len(shape)}, earlier lines {ranks[name]}")
        key = tuple(sorted((name, tuple(shape)) for name, shape in shapes.items()))
        if key not in weights and len(weights) >= MAX_TRAFFIC_SHAPES:
            raise TrafficError(f"line {number}: more than {MAX_TRAFFIC_SHAPES} distinct shapes")
        weights[key] = weights.get(key, 0) + count
        total += count
        if total > MAX_TRAFFIC_WEIGHT:
            raise TrafficError(f"line {number}: more than {MAX_TRAFFIC_WEIGHT:,} calls in all")
    if not weights:
        raise TrafficError("no call in the traffic (every line was empty)")
    ordered = sorted(weights.items(), key=lambda item: (-item[1], item[0]))
    return [{"shapes": {name: list(shape) for name, shape in key}, "weight": weight} for key, weight in ordered]


def parse_traffic_text(data: str | bytes) -> list[dict[str, Any]]:
    """`parse_traffic_lines` of a whole file's text, refused over MAX_TRAFFIC_BYTES."""
    if len(data) > MAX_TRAFFIC_BYTES:
        raise TrafficError(f"the traffic file is over {MAX_TRAFFIC_BYTES // (1024 * 1024)} MiB")
    if isinstance(data, bytes | bytearray):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            line = bytes(data)[: exc.start].count(b"\n") + 1
            raise TrafficError(f"line {line}: not UTF-8 text") from None
    return parse_traffic_lines(data.splitlines())


def _parse_line(text: str, number: int) -> tuple[dict[str, list[int]], int]:
    if len(text) > MAX_LINE_CHARS:
        raise TrafficError(f"line {number}: longer than {MAX_LINE_CHARS} characters")
    try:
        call = decode_json_value(text, field=f"line {number}")
    except ContextError as exc:
        raise TrafficError("; ".join(f"{e['field']}: {e['message']}" for e in exc.errors)) from None
    if not isinstance(call, dict):
        raise TrafficError(f"line {number}: expected a JSON object of input name -> shape, got {_kind(call)}")
    count = call.pop(COUNT_KEY, 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1 or count > MAX_TRAFFIC_WEIGHT:
        raise TrafficError(f"line {number}: count must be a positive integer (at most {MAX_TRAFFIC_WEIGHT:,})")
    if not call:
        raise TrafficError(f"line {number}: names no input")
    if len(call) > MAX_SWEEP_INPUTS:
        raise TrafficError(f"line {number}: names more than {MAX_SWEEP_INPUTS} inputs")
    shapes = {}
    for name, shape in call.items():
        problem = name_problem(name) or shape_problem(shape)
        if problem:
            raise TrafficError(f"line {number}: {_clip(name)}: {problem}")
        shapes[name] = list(shape)
    return shapes, count


def name_problem(name: str) -> str | None:
    """Why `name` is not an input path, or None."""
    if len(name) > MAX_INPUT_NAME:
        return f"an input name longer than {MAX_INPUT_NAME} characters"
    if not _PATH.match(name):
        return "not an input name or path (identifiers and list indexes joined by dots, e.g. batch.input_ids)"
    return None


def shape_problem(shape: Any) -> str | None:
    """Why `shape` is not a list of positive sizes, or None."""
    if not isinstance(shape, list):
        return f"the shape must be a list of sizes, got {_kind(shape)}"
    if len(shape) > MAX_DIM_INDEX + 1:
        return f"more than {MAX_DIM_INDEX + 1} dimensions"
    for size in shape:
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_DIM_SIZE:
            return f"every size must be an integer from 1 to {MAX_DIM_SIZE}, got {_clip(repr(size), 20)}"
    return None


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def _names(names: Iterable[str]) -> str:
    return _clip(", ".join(sorted(names)) or "none")


def input_name(path: str, names: Iterable[str]) -> str | None:
    """The model input a traffic path names: the name itself, or the flat name torch.export gives an input nested
    in a dict or list (`batch.input_ids` -> `batch_input_ids`, `inputs.0` -> `inputs_0`); None when neither."""
    names = set(names)
    if path in names:
        return path
    flat = path.replace(".", "_")
    return flat if flat in names else None


def traffic_problems(
    entries: list[dict[str, Any]], inputs: list[dict], dynamic_dims: list[dict], *, exported: bool
) -> list[str]:
    """What makes the traffic unusable with a model whose inputs (the inspection's `inputs`: name, shape with
    symbols for the dynamic dims) and `dynamic_dims` (input, dim, min, max) are these: an input it does not have,
    a wrong rank, a size its dynamic dims' ranges forbid, and for an ExportedProgram (`exported`, whose other dims
    are static) a size that differs from a static dim. Each message names the entry (1-based, in the context's
    order); an empty list when the traffic fits."""
    specs = {spec.get("name"): spec.get("shape") or [] for spec in inputs if spec.get("name")}
    ranges = {(d.get("input"), d.get("dim")): (d.get("min"), d.get("max")) for d in dynamic_dims}
    problems: list[str] = []
    for index, entry in enumerate(entries, start=1):
        for name, shape in entry["shapes"].items():
            problem = _input_problem(name, shape, specs, ranges, exported)
            if problem:
                problems.append(f"shape_traffic entry {index}: {_clip(name)}: {problem}")
    return problems


def _input_problem(name: str, shape: list[int], specs: dict, ranges: dict, exported: bool) -> str | None:
    resolved = input_name(name, specs)
    if resolved is None:
        return f"the model has no input of this name (its inputs: {_names(specs)})"
    declared = specs[resolved]
    name = resolved
    if len(declared) != len(shape):
        return f"rank {len(shape)}, the model's input has rank {len(declared)} ({_shape_text(declared)})"
    for dim, (size, want) in enumerate(zip(shape, declared, strict=True)):
        if exported and isinstance(want, int) and size != want:
            return f"dim {dim} is {size}, but the model's input is static there ({want})"
        low, high = ranges.get((name, dim), (None, None))
        if (low is not None and size < low) or (high is not None and size > high):
            return f"dim {dim} is {size}, outside the range the model's dynamic dim allows ({low}..{high or 'inf'})"
    return None


def _shape_text(shape: list) -> str:
    return "x".join(str(size) for size in shape)


def entries_problem(entries: list[dict[str, Any]]) -> str | None:
    """Why a context's `shape_traffic` (given to the API directly) is not one traffic, or None: entries that
    name different inputs, a rank that changes, a shape given twice, a name that is not an input path."""
    seen: set[tuple] = set()
    first: dict[str, int] | None = None
    for index, entry in enumerate(entries, start=1):
        shapes = entry["shapes"]
        for name in shapes:
            problem = name_problem(name)
            if problem:
                return f"entry {index}: {_clip(name)}: {problem}"
        ranks = {name: len(shape) for name, shape in shapes.items()}
        first = first if first is not None else ranks
        if set(ranks) != set(first):
            return f"entry {index} names inputs {_names(ranks)}, entry 1 {_names(first)}"
        changed = [name for name in ranks if ranks[name] != first[name]]
        if changed:
            return f"entry {index}: {_clip(changed[0])} has rank {ranks[changed[0]]}, entry 1 {first[changed[0]]}"
        key = tuple(sorted((name, tuple(shape)) for name, shape in shapes.items()))
        if key in seen:
            return f"entry {index} repeats an earlier entry's shapes (give each distinct shape once, with its weight)"
        seen.add(key)
    return None
